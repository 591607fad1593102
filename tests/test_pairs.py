"""composer.pairs: the rules, the controls, the datasets and the statistics, on hand-built inputs with
hand-computed expectations (rliable style).

    .venv/bin/pytest tests/test_pairs.py
"""

import asyncio
import contextlib
import hashlib
import json
import math
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from composer import pair_stats, pairs, policy_teachers, reference_pairs, replay, stats
from composer.policy_teachers import lenient_tool_call, query_policy_teachers
from composer.reference_pairs import embedded_traces, expert_pairs
from composer.paths import ROOT
from composer.teachers import OTHER, TeacherQuery
from composer.actions import canonical_tool_call
from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall

VIEW = canonical_tool_call("view", {"path": "a.py"})
GREP = "grep x"
CAT, LS, PWD = "cat a.py", "ls", "pwd"


def step(trace_id, t, n, action, *, history="", outcome=None, reward=None):
    """A StepRecord whose action is `action` (a bash command, VIEW, or None: a malformed call)."""
    if action is None:
        act = Action(text="garbage")
    elif action == VIEW:
        act = Action(text="v", tool_call=ToolCall(name="view", arguments={"path": "a.py"}))
    else:
        act = Action(text=action, tool_call=ToolCall(name="bash", arguments={"command": action}))
    last = t == n - 1
    return StepRecord(schema_version=SCHEMA_VERSION, trace_id=trace_id, step=t,
                      state=State(messages=[{"role": "system", "content": "sys"},
                                            {"role": "user", "content": f"task {history} at {t}"}]),
                      action=act, observation="out", reward=reward if last else None, done=last, truncated=False,
                      source="test", task_id=f"task-{trace_id}", outcome=outcome if last else None)


def query(trace_id, t, teacher, distribution, *, sample=0, mode="topk", error=None, parse_error=None, raw=None):
    return TeacherQuery(trace_id=trace_id, step=t, teacher=teacher, model=f"m-{teacher}", model_used=None,
                        provider=None, mode=mode, sample=sample, context="full", cache=False, student_action=None,
                        distribution=distribution, raw_text=raw, parse_error=parse_error,
                        error_kind="server_error" if error else None, error=error, request_key="k")


@pytest.fixture
def run():
    """Trace A: rule 1 at step 0, no majority at step 1 (a tie), a malformed student call at step 2 (rule 3).
    Trace B: rule 2 at step 0; step 1 has one parse failure and a missing record (too few voters).
    Trace C: the very state and answers of B's step 0 (a duplicate)."""
    by_trace = {
        "A": [step("A", 0, 3, LS), step("A", 1, 3, VIEW), step("A", 2, 3, None, outcome={"resolved": True})],
        "B": [step("B", 0, 2, LS, history="b"), step("B", 1, 2, LS, history="b", reward=0.0)],
        "C": [step("C", 0, 1, LS, history="b", reward=1.0)],
    }
    # C's first state equals B's: same history text and step
    by_trace["C"][0] = by_trace["C"][0].model_copy(update={"state": by_trace["B"][0].state})
    qs = [
        query("A", 0, "t1", {CAT: 0.6, LS: 0.4}), query("A", 0, "t2", {CAT: 0.7, LS: 0.3}), query("A", 0, "t3", {LS: 1.0}),
        query("A", 1, "t1", {VIEW: 1.0}), query("A", 1, "t2", {VIEW: 0.5, GREP: 0.5}), query("A", 1, "t3", {GREP: 1.0}),
        query("A", 2, "t1", {CAT: 1.0}), query("A", 2, "t2", {CAT: 1.0}), query("A", 2, "t3", {CAT: 1.0}),
        query("B", 0, "t1", {LS: 1.0}), query("B", 0, "t2", {LS: 0.8, PWD: 0.2}), query("B", 0, "t3", {PWD: 1.0}),
        query("B", 1, "t1", {LS: 1.0}), query("B", 1, "t2", None, parse_error="no JSON"),
        query("C", 0, "t1", {LS: 1.0}), query("C", 0, "t2", {LS: 0.8, PWD: 0.2}), query("C", 0, "t3", {PWD: 1.0}),
    ]
    return by_trace, qs


# ------------------------------------------------------------------------------------------------- one step


def test_top_action():
    assert pairs.top_action({"x": 0.2, "y": 0.8}) == "y"
    assert pairs.top_action({OTHER: 0.9, "x": 0.1}) == "x"  # the unseen mass is never an action
    assert pairs.top_action({"y": 0.5, "x": 0.5}) is None
    assert pairs.top_action({"y": 0.5, "x": 0.5}, ties="lexicographic") == "x"
    assert pairs.top_action({}) is None and pairs.top_action({OTHER: 1.0}) is None


def test_majority_action():
    assert pairs.majority_action({"a": "x", "b": "x", "c": "y"}) == "x"
    assert pairs.majority_action({"a": "x", "b": None, "c": "y"}) is None  # 1 vs 1
    assert pairs.majority_action({"a": "x", "b": "y"}, majority=0.4) is None  # a tie is never a majority
    assert pairs.majority_action({"a": "x", "b": "x", "c": "y", "d": "y"}) is None
    # 2 of 4 is not > 0.5, but is > 0.4 when the other two split
    assert pairs.majority_action({"a": "x", "b": "x", "c": "y", "d": "z"}) is None
    assert pairs.majority_action({"a": "x", "b": "x", "c": "y", "d": "z"}, majority=0.4) == "x"
    assert pairs.majority_action({"a": None}) is None


