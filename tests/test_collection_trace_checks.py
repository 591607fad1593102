"""composer.collection.trace_checks: the substrate-neutral checks of a trace file (gaps, duplicates, schema drift,
truncations, tampering, reward alignment) on hand-built records.

    .venv/bin/pytest tests/test_collection_trace_checks.py
"""

import json
import os

import pytest

from composer import traces
from composer.collection import trace_checks
from composer.env.embedded import tasks
from composer.env.environment import EnvConfig, gold_edits
from hand_records import record

ENV = EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=10.0)


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_reader_on_malformed_input_reports_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    good = record("a", 0, done=True, reward=1.0)
    bad_type = json.loads(good.model_dump_json()) | {"step": "0", "trace_id": "b"}
    newer = json.loads(good.model_dump_json()) | {"schema_version": "2.0", "trace_id": "c"}
    with open(path, "w") as f:
        f.write(good.model_dump_json() + "\n\n" + json.dumps(bad_type) + "\n" + json.dumps(newer) + "\n[1, 2]\n")
        f.write(good.model_dump_json()[:30])
    found, problems = trace_checks.read_file(path)
    assert [r.trace_id for r in found] == ["a"]
    reasons = [str(p) for p in problems]
    assert reasons[0] == f"{path}:2: empty line"
    assert reasons[1].startswith(f"{path}:3: step: Input should be a valid integer")
    assert reasons[2] == f"{path}:4: unsupported schema_version '2.0' (this reader supports '1.0')"
    assert reasons[3] == f"{path}:5: expected a JSON object, got list"
    assert reasons[4].startswith(f"{path}:6: torn last line")
    check = trace_checks.check_traces(found, problems=problems)
    assert check["schema"]["invalid_lines"] == reasons and not check["gate"]["no_schema_drift"]
    with pytest.raises(traces.TraceError, match=r"t\.jsonl:2: empty line"):
        list(traces.read_traces(path))


def test_check_traces_finds_gaps_duplicates_missing_and_unfinished_rollouts():
    recs = [record("a", 0), record("a", 2, done=True, reward=1.0),  # gap
            record("b", 0, done=True, reward=0.0), record("b", 0, done=True, reward=0.0),  # duplicate
            record("c", 0), record("c", 1),  # never done: cut off
            record("d", 0), record("d", 1, done=True),  # no final reward
            record("e", 0, done=True, reward=1.0)]
    check = trace_checks.check_traces(recs, expected_ids=["a", "b", "c", "d", "e", "f"])
    inc = check["completeness"]["incomplete"]
    assert set(inc) == {"a", "b", "c", "d"}
    assert "missing [1]" in inc["a"] and "duplicated [0]" in inc["b"]
    assert "cut off" in inc["c"] and "no reward" in inc["d"]
    assert check["completeness"]["missing"] == ["f"] and check["completeness"]["complete"] == 1
    assert not check["gate"]["complete"]
    assert trace_checks.check_traces([record("e", 0, done=True, reward=1.0)], expected_rollouts=2)["completeness"][
        "missing"] == ["1 rollouts short of 2"]
    no_tokens = record("g", 0, done=True, reward=1.0)
    no_tokens.action = traces.Action(text="x")
    checked = trace_checks.check_traces([no_tokens], require_tokens=True)
    assert "no token ids" in checked["completeness"]["incomplete"]["g"]
    assert trace_checks.check_traces([no_tokens])["gate"]["complete"]


def test_schema_drift_between_valid_records():
    base = [record("a", 0), record("a", 1, done=True, reward=1.0)]
    assert trace_checks.schema_drift(base) == []
    other = record("b", 0, done=True, reward=1.0)
    other.meta = {"train_step": "0"}  # a string where the others have a number
    assert trace_checks.schema_drift(base + [other]) == ["meta.train_step: several types ['number', 'string']"]
    extra = record("c", 0, done=True, reward=1.0)
    extra.meta = {"train_step": 0, "new_key": 1}
    drift = trace_checks.schema_drift(base + [extra])
    assert len(drift) == 1 and drift[0].startswith("meta keys differ between final steps")
    foreign = record("d", 0, done=True, reward=1.0, error=None)
    foreign.source = "verifiers"
    assert trace_checks.schema_drift(base + [foreign]) == ["several sources: ['trl', 'verifiers']"]
    assert not trace_checks.check_traces(base + [other])["gate"]["no_schema_drift"]


