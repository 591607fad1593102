"""composer.disagreement.pairs: the rules, the controls and the datasets, on hand-built inputs with
hand-computed expectations (rliable style).

    .venv/bin/pytest tests/test_disagreement_pairs.py
"""

import json
import math

import numpy as np
import pytest

from composer import stats
from composer.disagreement import pair_stats, pairs
from composer.teachers import OTHER
from composer.actions import canonical_tool_call
from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall
from hand_records import CAT, GREP, LS, PWD, VIEW, query, step, three_traces


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


def test_extract():
    by_trace, qs = three_traces()
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


def test_extract_counts_a_teacher_that_never_parses_and_errors():
    by_trace, qs = three_traces()
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


def test_random_pairs():
    by_trace, qs = three_traces()
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


def test_dataset_save_load_and_trainer_columns(tmp_path):
    from composer.models import load_tokenizer, tiny_model
    from composer.trainer import PAIR_COLUMNS, encode_pairs

    by_trace, qs = three_traces()
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


# ---------------------------------------------------------------------------------------------- prompts


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