def test_step_pairs_rule_1_and_margin():
    dists = {"t1": {CAT: 0.6, LS: 0.4}, "t2": {CAT: 0.7, LS: 0.3}, "t3": {LS: 1.0}}
    found, status = pairs.step_pairs(LS, dists)
    assert status == "paired"
    [p] = found
    assert (p["rule"], p["chosen_action"], p["rejected_action"]) == ("majority_over_student", CAT, LS)
    # mean p(cat) = 1.3/3, mean p(ls) = 1.7/3: the majority's top can have the lower mean probability
    assert p["margin"] == pytest.approx(-0.4 / 3)
    assert (p["chosen_votes"], p["rejected_votes"], p["n_voting"]) == (2, 1, 3)
    [v] = pairs.step_pairs(LS, dists, pairs.PairParams(margin="votes"))[0]
    assert v["margin"] == pytest.approx(1 / 3)
    assert pairs.step_pairs(LS, dists, pairs.PairParams(min_margin=0.0)) == ([], "below min_margin")
    assert pairs.step_pairs(LS, dists, pairs.PairParams(rules=("student_over_minority",)))[0] == []


def test_step_pairs_rule_2_one_pair_per_distinct_minority_action():
    dists = {"t1": {LS: 1.0}, "t2": {LS: 0.8, PWD: 0.2}, "t3": {PWD: 1.0}, "t4": {CAT: 1.0}, "t5": {LS: 1.0}}
    found, _ = pairs.step_pairs(LS, dists)
    assert [(p["rule"], p["chosen_action"], p["rejected_action"]) for p in found] == [
        ("student_over_minority", LS, CAT), ("student_over_minority", LS, PWD)]
    assert found[1]["margin"] == pytest.approx((1 + 0.8 + 0 + 0 + 1) / 5 - (0 + 0.2 + 1 + 0 + 0) / 5)
    # unanimous with the student: nothing to learn
    assert pairs.step_pairs(LS, {"t1": {LS: 1.0}, "t2": {LS: 1.0}}) == ([], "student is the majority, no minority")


def test_step_pairs_ties_and_bad_input():
    dists = {"t1": {VIEW: 1.0}, "t2": {VIEW: 0.5, GREP: 0.5}, "t3": {GREP: 1.0}}
    assert pairs.step_pairs(VIEW, dists) == ([], "no majority")  # t2 abstains: 1 vs 1
    [p], _ = pairs.step_pairs(VIEW, dists, pairs.PairParams(ties="lexicographic"))  # t2 votes "grep x"
    assert (p["chosen_action"], p["rejected_action"], p["margin"]) == (GREP, VIEW, pytest.approx(0.0))
    assert pairs.step_pairs(None, dists) == ([], "no student action")
    assert pairs.step_pairs(None, dists, malformed="oops") == ([], "no majority")
    assert pairs.step_pairs(VIEW, {}) == ([], "not queried")
    assert pairs.step_pairs(VIEW, {"t1": {VIEW: 1.0}}) == ([], "too few voting teachers")
    with pytest.raises(ValueError, match="majority"):
        pairs.PairParams(majority=1.0)
    with pytest.raises(ValueError, match="rules"):
        pairs.PairParams(rules=("nope",))


def test_step_pairs_rule_3_the_majority_over_a_malformed_call():
    dists = {"t1": {CAT: 0.9, LS: 0.1}, "t2": {CAT: 1.0}, "t3": {LS: 1.0}}
    [p], status = pairs.step_pairs(None, dists, malformed='<tool_call>{"name": "bash"')
    assert status == "paired"
    assert (p["rule"], p["chosen_action"], p["rejected_action"]) == (
        "majority_over_malformed", CAT, '<tool_call>{"name": "bash"')
    assert p["margin"] == pytest.approx(1.9 / 3) and (p["chosen_votes"], p["rejected_votes"]) == (2, 0)
    off = pairs.PairParams(rules=("majority_over_student", "student_over_minority"))
    assert pairs.step_pairs(None, dists, off, malformed="x") == ([], "no student action")
    assert pairs.step_pairs(None, {}, malformed="x") == ([], "not queried")


def test_disagreement_measures():
    assert pairs.teacher_disagreement({"a": {"x": 1.0}, "b": {"y": 1.0}}) == pytest.approx(1.0)
    assert pairs.teacher_disagreement({"a": {"x": 1.0}, "b": {"x": 1.0}, "c": {"x": 1.0}}) == 0.0
    assert pairs.teacher_disagreement({"a": {"x": 1.0}}) is None
    assert pairs.teacher_disagreement({"a": {"x": 1}, "b": {"y": 1}, "c": {"z": 1}}) == pytest.approx(math.log2(3))
    assert pairs.vote_entropy({"a": "x", "b": "x", "c": "y"}) == pytest.approx(
        -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3)))
    assert pairs.vote_entropy({"a": "x", "b": None}) == 0.0
    assert pairs.vote_entropy({"a": None}) is None


def test_render_action_round_trips_canonical_actions():
    action = canonical_tool_call("view", {"start": 3, "path": "a.py"})
    assert pairs.parse_canonical(action) == ("view", {"path": "a.py", "start": 3})
    assert pairs.parse_canonical("ls -la | head") == ("bash", {"command": "ls -la | head"})
    text = pairs.render_action(action)
    assert text == '<tool_call>\n{"name": "view", "arguments": {"path": "a.py", "start": 3}}\n</tool_call>'
    # a representative keeps the student's own argument order
    assert pairs.render_action(action, ("view", {"start": 3, "path": "a.py"})).index('"start"') < text.index('"path"') + 40
    assert json.loads(text.split("\n")[1]) == {"name": "view", "arguments": {"path": "a.py", "start": 3}}