def test_errored_and_truncated_rollouts_are_counted():
    crashed = record("a", 0, done=True, reward=0.0, error="EnvCrash: injected crash in view")
    cut = record("b", 0, done=True, reward=0.0)
    cut.truncated = True
    cut.outcome = {"truncation": ["completion_cut", "tool_result_rolled_back"]}
    plain = record("c", 0, done=True, reward=0.0)
    plain.truncated = True
    plain.outcome = None  # another substrate: a flag, no kinds
    check = trace_checks.check_traces([crashed, cut, plain])
    assert check["errored"] == {"rollouts": 1, "reasons": {"EnvCrash": 1}, "ids": ["a"]}
    assert check["truncation"]["by_kind"] == {"completion_cut": 1, "tool_result_rolled_back": 1, "truncated": 1}
    assert check["truncation"]["ids"] == ["b", "c"] and not check["gate"]["no_truncation"]


def test_tampering_reset_flagged_and_forged_submissions_are_counted():
    reset = record("a", 0, done=True, reward=0.0)
    reset.outcome = {"tampering": {"reset": ["conftest.py"], "flagged": [], "forged": []}}
    flagged = record("b", 0, done=True, reward=0.0)
    flagged.outcome = {"tampering": {"reset": [], "flagged": ["ending the process in calc/ops.py:3"], "forged": []}}
    forged = record("e", 0, done=True, reward=0.0)
    forged.outcome = {"tampering": {"reset": [], "flagged": [], "forged": ["outcomes forged: canary t::x ..."]}}
    clean = record("c", 0, done=True, reward=1.0)
    clean.outcome = {"tampering": {"reset": [], "flagged": [], "forged": []}}
    reviewed = record("f", 0, done=True, reward=1.0)  # named for review only: counted apart, not as tampering
    reviewed.outcome = {"tampering": {"reset": [], "flagged": [], "review": ["inspect in a/b.py:1"], "forged": []}}
    unsubmitted = record("d", 0, done=True, reward=0.0)
    unsubmitted.outcome = {"tampering": None}
    check = trace_checks.check_traces([reset, flagged, forged, clean, reviewed, unsubmitted])
    assert check["tampering"] == {"rollouts": 3, "reset": 1, "flagged": 1, "forged": 1, "review": 1,
                                  "ids": ["a", "b", "e"]}


def test_reward_alignment_flags_a_reward_that_the_environment_disagrees_with(records):
    from composer.env.environment import CodingEnv

    env = CodingEnv(config=ENV)
    env.reset(instance=records[0])
    for e in gold_edits(records[0]):
        env.call("edit", **e)
    patch = env.diff()
    env.close()
    iid = records[0]["instance_id"]
    ok = record("a", 0, done=True, reward=1.0, task_id=iid)
    ok.outcome = {"submitted": True, "patch": patch}
    lie = record("b", 0, done=True, reward=1.0, task_id=iid)
    lie.outcome = {"submitted": True, "patch": ""}  # claims 1.0 for an empty patch
    unsubmitted = record("c", 0, done=True, reward=0.0, task_id=iid)
    unknown = record("d", 0, done=True, reward=0.0, task_id="not-a-task")
    align = trace_checks.reward_alignment([ok, lie, unsubmitted, unknown], trace_checks.embedded_verdict(records))
    assert align == {"checked": 3, "aligned": 2, "skipped": 1,
                     "mismatches": [{"trace_id": "b", "recorded": 1.0, "verdict": 0.0}]}


def test_reward_alignment_rejudges_rollouts_at_once_and_keeps_their_order():
    """workers > 1: the verdicts of many rollouts are asked for concurrently; the report is the same as one by one."""
    import threading

    rows = [traces.StepRecord(schema_version=traces.SCHEMA_VERSION, trace_id=f"t{i}", step=0,
                              state=traces.State(messages=[]), action=traces.Action(text="x"), observation="",
                              reward=float(i % 2), done=True, truncated=False, source="openenv", task_id=f"task{i}")
            for i in range(6)]
    barrier = threading.Barrier(3, timeout=10)

    def verdict(final):  # passes only when 3 verdicts are in flight together
        barrier.wait()
        return 1.0 if final.trace_id in ("t1", "t3") else 0.0

    report = trace_checks.reward_alignment(rows, verdict, workers=3)
    assert report["checked"] == 6 and [m["trace_id"] for m in report["mismatches"]] == ["t5"]
