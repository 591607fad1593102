"""composer.collection.prime: verifiers rollouts against the local server, resume after kill -9, errored rollouts, the
v1 -> composer.traces converter and both JSONL readers on malformed input.

    .venv/bin/pytest tests/test_collection_prime.py

Rollouts are driven without a model: the echo backend answers with the last user message, and
prime.scripted_records puts a `<tool_call>` block at the head of each task, so every turn makes that call.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from composer import traces
from composer.collection import prime
from composer.models import tiny_model
from composer.serve import serve

TIMEOUT_S = 40  # the agent's rollout deadline here: the hanging rollout hits it (a clean one takes ~15 s, loaded)


@pytest.fixture(scope="module")
def echo():
    with serve(models={"student": tiny_model()}, backend="echo") as server:
        yield server


@pytest.fixture(scope="module")
def scenario():
    """Five rollouts: submit at once; call run_tests until the step limit; crash at step 2; hang at step 1; a task
    too long for the model's context (the tiny tokenizer's 4096 positions), refused before any turn."""
    submit, loop = prime.scripted_records(3, seed=0), prime.scripted_records(2, seed=1, tool="run_tests")
    huge = {**submit[2], "problem_statement": submit[2]["problem_statement"] + "padding " * 6000}
    records = [submit[0], loop[0], loop[1], submit[1], huge]
    ids = [r["instance_id"] for r in records]
    tools = {"max_steps": 3, "crash_at": {ids[2]: 2}, "hang_at": {ids[3]: 1}}
    return records, ids, tools


@pytest.fixture(scope="module")
def collected(echo, scenario, tmp_path_factory):
    records, ids, tools = scenario
    run_dir = tmp_path_factory.mktemp("vf")
    result = prime.collect(records, run_dir, base_url=echo.base_url, model="student", concurrency=4, max_tokens=64,
                           rollout_timeout_s=TIMEOUT_S, tools=tools)
    by_task = {}
    for r in traces.import_jsonl(result.trace_path):
        by_task.setdefault(r.task_id, []).append(r)
    return result, by_task


def test_every_rollout_is_recorded_and_converted(collected, scenario):
    result, by_task = collected
    assert (result.new, result.resumed, result.total) == (5, 0, 5)
    assert sorted(by_task) == sorted(scenario[1]) and result.rollouts_per_s > 0
    for steps in by_task.values():
        assert [r.step for r in steps] == list(range(len(steps))) and steps[-1].done
        assert all(r.source == "verifiers" and r.state.messages[0]["role"] == "system" for r in steps)
        assert all(r.action.token_ids is None for r in steps)  # an EvalClient relay records no tokens


def test_a_clean_rollout(collected, scenario):
    [step] = collected[1][scenario[1][0]]
    assert step.action.tool_call.name == "submit" and '"name": "submit"' in step.action.text
    assert step.reward == 0.0 and not step.truncated and step.error is None  # submitted without a fix
    assert step.outcome["status"] == "ok" and step.outcome["submitted"] and step.outcome["patch"] == ""
    assert step.meta["env"]["tool"] == "submit" and step.meta["usage"]["completion_tokens"] > 0
    assert step.state.messages[1]["content"].startswith("<tool_call>")  # the task message


def test_the_step_limit_is_visible_as_truncation(collected, scenario):
    steps = collected[1][scenario[1][1]]
    assert len(steps) == 3 and [s.meta["env"]["step"] for s in steps] == [1, 2, 3]
    assert all("tests failed" in s.observation for s in steps[:2])
    final = steps[-1]
    assert final.truncated and final.outcome["truncation"] == ["env_step_limit"] and final.reward == 0.0
    assert final.outcome["stop_condition"] == "episode_over" and final.error is None
    assert steps[1].state.messages[-1]["role"] == "tool" and steps[1].state.messages[-2]["tool_calls"]


def test_a_crashing_environment_errors_its_rollout_only(collected, scenario):
    result, by_task = collected
    steps = by_task[scenario[1][2]]
    assert len(steps) == 2 and steps[-1].done and steps[-1].outcome["status"] == "errored"
    assert "injected environment crash at step 2" in steps[-1].error and steps[-1].reward is None
    assert result.errors == {"TaskError": 1, "Timeout": 1, "ProviderError": 1} and result.errored == 3


def test_a_hanging_environment_times_out(collected, scenario):
    [step] = collected[1][scenario[1][3]]
    assert step.error.startswith("Timeout: agent_timeout") and step.outcome["is_timeout"]
    assert step.observation is None and step.outcome["status"] == "errored"


def test_a_context_overflow_errors_its_rollout_before_any_turn(collected, scenario):
    [record] = collected[1][scenario[1][4]]
    assert record.meta["no_turn"] and record.action.text == "" and record.done and record.reward is None
    assert "ProviderError: upstream 400" in record.error and "exceed the model's context of 4096" in record.error
    assert [m["role"] for m in record.state.messages] == ["system", "user"]  # the prompt it could not take


def test_checks_count_what_happened(collected):
    result, _ = collected
    report = prime.check(traces.import_jsonl(result.trace_path), expected_rollouts=5)
    assert report["rollouts"] == 5 and report["errored"]["rollouts"] == 3
    assert report["truncation"]["rollouts"] == 1 and report["schema"]["invalid_lines"] == []
    assert report["gate"]["no_truncation"] is False


def test_rerun_resumes_nothing_owed(collected, echo, scenario):
    result, _ = collected
    records, _, tools = scenario
    again = prime.collect(records, result.run_dir, base_url=echo.base_url, model="student", concurrency=4,
                          max_tokens=64, rollout_timeout_s=TIMEOUT_S, tools=tools)
    assert (again.new, again.resumed, again.total) == (0, 5, 5)  # errored rollouts are results, not retried
    with pytest.raises(ValueError, match="other settings .*max_tokens"):
        prime.collect(records, result.run_dir, base_url=echo.base_url, model="student", max_tokens=65,
                      rollout_timeout_s=TIMEOUT_S, tools=tools)


def _lines(path):
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_kill_9_mid_run_then_resume_loses_and_duplicates_nothing(echo, tmp_path):
    records = prime.scripted_records(3, seed=2)
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "composer.collection.prime", "collect", "--records", str(tmp_path / "tasks.jsonl"),
            "--run-dir", str(run_dir), "--base-url", echo.base_url, "--model", "student", "-n", "2",
            "--concurrency", "1", "--max-tokens", "64", "--rollout-timeout-s", "60"]
    out = run_dir / "verifiers" / "traces.jsonl"
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 900  # a hang guard: the poll ends at the second rollout
        while _lines(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the collection ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done_before = _lines(out)
    assert 2 <= done_before < 6
    with open(out, "ab") as f:  # and a torn last line, as a kill during the write would leave
        f.write(b'{"id": "torn", "traces": [{"ver')
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=900)  # a hang guard
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["resumed"] == done_before and summary["new"] == 6 - done_before and summary["total"] == 6
    episodes = prime.read_verifiers(out)
    assert len({e.id for e in episodes}) == 6
    assert Counter(e.task.data.model_extra["instance"]["instance_id"] for e in episodes) == \
        {r["instance_id"]: 2 for r in records}
    converted = traces.import_jsonl(run_dir / "traces.jsonl")
    assert len({r.trace_id for r in converted}) == 6


# ---------------------------------------------------------------------------------------------
# Readers on malformed input


@pytest.fixture()
def good_line(collected):
    return collected[0].verifiers_path.read_text().splitlines()[0]


def _bad(tmp_path, lines: list[str], name="traces.jsonl"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_verifiers_reader_bad_json(tmp_path, good_line):
    path = _bad(tmp_path, [good_line, '{"id": "x", traces'])
    with pytest.raises(traces.TraceError, match=rf"^{path}:2: invalid JSON"):
        prime.read_verifiers(path)


def test_verifiers_reader_wrong_type(tmp_path, good_line):
    row = json.loads(good_line)
    row["ok"] = "yes"
    path = _bad(tmp_path, [good_line, good_line, json.dumps(row)])
    with pytest.raises(traces.TraceError, match=rf"^{path}:3: wrong type: ok: Input should be a valid boolean"):
        prime.read_verifiers(path)


def test_verifiers_reader_missing_fields(tmp_path, good_line):
    row = json.loads(good_line)
    no_task = {k: v for k, v in row.items() if k != "task"}
    with pytest.raises(traces.TraceError, match=r":1: missing field: task"):
        prime.read_verifiers(_bad(tmp_path, [json.dumps(no_task)]))
    no_traces = {k: v for k, v in row.items() if k != "traces"}
    with pytest.raises(traces.TraceError, match=r":1: missing field: traces"):
        prime.read_verifiers(_bad(tmp_path, [json.dumps(no_traces)], "b.jsonl"))


def test_verifiers_reader_unknown_trace_version(tmp_path, good_line):
    row = json.loads(good_line)
    row["traces"][0]["version"] = 2
    with pytest.raises(traces.TraceError, match=r":1: unsupported trace version 2 \(this reader supports 1"):
        prime.read_verifiers(_bad(tmp_path, [json.dumps(row)]))


def test_verifiers_reader_torn_and_empty_lines(tmp_path, good_line):
    path = tmp_path / "t.jsonl"
    path.write_text(good_line + "\n" + good_line[:40])
    with pytest.raises(traces.TraceError, match=r":2: invalid JSON \(torn last line"):
        prime.read_verifiers(path)
    with pytest.raises(traces.TraceError, match=r":2: empty line"):
        prime.read_verifiers(_bad(tmp_path, [good_line, ""], "e.jsonl"))
    with pytest.raises(FileNotFoundError):
        prime.read_verifiers(tmp_path / "absent.jsonl")


@pytest.fixture()
def our_line(collected):
    return collected[0].trace_path.read_text().splitlines()[0]


@pytest.mark.parametrize("mutate, message", [
    (lambda r: "{not json", "invalid JSON"),
    (lambda r: json.dumps({**r, "step": "0"}), "step: Input should be a valid integer"),
    (lambda r: json.dumps({k: v for k, v in r.items() if k != "action"}), "action: Field required"),
    (lambda r: json.dumps({**r, "schema_version": "9.9"}), "unsupported schema_version '9.9'"),
])
def test_our_reader_on_converted_lines(tmp_path, our_line, mutate, message):
    path = _bad(tmp_path, [our_line, mutate(json.loads(our_line))])
    with pytest.raises(traces.TraceError) as e:
        list(traces.read_traces(path))
    assert str(e.value).startswith(f"{path}:2: ") and message in str(e.value)


def test_convert_cli(collected, tmp_path):
    dst = tmp_path / "ours.jsonl"
    assert prime.main(["convert", str(collected[0].verifiers_path), str(dst)]) == 0
    assert dst.read_bytes() == collected[0].trace_path.read_bytes()  # deterministic: derived data


def test_a_rollout_with_no_model_turn_is_still_accounted_for(collected):
    episode = prime.read_verifiers(collected[0].verifiers_path)[0]
    trace = episode.traces[0]
    trace.nodes, trace.calls = [], []
    episode.ok = False
    [record] = prime.from_verifiers([episode])
    assert record.done and record.action.text == "" and record.meta["no_turn"] and record.error
    assert record.state.messages[0]["role"] == "system"


def test_verifiers_rollouts_per_s():
    rate = prime.verifiers_rollouts_per_s(2, concurrency=2, max_steps=2)
    assert 0 < rate < 100


def test_token_fields_are_carried_over_when_the_client_recorded_them(collected):
    """What PRIME-RL's TrainClient records per assistant node (scaffold + sampled tokens, a mask, the sampled
    tokens' logprobs) becomes the action's sampled token ids, an all-ones mask and the logprobs."""
    episode = prime.read_verifiers(collected[0].verifiers_path)[0]
    node = next(n for n in episode.traces[0].nodes if n.sampled)
    node.token_ids, node.mask, node.logprobs = [7, 8, 9, 10], [False, True, True, True], [-0.5, -0.25, -1.0]
    [record] = prime.from_verifiers([episode])
    assert record.action.token_ids == [8, 9, 10] and record.action.mask == [1, 1, 1]
    assert record.action.logprobs == [-0.5, -0.25, -1.0]
    node.logprobs = [-0.5]  # misaligned: dropped rather than padded
    [record] = prime.from_verifiers([episode])
    assert record.action.token_ids == [8, 9, 10] and record.action.logprobs is None


def test_export_profile_measures_the_file(collected):
    records = traces.import_jsonl(collected[0].trace_path)
    p = prime.export_profile(records, expected_rollouts=5)
    assert (p["rollouts"], p["errored"], p["truncated"], p["truncated_with_kind"]) == (5, 3, 1, 1)
    assert p["token_ids"] == 0.0 and p["logprobs"] == 0.0 and p["mask"] == 0.0
    assert p["truncation_kinds"] == {"env_step_limit": 1} and p["collection_truncated"] == 0
    assert p["incomplete_not_errored"] == 0 and p["schema_problems"] == 0 and p["sources"] == ["verifiers"]


def _profile(**changes):
    base = {"rollouts": 4, "incomplete_not_errored": 0, "schema_problems": 0, "token_ids": 1.0, "mask": 1.0,
            "logprobs": 0.0, "truncated": 1, "truncated_with_kind": 1}
    return {**base, **changes}


def test_pick_substrate_rule():
    profiles = {"a": _profile(), "b": _profile(token_ids=0.0, mask=0.0)}
    choice, reasons = prime.pick_substrate(profiles, {"a": 900, "b": 10})
    assert choice == "a" and reasons[0].startswith("a: 4/5") and reasons[1].startswith("b: 3/5")
    choice, reasons = prime.pick_substrate({"a": _profile(), "b": _profile()}, {"a": 900, "b": 10})
    assert choice == "b" and "tie at 4/5" in reasons[-1]  # a tie goes to fewer adapter lines
    assert prime.pick_substrate({"a": _profile(), "b": _profile()}, {"a": 5, "b": 5})[0] is None
    assert prime.pick_substrate({"a": _profile()}, {"a": 5}) == (None, ["only one substrate measured: no comparison"])
    choice, _ = prime.pick_substrate({"a": _profile(rollouts=0), "b": _profile(truncated_with_kind=0)}, {})
    assert choice is None  # both 3/5 and no line counts to break the tie


def test_code_lines(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""Module doc."""\n\nimport os  # a comment\n\n\ndef f(x):\n    """Doc\n    more."""\n'
                    '    # only a comment\n    return (x +\n            1)\n\n\n@property\ndef g():\n    return 2\n')
    assert prime.code_lines(path) == 7  # import, def f, return (2 lines), decorator, def g, return
    assert prime.code_lines(path, only=["f"]) == 3 and prime.code_lines(path, exclude=["f", "g"]) == 1
    assert prime.adapter_lines() > prime.code_lines(prime.taskset.__file__)


def test_tasks_cli_prints_records_for_a_records_file(capsys):
    assert prime.main(["tasks", "--profile", "smoke", "--split", "test", "-n", "1"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["instance_id"].startswith("composer-embedded__")


def test_collection_runs_inside_a_running_event_loop():
    """A notebook kernel already runs an event loop: collect() then runs its own in a worker thread."""
    import asyncio

    async def outer():
        return prime._run_sync(lambda: asyncio.sleep(0, result=7))

    assert asyncio.run(outer()) == 7 and prime._run_sync(lambda: asyncio.sleep(0, result=8)) == 8