# ------------------------------------------------------------------------------------------------ a whole run


def test_extract(run):
    by_trace, qs = run
    ex = pairs.extract(by_trace, qs)
    assert [(r["trace_id"], r["step"], r["rule"], r["chosen_action"], r["rejected_action"]) for r in ex.rows] == [
        ("A", 0, "majority_over_student", CAT, LS), ("A", 2, "majority_over_malformed", CAT, "garbage"),
        ("B", 0, "student_over_minority", LS, PWD)]
    assert ex.rows[2]["margin"] == pytest.approx(0.2)  # (1 + .8 + 0)/3 - (0 + .2 + 1)/3
    # rule 3: the student's text as generated is the rejected completion, and the action the agent took
    assert (ex.rows[1]["rejected"], ex.rows[1]["student_action"], ex.rows[1]["margin"]) == ("garbage", "garbage", 1.0)
    status = {(s["trace_id"], s["step"]): s["status"] for s in ex.steps}
    assert status == {("A", 0): "paired", ("A", 1): "no majority", ("A", 2): "paired",
                      ("B", 0): "paired", ("B", 1): "too few voting teachers", ("C", 0): "paired"}
    p = ex.problems
    assert p["duplicates_removed"] == 1  # C's step 0 is B's
    assert "no_student_action" not in p and p["missing_teacher_records"] == 1 and p["unparsed_answers"] == 1
    off = pairs.extract(by_trace, qs, pairs.PairParams(rules=("majority_over_student", "student_over_minority")))
    assert [r["rule"] for r in off.rows] == ["majority_over_student", "student_over_minority"]
    assert off.problems["no_student_action"] == 1
    assert pair_stats.grounding(ex.rows)["resolved"]["agent_rejected"] == 2  # A0 (ls) and A2 (its malformed text)
    assert p["teachers_never_parsed"] == [] and p.get("teacher_errors", 0) == 0
    assert ex.teacher_health["t2"] == {"calls": 6, "errors": 0, "answered": 6, "parsed": 5, "parsed_share": 5 / 6}
    row = ex.rows[0]
    assert row["prompt"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "task  at 0"}]
    assert row["chosen"] == pairs.render_action(CAT) and row["rejected"] == pairs.render_action(LS)
    assert row["votes"] == [{"teacher": "t1", "action": CAT, "p_chosen": 0.6, "p_rejected": 0.4},
                            {"teacher": "t2", "action": CAT, "p_chosen": 0.7, "p_rejected": 0.3},
                            {"teacher": "t3", "action": LS, "p_chosen": 0.0, "p_rejected": 1.0}]
    assert row["outcome_resolved"] is True and ex.rows[2]["outcome_resolved"] is False
    a0 = next(s for s in ex.steps if (s["trace_id"], s["step"]) == ("A", 0))
    assert a0["student_agrees"] is False and a0["majority"] == CAT and a0["vote_entropy"] == pytest.approx(
        stats.entropy([2, 1], base=2))


def test_extract_counts_a_teacher_that_never_parses_and_errors(run):
    by_trace, qs = run
    qs = qs + [query("A", 0, "t4", None, parse_error="x"), query("B", 0, "t4", None, error="boom")]
    ex = pairs.extract(by_trace, qs + [query("Z", 0, "t1", {LS: 1.0}), query("A", 9, "t1", {LS: 1.0})])
    assert ex.problems["records_for_unknown_steps"] == 2
    ex = pairs.extract(by_trace, qs)
    assert ex.problems["teachers_never_parsed"] == ["t4"] and ex.problems["teacher_errors"] == 1
    # t4 is expected at every queried step now: A1, A2, B1, C0 lack its records
    assert ex.problems["missing_teacher_records"] == 1 + 4
    assert len(ex.rows) == 3  # a silent teacher does not vote
    ex = pairs.extract(by_trace, qs, teachers=["t1", "t2", "t3", "t5"])
    assert "t5" in ex.problems["teachers_never_parsed"]


def test_extract_with_samples_mode_records():
    by_trace = {"S": [step("S", 0, 1, LS)]}
    qs = [query("S", 0, t, {a: 1.0}, sample=i, mode="samples")
          for t, answers in {"t1": [CAT, CAT, LS, CAT], "t2": [CAT, LS, LS, CAT], "t3": [LS, LS, LS, PWD]}.items()
          for i, a in enumerate(answers)]
    qs.append(query("S", 0, "t3", None, sample=4, mode="samples", parse_error="no tool call"))
    ex = pairs.extract(by_trace, qs)
    # t1: cat 3/4; t2: cat 1/2 = ls 1/2 (abstains); t3: ls 3/4 (the unparsed sample is left out) -> 1 vs 1
    assert ex.rows == [] and ex.steps[0]["status"] == "no majority"
    ex = pairs.extract(by_trace, qs, pairs.PairParams(ties="lexicographic"))  # t2 -> "cat a.py"
    [row] = ex.rows
    assert row["margin"] == pytest.approx((0.75 + 0.5 + 0) / 3 - (0.25 + 0.5 + 0.75) / 3)


def test_extract_never_crashes_on_empty_input():
    ex = pairs.extract({"A": [step("A", 0, 1, LS)]}, [])
    assert ex.rows == [] and ex.problems["not_queried"] == 1
    assert pairs.random_pairs(ex) == [] and pairs.shuffled_pairs([]) == []
    assert len(pairs.to_dataset([])) == 0


# --------------------------------------------------------------------------------------------------- controls


