"""composer.disagreement.pair_stats: the statistics of a pair set (counts, positions, margins, leave-one-teacher-out,
grounding), on hand-built inputs with hand-computed expectations (rliable style).

    .venv/bin/pytest tests/test_disagreement_pair_stats.py
"""

import math

import pytest

from composer import stats
from composer.disagreement import pair_stats, pairs
from hand_records import CAT, LS, query, step, three_traces


def test_count_summary():
    s = pair_stats.count_summary([5, 5, 5, 5])
    assert (s["mean"], s["ci_low"], s["ci_high"], s["method"], s["meets_threshold"]) == (5, 5, 5, "degenerate", True)
    s = pair_stats.count_summary([0, 10, 0, 10])
    assert s["median"] == 5 and s["mean"] == 5 and s["ci_low"] < 5 and s["meets_threshold"] is False
    assert pair_stats.count_summary([7])["meets_threshold"] is None and pair_stats.count_summary([])["n"] == 0
    assert pair_stats.pairs_per_trace([{"trace_id": "a"}, {"trace_id": "a"}], ["a", "b"]) == {"a": 2, "b": 0}


def test_position_and_breakdown():
    assert [pair_stats.position_bucket(s, 10) for s in (0, 1, 2, 5, 9)] == [0, 0, 1, 2, 4]
    assert pair_stats.position_bucket(2, 3, bins=5) == 3 and pair_stats.position_bucket(0, 0) == 0
    rows = [{"rule": "a", "step": 0, "n_steps": 10}, {"rule": "b", "step": 9, "n_steps": 10},
            {"rule": "a", "step": 8, "n_steps": 10}]
    assert pair_stats.breakdown(rows) == {"by_rule": {"a": 2, "b": 1},
                                     "by_position": {0: {"a": 1}, 1: {}, 2: {}, 3: {}, 4: {"b": 1, "a": 1}}}


def test_margin_distance_hand_values():
    d = pair_stats.margin_distance([0.5, 0.5], [-0.5, -0.5], bins=2)
    # histograms [0, 2] and [2, 0], + 0.5 each: p = [1/6, 5/6], q = [5/6, 1/6]
    assert d["kl_real_random_bits"] == pytest.approx((5 / 6 - 1 / 6) * math.log2(5))
    assert d["js_bits"] == pytest.approx(stats.js_divergence([1, 5], [5, 1], base=2))
    assert (d["auroc"], d["auroc_ci_low"], d["auroc_method"]) == (1.0, 1.0, "degenerate")
    same = pair_stats.margin_distance([0.1, 0.3, 0.7], [0.1, 0.3, 0.7])
    assert same["kl_real_random_bits"] == 0 and same["js_bits"] == 0 and same["auroc"] == 0.5
    empty = pair_stats.margin_distance([], [0.1])
    assert empty["auroc"] is None and empty["js_bits"] is None
    h_real, h_rand, edges = pair_stats.margin_histograms([2.0, -3.0], [0.0], bins=4)  # outside the range: clipped in
    assert h_real.tolist() == [1, 0, 0, 1] and h_rand.tolist() == [0, 0, 1, 0] and edges[0] == -1


def test_leave_one_teacher_out_hand_values():
    by_trace = {"L": [step("L", 0, 2, "y"), step("L", 1, 2, "y")]}
    agree = {"x": 0.9, "y": 0.1}
    qs = [query("L", 0, t, agree) for t in ("t1", "t2", "t3")]
    # step 1: t3 prefers the student's action: held out, it disagrees with the pair the other two make
    qs += [query("L", 1, "t1", agree), query("L", 1, "t2", agree), query("L", 1, "t3", {"y": 0.6, "x": 0.4})]
    ex = pairs.extract(by_trace, qs)
    loto = pair_stats.leave_one_teacher_out(ex)
    # held out t1 or t2: the others are {x, x} (step 0) and {x, y} (step 1, no majority) -> one pair, a win each;
    # held out t3: x, x at both steps -> two pairs; t3 wins at step 0 and loses at step 1
    assert {t: (v["wins"], v["losses"]) for t, v in loto["per_teacher"].items()} == {
        "t1": (1, 0), "t2": (1, 0), "t3": (1, 1)}
    pooled = loto["pooled"]
    assert (pooled["wins"], pooled["losses"], pooled["n"]) == (3, 1, 4)
    # a malformed student call makes rule-3 pairs, but none the held-out teacher is asked about
    by_trace["L"].append(step("L", 2, 3, None))
    ex = pairs.extract(by_trace, qs + [query("L", 2, t, agree) for t in ("t1", "t2", "t3")])
    assert [r["rule"] for r in ex.rows][-1] == "majority_over_malformed"
    assert pair_stats.leave_one_teacher_out(ex)["pooled"]["n"] == 4
    assert pooled["p_value"] == pytest.approx(5 / 16)  # P(X >= 3 | n=4, 1/2)
    assert pooled["ci_low"] == pytest.approx(stats.wilson_interval(3, 4).low)


def test_grounding():
    rows = [{"trace_id": "a", "outcome_resolved": True, "chosen_action": "x", "rejected_action": "s", "student_action": "s"},
            {"trace_id": "a", "outcome_resolved": True, "chosen_action": "s", "rejected_action": "m", "student_action": "s"},
            {"trace_id": "b", "outcome_resolved": False, "chosen_action": "x", "rejected_action": "s", "student_action": "s"},
            {"trace_id": "c", "outcome_resolved": None, "chosen_action": "x", "rejected_action": "y", "student_action": "s"}]
    g = pair_stats.grounding(rows)
    assert (g["resolved"]["agent_chosen"], g["resolved"]["agent_rejected"], g["resolved"]["share_chosen"]) == (1, 1, 0.5)
    assert g["resolved"]["ci_low"] == pytest.approx(stats.wilson_interval(1, 2).low)
    assert (g["unresolved"]["share_chosen"], g["unresolved"]["traces"]) == (0.0, 1)
    assert g["unknown"]["neither"] == 1 and g["unknown"]["share_chosen"] is None


def test_disagreement_summary():
    by_trace, qs = three_traces()
    ex = pairs.extract(by_trace, qs)
    s = pair_stats.disagreement_summary(ex.steps)
    assert s["majority_over_student"]["steps"] == 1 and s["student_over_minority"]["steps"] == 1
    assert s["majority_over_malformed"] == {"steps": 1, "mean_gjs_bits": 0.0, "mean_vote_entropy_bits": 0.0}  # A2
    gjs_a0 = pairs.teacher_disagreement(ex.distributions[("A", 0)])
    assert s["majority_over_student"]["mean_gjs_bits"] == pytest.approx(gjs_a0)
    # no pair, with >= 2 teachers: A1, B1 (one parsed teacher: GJS None, left out), C0 (duplicate)
    assert s["no pair"]["steps"] == 2


def test_describe():
    by_trace, qs = three_traces()
    row = pairs.extract(by_trace, qs).rows[0]
    d = pair_stats.describe(row)
    assert d["step"] == "0/3" and d["chosen"] == CAT and d["rejected"] == LS and d["last observation"] == "task at 0"
    assert d["votes"] == "t1: cat a.py, t2: cat a.py, t3: ls"