def test_random_pairs(run):
    by_trace, qs = run
    ex = pairs.extract(by_trace, qs)
    rnd = pairs.random_pairs(ex, seed=0)
    assert len(rnd) == len(ex.rows) and rnd == pairs.random_pairs(ex, seed=0)
    for real, r in zip(ex.rows, rnd):
        assert (r["trace_id"], r["step"], r["prompt"]) == (real["trace_id"], real["step"], real["prompt"])
        assert r["control"] == "random" and r["rule"] == "random" and r["chosen_action"] != r["rejected_action"]
        dists = ex.distributions[(r["trace_id"], r["step"])]
        assert {r["chosen_action"], r["rejected_action"]} <= set(pairs.candidate_actions(r["student_action"], dists))
    # A0's candidates are exactly {cat, ls}: the random pair is the real one or its swap
    assert rnd[0]["margin"] == pytest.approx(ex.rows[0]["margin"] * (1 if rnd[0]["chosen_action"] == CAT else -1))
    orders = {pairs.random_pairs(ex, seed=s)[0]["chosen_action"] for s in range(20)}
    assert orders == {CAT, LS}
    # A2 (rule 3): the candidates are cat and the student's malformed text, which stays its text as generated
    a2 = pairs.random_pairs(ex, seed=0)[1]
    assert {a2["chosen_action"], a2["rejected_action"]} == {CAT, "garbage"}
    texts = {a2["chosen_action"]: a2["chosen"], a2["rejected_action"]: a2["rejected"]}
    assert texts == {CAT: pairs.render_action(CAT), "garbage": "garbage"}


def test_shuffled_pairs():
    rows = [{"pair_id": str(i), "chosen": f"c{i}", "rejected": f"r{i}", "chosen_action": f"C{i}",
             "rejected_action": f"R{i}", "chosen_votes": 2, "rejected_votes": 1, "margin": 0.5,
             "ref_chosen_logps": -1.0, "ref_rejected_logps": -2.0, "control": "real",
             "votes": [{"teacher": "t", "action": f"C{i}", "p_chosen": 0.9, "p_rejected": 0.1}]} for i in range(400)]
    out = pairs.shuffled_pairs(rows, seed=1)
    assert out == pairs.shuffled_pairs(rows, seed=1)
    swapped = [r for r in out if r["swapped"]]
    assert 150 < len(swapped) < 250  # Binomial(400, 1/2): 5 standard deviations either side
    for r in swapped:
        i = r["pair_id"]
        assert (r["chosen"], r["rejected"], r["chosen_action"], r["rejected_action"]) == (f"r{i}", f"c{i}", f"R{i}", f"C{i}")
        assert (r["margin"], r["chosen_votes"], r["ref_chosen_logps"], r["ref_rejected_logps"]) == (-0.5, 1, -2.0, -1.0)
        assert r["votes"][0]["p_chosen"] == 0.1
    kept = [r for r in out if not r["swapped"]]
    assert all(r["chosen"] == f"c{r['pair_id']}" and r["control"] == "shuffled" for r in kept)
    assert rows[0]["control"] == "real"  # the input is not modified


# -------------------------------------------------------------------------------------------------- datasets


def test_dataset_save_load_and_trainer_columns(run, tmp_path):
    from composer.models import load_tokenizer, tiny_model
    from composer.trainer import PAIR_COLUMNS, encode_pairs

    by_trace, qs = run
    ex = pairs.extract(by_trace, qs)
    ds = pairs.to_dataset(ex.rows)
    saved = pairs.save(ds, tmp_path / "pairs")
    back = pairs.load(saved["dataset"])
    assert back.column_names == ds.column_names and len(back) == 3
    lines = [json.loads(x) for x in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert [x["pair_id"] for x in lines] == [r["pair_id"] for r in ex.rows]
    assert lines[0]["prompt"] == ex.rows[0]["prompt"]  # Arrow's None-filled keys are dropped again

    path = tiny_model()
    tok = load_tokenizer(path)
    assert len(encode_pairs(tok, back)) == 3  # the trainer's own encoder reads the dataset as saved
    # with the student's tools, the DPO prompt renders the same tool block as a rollout prompt
    from composer.env.environment import tool_schemas
    with_tools = pairs.to_dataset(ex.rows, tool_schemas())
    prompt = encode_pairs(tok, with_tools)[0]["prompt"]
    rollout = tok.apply_chat_template(ex.rows[0]["prompt"], tools=tool_schemas(), add_generation_prompt=True,
                                      tokenize=True)
    assert prompt == list(rollout["input_ids"] if hasattr(rollout, "keys") else rollout)
    assert len(prompt) > len(encode_pairs(tok, back)[0]["prompt"])
    with_ref, skipped = pairs.add_reference_logps(back, path)
    assert skipped == 0 and set(PAIR_COLUMNS) <= set(with_ref.column_names)
    assert all(np.isfinite(with_ref["ref_chosen_logps"])) and all(x < 0 for x in with_ref["ref_rejected_logps"])
    assert with_ref["ref_chosen_logps"][0] != with_ref["ref_rejected_logps"][0]
    short, skipped = pairs.add_reference_logps(back, path, max_length=5)
    assert skipped == 3 and len(short) == 0


# ------------------------------------------------------------------------------------------------ statistics


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


def test_disagreement_summary(run):
    by_trace, qs = run
    ex = pairs.extract(by_trace, qs)
    s = pair_stats.disagreement_summary(ex.steps)
    assert s["majority_over_student"]["steps"] == 1 and s["student_over_minority"]["steps"] == 1
    assert s["majority_over_malformed"] == {"steps": 1, "mean_gjs_bits": 0.0, "mean_vote_entropy_bits": 0.0}  # A2
    gjs_a0 = pairs.teacher_disagreement(ex.distributions[("A", 0)])
    assert s["majority_over_student"]["mean_gjs_bits"] == pytest.approx(gjs_a0)
    # no pair, with >= 2 teachers: A1, B1 (one parsed teacher: GJS None, left out), C0 (duplicate)
    assert s["no pair"]["steps"] == 2


def test_describe(run):
    by_trace, qs = run
    row = pairs.extract(by_trace, qs).rows[0]
    d = pair_stats.describe(row)
    assert d["step"] == "0/3" and d["chosen"] == CAT and d["rejected"] == LS and d["last observation"] == "task at 0"
    assert d["votes"] == "t1: cat a.py, t2: cat a.py, t3: ls"


# --------------------------------------------------------------------------------------- teachers as policies


def test_clip_messages():
    msgs = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": "task"}]
    for i in range(4):
        msgs += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "content": f"o{i}"}]
    out = policy_teachers.clip_messages(msgs, window=2)
    assert [m["content"] for m in out] == ["s" * 10, "task", "a2", "o2", "a3", "o3"]
    out = policy_teachers.clip_messages(msgs, max_chars=4)
    assert out[0]["content"] == "ss\n[…]\nss" and out[1]["content"] == "task"
    assert policy_teachers.clip_messages(msgs) == msgs


def test_query_policy_teachers_against_the_echo_server(tmp_path):
    """The echo backend answers with the last user message: a tool call there comes back parsed as one."""
    from composer.env.environment import tool_schemas
    from composer.models import tiny_model
    from composer.serve import serve

    call = '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>'
    good = StepRecord(schema_version=SCHEMA_VERSION, trace_id="E", step=0,
                      state=State(messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": call}]),
                      action=Action(text="x", tool_call=ToolCall(name="view", arguments={"path": "a.py"})),
                      observation=None, reward=None, done=False, truncated=False, source="test")
    bad = good.model_copy(update={"step": 1, "done": True,
                                  "state": State(messages=[{"role": "user", "content": "no call here"}])})
    doubled = good.model_copy(update={"step": 2, "state": State(messages=[
        {"role": "user", "content": "<tool_call>\n" + call}])})  # a repeated opening tag: strict parsers refuse
    with serve(models={"teacher-a": tiny_model(), "teacher-b": tiny_model()}, backend="echo") as server:
        endpoints = {"teacher-a": {"base_url": server.base_url, "model": "teacher-a"},
                     "teacher-b": {"base_url": server.base_url, "model": "teacher-b"},
                     "missing": {"base_url": server.base_url, "model": "nope"}}
        records = asyncio.run(query_policy_teachers({"E": [good, bad, doubled]}, endpoints,
                                                                    tmp_path / "q.jsonl", k=3, tools=tool_schemas(),
                                                                    max_tokens=64))
        strict = asyncio.run(query_policy_teachers({"E": [doubled]}, endpoints, tmp_path / "s.jsonl", k=1,
                                                                   tools=tool_schemas(), max_tokens=64, lenient=False))
    assert [q.distribution for q in records if q.step == 2 and q.teacher == "teacher-a"] == [{VIEW: 1.0}] * 3
    [strict_a] = [q for q in strict if q.teacher == "teacher-a"]
    assert strict_a.distribution is None and "no well-formed" in strict_a.parse_error
    records = [q for q in records if q.step < 2]
    assert len(records) == 2 * 3 * 3
    assert [q for q in replay.read_queries(tmp_path / "q.jsonl") if q.step < 2] == records
    a0 = [q for q in records if q.teacher == "teacher-a" and q.step == 0]
    assert [q.distribution for q in a0] == [{VIEW: 1.0}] * 3 and a0[0].student_action == VIEW
    assert all(q.mode == "samples" and q.raw_text.startswith("<tool_call>") for q in a0)
    a1 = [q for q in records if q.teacher == "teacher-a" and q.step == 1]
    assert all(q.distribution is None and "no well-formed tool call" in q.parse_error for q in a1)
    missing = [q for q in records if q.teacher == "missing"]
    assert all(q.error_kind == "not_found" for q in missing)
    with serve(models={"teacher-a": tiny_model()}, backend="echo") as server:
        only = asyncio.run(query_policy_teachers(
            {"E": [good, bad]}, {"teacher-a": {"base_url": server.base_url, "model": "teacher-a"}},
            tmp_path / "q2.jsonl", k=2, steps={"E": [1]}))
    assert [(q.step, q.sample) for q in only] == [(1, 0), (1, 1)]
    ex = pairs.extract({"E": [good, bad]}, records)
    assert ex.steps[0]["status"] == "student is the majority, no minority"
    assert ex.problems["teachers_never_parsed"] == ["missing"] and ex.problems["unparsed_answers"] == 6


def test_query_policy_teachers_keeps_finished_steps_when_it_fails(tmp_path, monkeypatch):
    from composer.models import tiny_model
    from composer.serve import serve

    call = '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>'
    first = StepRecord(schema_version=SCHEMA_VERSION, trace_id="E", step=0,
                       state=State(messages=[{"role": "user", "content": call}]),
                       action=Action(text="x", tool_call=ToolCall(name="view", arguments={"path": "a.py"})),
                       observation=None, reward=None, done=False, truncated=False, source="test")
    second = first.model_copy(update={"step": 1, "state": State(messages=[{"role": "user", "content": "crash"}])})
    real = pairs.prompt_messages

    def crash_at_step_1(messages):
        if messages[-1]["content"] == "crash":
            raise RuntimeError("killed mid-run")
        return real(messages)

    monkeypatch.setattr(policy_teachers, "prompt_messages", crash_at_step_1)
    with serve(models={"teacher-a": tiny_model()}, backend="echo") as server:
        endpoints = {"teacher-a": {"base_url": server.base_url, "model": "teacher-a"}}
        with pytest.raises(RuntimeError, match="killed"):
            asyncio.run(query_policy_teachers({"E": [first, second]}, endpoints, tmp_path / "q.jsonl", k=2))
    kept = replay.read_queries(tmp_path / "q.jsonl")  # step 0 was answered before step 1 failed: it is on disk
    assert [(q.step, q.sample, q.distribution) for q in kept] == [(0, 0, {VIEW: 1.0}), (0, 1, {VIEW: 1.0})]


@contextlib.contextmanager
def counting_server(ignore_n=()):
    """A loopback OpenAI-compatible endpoint that logs the body of every request it gets (a paid provider bills
    each) and answers, after a short delay, each choice with a bash call naming the body's seed and the choice's
    index; models in ignore_n get one choice whatever n asks (OpenRouter's way). On leaving, every request that
    reached it is in the log (its handler threads are joined)."""
    sent: list[dict] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers["content-length"]))
            body = json.loads(raw)
            with lock:
                sent.append(body)
            time.sleep(0.02 + int(hashlib.sha256(raw).hexdigest()[:4], 16) % 40 / 1000)
            n = 1 if body["model"] in ignore_n else body.get("n", 1)
            calls = [{"id": f"call_{i}", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": f"echo {body['seed']}-{i}"})}} for i in range(n)]
            choices = [{"index": i, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]}}
                       for i, call in enumerate(calls)]
            answer = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"], "choices": choices,
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5 * n}}).encode()
            with contextlib.suppress(OSError):  # the client was killed while it waited
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = False  # server_close() joins the handlers
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", sent
    finally:
        server.shutdown()
        server.server_close()


def sample_counts(records):
    return Counter((q.trace_id, q.step, q.teacher, q.sample) for q in records)


def test_query_policy_teachers_asks_for_each_sample_an_endpoint_ignoring_n_left_out(tmp_path, capsys):
    by_trace = {"A": [step("A", t, 2, "ls") for t in range(2)]}
    path = tmp_path / "q.jsonl"
    with counting_server(ignore_n={"deaf"}) as (url, sent):
        endpoints = {name: {"base_url": url, "model": name} for name in ("honest", "deaf")}
        records = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=3, seed=10))
        assert "endpoint 'deaf' ignored n (asked for 3 samples, got 1)" in capsys.readouterr().out
        assert Counter((b["model"], b["n"]) for b in sent) == {("honest", 3): 2, ("deaf", 3): 2, ("deaf", 1): 4}
        assert policy_teachers.ignored_n(records) == ["deaf"]
        for t in range(2):
            honest, deaf = ([q for q in records if q.teacher == name and q.step == t] for name in ("honest", "deaf"))
            assert [next(iter(q.distribution)) for q in honest] == [f"echo {10 + t}-{i}" for i in range(3)]
            assert [next(iter(q.distribution)) for q in deaf] == [f"echo {10 + t + i}-0" for i in range(3)]
            assert len({q.request_key for q in honest}) == 1 and len({q.request_key for q in deaf}) == 3
            assert [q.prompt_tokens for q in deaf] == [10] * 3  # each request's usage, once
        sent.clear()
        again = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=3, seed=10))
    assert sent == [] and all(q.cached for q in again)  # every request answered from the store
    assert [q.model_copy(update={"cached": False}) for q in again] == records
    assert policy_teachers.ignored_n(again) == ["deaf"]
    assert replay.read_queries(path) == again and set(sample_counts(again).values()) == {1}


def test_query_policy_teachers_resumes_from_its_store(tmp_path):
    by_trace = {"E": [step("E", t, 3, "ls") for t in range(3)]}
    path = tmp_path / "q.jsonl"
    with counting_server() as (url, sent):
        endpoints = {"teacher-a": {"base_url": url, "model": "teacher-a", "revision": "v1"}}
        first = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=2))
        # a kill after step 2 was answered and before it was stored, which also tore the file's last line
        db = sqlite3.connect(tmp_path / replay.STORE_FILE)
        db.execute("DELETE FROM answers WHERE key = ?", (first[-1].request_key,))
        db.commit()
        db.close()
        path.write_text(path.read_text()[:-30])
        sent.clear()
        again = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=2))
        assert [b["seed"] for b in sent] == [2]  # only the request whose answer was not stored
        assert [q.cached for q in again] == [True] * 4 + [False] * 2
        assert [q.model_dump(exclude={"cached", "latency_s"}) for q in again] == [
            q.model_dump(exclude={"cached", "latency_s"}) for q in first]
        assert again[:4] == [q.model_copy(update={"cached": True}) for q in first[:4]]  # reused as they were
        assert replay.read_queries(path) == again  # afresh: each sample once
        sent.clear()  # another checkpoint behind the same name: nothing is reused
        asyncio.run(query_policy_teachers(by_trace, {"teacher-a": {**endpoints["teacher-a"], "revision": "v2"}},
                                                          path, k=2))
        assert len(sent) == 3
        sent.clear()
        fresh = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=2, resume=False))
        assert len(sent) == 3 and not any(q.cached for q in fresh)


def test_query_policy_teachers_sends_a_request_two_traces_share_once(tmp_path):
    # two rollouts of one task: the same first state, then different ones
    by_trace = {"A": [step("A", 0, 2, "ls"), step("A", 1, 2, "ls", history="a")],
                "B": [step("B", 0, 2, "ls"), step("B", 1, 2, "ls", history="b")]}
    with counting_server() as (url, sent):
        records = asyncio.run(query_policy_teachers(by_trace, {"t": {"base_url": url, "model": "t"}},
                                                                    tmp_path / "q.jsonl", k=2))
    assert len(sent) == 3  # not 4
    first = {(q.trace_id, q.step): q for q in records if q.sample == 0}
    assert first["A", 0].request_key == first["B", 0].request_key != first["B", 1].request_key
    assert first["A", 0].distribution == first["B", 0].distribution
    assert sorted(q.cached for q in records if q.step == 0) == [False, False, True, True]  # paid once
    assert sample_counts(records) == {(tid, t, "t", i): 1 for tid in "AB" for t in range(2) for i in range(2)}


KILLABLE_RUNS = """
import asyncio, os, signal, sys, time, traceback
from composer.policy_teachers import query_policy_teachers
from composer.traces import StepRecord

by_trace = {}
for line in open(sys.argv[1]):
    record = StepRecord.model_validate_json(line)
    by_trace.setdefault(record.trace_id, []).append(record)
print("ready", flush=True)
for url in iter(sys.stdin.readline, ""):  # a run against the server at URL, killed when a line says so
    url = url.strip()
    pid = os.fork()  # everything is imported already: the run starts at once
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            endpoints = {name: {"base_url": url, "model": name, "revision": "r1"} for name in ("honest", "deaf")}
            asyncio.run(query_policy_teachers(by_trace, endpoints, sys.argv[2], k=3))
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    print("started", flush=True)
    sys.stdin.readline()
    os.kill(pid, signal.SIGKILL)  # not reaped yet, so this pid is still the run's, finished or not
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)  # -9: killed
"""


def test_query_policy_teachers_killed_at_random_moments_never_repays_a_stored_answer(tmp_path):
    """kill -9 at seeded random moments, then resume: no request whose answer was stored is sent again (what
    was in flight at a kill may be), and the last run's file holds every planned sample once."""
    by_trace = {tid: [step(tid, t, 5, "ls", history=tid) for t in range(5)] for tid in ("A", "B")}
    traces_file, path, store = tmp_path / "traces.jsonl", tmp_path / "q.jsonl", tmp_path / replay.STORE_FILE
    traces_file.write_text("".join(r.model_dump_json() + "\n" for rs in by_trace.values() for r in rs))

    def key(body):
        return policy_teachers.policy_request_key(body["model"], "r1", body)

    def stored():
        if not store.exists():
            return set()
        db = sqlite3.connect(store)
        try:
            return {k for (k,) in db.execute("SELECT key FROM answers")}
        finally:
            db.close()

    requests = 2 * 5 * (1 + 3)  # per step: one to the endpoint honouring n, three to the one ignoring it
    rng = random.Random(3)
    repaid, sent_ever, outcomes = [], [], []
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE_RUNS, str(traces_file), str(path)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        while len(outcomes) < 6 and requests - len(before := stored()) > 1:
            # a random point: after a random number of requests have arrived, and a random delay more (in flight,
            # answered but not yet stored, stored but not yet written, ...); a loaded machine only slows it down
            arrived = rng.randint(1, min(10, requests - len(before) - 1))
            with counting_server(ignore_n={"deaf"}) as (url, sent):
                proc.stdin.write(url + "\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == "started\n"
                deadline = time.monotonic() + 30
                while len(sent) < arrived and time.monotonic() < deadline:
                    time.sleep(0.001)
                time.sleep(rng.uniform(0, 0.08))
                proc.stdin.write("kill\n")
                proc.stdin.flush()
                outcomes.append(int(proc.stdout.readline()))
            repaid += [key(b) for b in sent if key(b) in before]
            sent_ever += sent
    finally:
        proc.kill()
        proc.wait()
    assert outcomes.count(-9) >= 4, outcomes
    before = stored()
    with counting_server(ignore_n={"deaf"}) as (url, sent):
        endpoints = {name: {"base_url": url, "model": name, "revision": "r1"} for name in ("honest", "deaf")}
        records = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=3))
    repaid += [key(b) for b in sent if key(b) in before]
    sent_ever += sent
    assert repaid == []  # 0 re-paid stored answers
    planned = {(tid, t, name, i) for tid in by_trace for t in range(5) for name in ("honest", "deaf") for i in range(3)}
    for got in (records, replay.read_queries(path)):
        counts = sample_counts(got)
        assert set(counts) == planned and set(counts.values()) == {1}
    assert not any(q.error_kind for q in records) and policy_teachers.ignored_n(records) == ["deaf"]
    assert stored() == {q.request_key for q in records} <= {key(b) for b in sent_ever}  # the test's keys are right
    assert any(q.cached for q in records) and {q.request_key for q in records if q.cached} == before


def test_embedded_traces():
    records = embedded_traces(1, seed=0)
    assert records and records[-1].done and records[-1].outcome["resolved"] in (True, False)
    assert all(r.action.tool_call is not None and r.source == "composer-embedded" for r in records)
    assert [r.step for r in records] == list(range(len(records)))
    assert records[1].state.messages[-1]["role"] == "tool"


def test_tool_call_prompts_survive_arrow_and_render_as_the_student_saw_them():
    """Arrow gives every message every key (None where absent): the chat template must render the stored prompt
    exactly as the original chat, tool calls and tool answers included."""
    from composer.models import load_tokenizer, tiny_model

    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "view", "arguments": json.dumps({"path": "a.py"})}}]},
                {"role": "tool", "tool_call_id": "call_1", "name": "view", "content": "1: x = 1"}]
    record = StepRecord(schema_version=SCHEMA_VERSION, trace_id="T", step=1, state=State(messages=messages),
                        action=Action(text="t", tool_call=ToolCall(name="run_tests", arguments={})),
                        observation=None, reward=1.0, done=True, truncated=False, source="test")
    first = record.model_copy(update={"step": 0, "done": False, "reward": None,
                                      "state": State(messages=messages[:2])})
    qs = [query("T", 1, t, {VIEW: 1.0}) for t in ("t1", "t2")]
    ex = pairs.extract({"T": [first, record]}, qs)
    [row] = ex.rows
    stored = pairs.to_dataset(ex.rows)[0]["prompt"]
    assert any(v is None for m in stored for v in m.values())  # Arrow did fill absent keys
    tok = load_tokenizer(tiny_model())
    render = lambda ms: tok.apply_chat_template(ms, add_generation_prompt=True, tokenize=False)  # noqa: E731
    assert render(stored) == render(messages)
    assert row["rejected"] == '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'


def test_lenient_tool_call():
    assert lenient_tool_call('<tool_call>\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>') == (
        "run_tests", {})
    assert lenient_tool_call('x <tool_call>{"name": "view", "arguments": "{\\"path\\": \\"a\\"}"}') == (
        "view", {"path": "a"})  # arguments as a JSON string, no closing tag
    assert lenient_tool_call('<tool_call>\n{"name": "view", "arguments": {"path": ') is None  # cut mid-object
    assert lenient_tool_call('<tool_call>\n{"name": " "arguments": "run_tests"}}\n</tool_call>') is None
    assert lenient_tool_call('{"name": "view", "arguments": {}}') is None  # no tag: not a call
    assert lenient_tool_call('<tool_call>{"name": 3, "arguments": {}}</tool_call>') is None


def test_oracle_pairs_prefer_the_gold_edit_over_a_slip_at_the_editing_state():
    from composer import policies
    from composer.env import tasks
    from composer.env.environment import CodingEnv

    instances = tasks.generate(2, seed=0, split="train", difficulty=tasks.Difficulty(n_functions=1))
    rows = reference_pairs.oracle_pairs(instances, seed=0)
    assert [r["task_id"] for r in rows] == [r["instance_id"] for r in instances]
    env = CodingEnv(instances, policies.ENV_CONFIG)
    try:
        for row, instance in zip(rows, instances):
            assert row["chosen"] != row["rejected"] and row["rule"] == "oracle"
            assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
            rewards = []
            for text in (row["chosen"], row["rejected"]):
                name, args = policies.parse_tool_call(text)
                assert name == "edit" and list(args) == ["path", "new_text", "start", "end"]
                env.reset(instance=instance)
                env.call("edit", **args)
                rewards.append(env.call("submit").reward)
            assert rewards == [1.0, 0.0]  # the chosen edit solves the task, the rejected one does not
    finally:
        env.close()
    swapped = pairs.shuffled_pairs(rows, seed=1)  # no teacher votes: the control still swaps
    assert all({s["chosen"], s["rejected"]} == {r["chosen"], r["rejected"]} for s, r in zip(swapped, rows))


def test_expert_pairs_choose_the_experts_next_action_over_the_students_own():
    from composer import policies, zoo
    from composer.env.environment import CodingEnv
    from composer.models import load_model, load_tokenizer

    profile = zoo.PROFILES["smoke"]
    student, instances = zoo.model(profile, "student"), zoo.split_tasks(profile, "train")
    rows = expert_pairs(instances, student, count=3, max_new_tokens=profile.max_new_tokens)
    assert len(rows) == 3 and len({r["pair_id"] for r in rows}) == 3
    model, tokenizer = load_model(student), load_tokenizer(student)
    env = CodingEnv(instances, policies.ENV_CONFIG)
    try:
        for row in rows:
            instance = next(i for i in instances if i["instance_id"] == row["task_id"])
            messages, _, _ = policies.demonstrate(env, instance)
            at = 2 + 2 * row["step"]  # system, user, then an assistant call and its tool result per step
            calls = [(m["role"], m.get("tool_calls")) for m in pairs.prompt_messages(messages[:at])]
            assert [(m["role"], m.get("tool_calls")) for m in row["prompt"]] == calls and row["rule"] == "expert"
            expert = messages[at]["tool_calls"][0]["function"]
            assert policies.parse_tool_call(row["chosen"]) == (expert["name"], json.loads(expert["arguments"]))
            own = policies.next_turn(model, tokenizer, row["prompt"], max_new_tokens=profile.max_new_tokens)
            assert row["rejected"] in (own, row["rejected_action"]) or policies.parse_tool_call(row["rejected"]) == \
                policies.parse_tool_call(own)  # the student's own greedy action, parsed or as text
            assert row["rejected_action"] != row["chosen_action"]
    finally:
        env.close()
    assert len(expert_pairs(instances[:1], student, count=100, max_new_tokens=profile.max_new_tokens)) < 100


def test_query_policy_teachers_refuses_zero_concurrency_and_a_busy_folder(tmp_path):
    from composer.lock import RunDirBusy, run_lock

    steps = {"t": embedded_traces(1)[:1]}
    endpoints = {"a": {"base_url": "http://127.0.0.1:9/v1", "model": "a"}}
    with pytest.raises(ValueError, match="concurrency must be >= 1, got 0"):
        asyncio.run(asyncio.wait_for(query_policy_teachers(steps, endpoints, tmp_path / "q.jsonl", concurrency=0), 10))
    with run_lock(tmp_path), pytest.raises(RunDirBusy, match="in use by another run"):
        asyncio.run(query_policy_teachers(steps, endpoints, tmp_path / "q.jsonl"))
    assert not (tmp_path / "q.jsonl").exists()
