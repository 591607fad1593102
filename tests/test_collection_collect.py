"""composer.collection.collect: the TRL trace recorder, resuming after kill -9, fault handling (the checks on
the traces it writes: tests/test_collection_trace_checks.py).

    nice -n 10 .venv/bin/pytest -q tests/test_collection_collect.py

The TRL tests run real GRPOTrainer steps (TRL's own tool loop, masks, rewards, optimizer step) with the sampler
replaced by a script (`scripted`): the tiny untrained model would never emit a tool call, and a script makes
every kind of rollout (solved, truncated, rolled back, crashed) happen on purpose.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from composer import traces
from composer.collection import collect, trace_checks
from composer.env.embedded import tasks
from composer.env.environment import EnvConfig, gold_edits
from hand_records import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ENV = EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=10.0)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0)


@pytest.fixture(scope="module")
def model_path():
    from composer.models import tiny_model

    return tiny_model()


call = collect.tool_call_text
solve = collect.solve_plan


def scripted(trainer, plans, *, delay_s=0.0):
    return collect.scripted_sampler(plans, delay_s=delay_s)(trainer)


def run(model_path, records, tmp_path, plans, *, steps=1, resume=False, **kwargs):
    trainer = collect.build_trainer(model_path, records, tmp_path, steps=steps, prompts_per_step=2, generations=2,
                                    env_config=kwargs.pop("env_config", ENV), checkpoint=False, **kwargs)
    scripted(trainer, plans)
    recorder = collect.TraceRecorder(tmp_path / "traces.jsonl", resume=resume).attach(trainer)
    trainer.train()
    recorder.close()
    found, problems = trace_checks.read_file(tmp_path / "traces.jsonl")
    return trainer, recorder, found, problems


# ---------------------------------------------------------------------------------------------
# The recorder on real GRPO steps


def test_every_rollout_is_recorded_with_tokens_masks_and_rewards(model_path, records, tmp_path):
    plans = {r["instance_id"]: solve(r, extra=[call("list_files")]) for r in records}
    trainer, recorder, found, problems = run(model_path, records, tmp_path, plans, max_completion_length=4000)
    assert not problems and recorder.written == 4 and recorder.seconds > 0
    by_id = traces.group_traces(found)
    assert sorted(by_id) == collect.expected_ids(1, 2, 2)
    tok = trainer._tokenizer
    for tid, steps in by_id.items():
        iid = steps[0].task_id
        n_edits = len(gold_edits(next(r for r in records if r["instance_id"] == iid)))
        assert [s.action.tool_call.name for s in steps] == ["run_tests"] + ["edit"] * n_edits + ["submit"]
        for t, s in enumerate(steps):
            # token ids are the turn's own tokens: they decode to the recorded text, which is the scripted turn
            assert tok.decode(s.action.token_ids, skip_special_tokens=False) == s.action.text
            assert s.action.text == plans[iid][t]
            assert s.action.mask == [1] * len(s.action.token_ids)  # GRPO trained on every generated token
            assert s.action.logprobs is None  # transformers' generate returns none (vLLM would)
            # the state is the chat before the turn: system, task, then 2 messages per earlier turn
            assert [m["role"] for m in s.state.messages] == ["system", "user"] + ["assistant", "tool"] * t
            assert s.state.env == {"instance_id": iid, "tools": [t.__name__ for t in trainer.tools]}
            assert s.meta["train_step"] == 0 and s.meta["seed"] == 0
        assert steps[0].state.messages[1]["content"].startswith(records[0]["problem_statement"].strip()[:20]) or \
            steps[0].state.messages[1]["content"].startswith(records[1]["problem_statement"].strip()[:20])
        assert steps[1].state.messages[-2]["tool_calls"][0]["function"]["arguments"] == "{}"
        assert steps[1].state.messages[-1]["tool_call_id"] == "call_1"
        final = steps[-1]
        assert final.done and not final.truncated and final.reward == 1.0 and final.error is None
        assert all(s.reward is None and not s.done for s in steps[:-1])
        assert final.outcome["submitted"] and final.outcome["resolved"] and final.outcome["patch"].startswith("diff")
        # the policy kept calling tools after submit ended the episode: kept, counted, not made into steps
        assert final.outcome["after_done_turns"] == 2 and final.outcome["env_steps_after_done"] == 1
        assert final.meta["after_done"][0]["text"] == call("list_files")
        assert final.meta["after_done"][0]["mask"] == [1] * len(final.meta["after_done"][0]["token_ids"])
        assert "submitted: resolved" in final.observation
    check = trace_checks.check_traces(found, expected_ids=collect.expected_ids(1, 2, 2), require_tokens=True,
                                      problems=problems)
    assert all(check["gate"].values()), check
    assert check["errored"]["rollouts"] == 0 and check["truncation"]["rollouts"] == 0
    align = trace_checks.reward_alignment(found, trace_checks.embedded_verdict(records))
    assert align == {"checked": 4, "aligned": 4, "skipped": 0, "mismatches": []}
    # the reward recorded is the one GRPO used
    assert trainer.state.log_history[0]["rewards/env_reward/mean"] == 1.0


def test_truncations_are_counted_by_kind(model_path, records, tmp_path):
    # A budget of 60 completion tokens: the first tool result (a test run, hundreds of tokens) cannot fit, so TRL
    # rolls it back although the environment ran it; a turn longer than the budget is cut.
    long_turn = "x " * 200 + call("run_tests")
    plans = {records[0]["instance_id"]: solve(records[0]), records[1]["instance_id"]: [long_turn]}
    _, _, found, problems = run(model_path, records, tmp_path, plans, max_completion_length=60)
    check = trace_checks.check_traces(found, expected_rollouts=4, require_tokens=True, problems=problems)
    assert check["truncation"]["rollouts"] == 4
    assert check["truncation"]["by_kind"] == {"completion_cut": 2, "tool_result_rolled_back": 2}
    assert not check["gate"]["no_truncation"] and check["gate"]["complete"]
    finals = [s[-1] for s in traces.group_traces(found).values()]
    rolled = [f for f in finals if "tool_result_rolled_back" in f.outcome["truncation"]]
    assert all(f.truncated and f.observation is None and f.outcome["env_steps"] == 1 for f in rolled)
    cut = [f for f in finals if "completion_cut" in f.outcome["truncation"]]
    assert all(len(f.action.token_ids) == 60 for f in cut)


def test_turn_limits_are_truncations(model_path, records, tmp_path):
    plans = {r["instance_id"]: [call("run_tests")] * 5 for r in records}
    # TRL's max_tool_calling_iterations stops one group; the environment's max_steps ends the other's episodes
    _, _, found, _ = run(model_path, records, tmp_path, plans, max_completion_length=8000,
                         max_tool_calling_iterations=2)
    kinds = trace_checks.check_traces(found)["truncation"]["by_kind"]
    assert kinds == {"tool_loop_limit": 4}
    tmp2 = tmp_path / "b"
    _, _, found, _ = run(model_path, records, tmp2, plans, max_completion_length=8000,
                         env_config=EnvConfig(max_steps=2, max_observation_chars=300, test_timeout_s=10.0))
    check = trace_checks.check_traces(found)
    assert check["truncation"]["by_kind"] == {"env_step_limit": 4}
    assert all(len(s) == 2 for s in traces.group_traces(found).values())  # the trace ends where the episode did
    assert trace_checks.reward_alignment(found, trace_checks.embedded_verdict(records))["mismatches"] == []


@pytest.mark.parametrize("kind", ["crash", "hang"])
def test_environment_failures_are_recorded_and_collection_continues(model_path, records, tmp_path, kind):
    plans = {r["instance_id"]: solve(r) for r in records}
    faults = collect.EnvFaults(rate=1.0, kind=kind, hang_s=3.0)
    trainer, recorder, found, problems = run(model_path, records, tmp_path, plans, steps=2,
                                             max_completion_length=4000, faults=faults, call_timeout_s=0.5)
    assert trainer.state.global_step == 2 and recorder.written == 8  # both steps ran, every rollout written
    check = trace_checks.check_traces(found, expected_rollouts=8, problems=problems)
    assert check["errored"]["rollouts"] == 8 and check["gate"]["complete"] and check["gate"]["no_schema_drift"]
    reason = "injected crash in run_tests" if kind == "crash" else "run_tests timed out after 0.5 s"
    for steps in traces.group_traces(found).values():
        assert steps[0].error == f"EnvCrash: {reason}" and steps[-1].error == f"EnvCrash: {reason}"
        assert steps[-1].outcome["status"] == "errored" and steps[-1].reward == 0.0
        assert "the environment failed earlier" in steps[1].observation
    assert trace_checks.reward_alignment(found, trace_checks.embedded_verdict(records))["mismatches"] == []


def test_recording_env_recovers_after_a_crash(records):
    env = collect.RecordingEnv(ENV, faults=collect.EnvFaults(rate=1.0))
    env.reset(**records[0])
    with pytest.raises(collect.EnvCrash, match="injected crash in list_files"):
        env.list_files()
    env._faults = collect.EnvFaults()
    with pytest.raises(collect.EnvCrash, match="failed earlier"):
        env.view("setup.py")
    assert env._episode()["failure"] == "EnvCrash: injected crash in list_files"
    env.reset(**records[0])  # a fresh environment
    assert env._episode()["failure"] is None and "calc" in env.list_files()
    assert [e["tool"] for e in env._log] == ["list_files"] and env._log[0]["content"] == env._log[0]["text"]
    env.env.close()
    with pytest.raises(ValueError, match="kind"):
        collect.EnvFaults(kind="explode")
    with pytest.raises(ValueError, match="rate"):
        collect.EnvFaults(rate=2)


# ---------------------------------------------------------------------------------------------
# kill -9 and resume

WORKER = textwrap.dedent("""
    import json
    from composer.collection import collect
    from composer.env.embedded import tasks
    from composer.env.environment import EnvConfig
    records = tasks.generate(2, seed=0)
    plans = {{r["instance_id"]: collect.solve_plan(r) for r in records}}
    out = collect.collect_trl({model!r}, records, {run_dir!r}, steps=3, prompts_per_step=2, generations=2,
                              max_completion_length=4000, sampler=collect.scripted_sampler(plans, delay_s={delay}),
                              env_config=EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=10.0))
    print(json.dumps({{"written": out.written, "skipped": out.skipped, "repairs": out.repairs,
                      "resumed_from": out.resumed_from}}))
""")


def test_kill_9_then_rerun_resumes_without_duplicates_or_losses(model_path, tmp_path):
    run_dir = tmp_path / "run"
    trace = run_dir / "traces.jsonl"

    def worker(delay):
        script = tmp_path / f"worker{delay}.py"
        script.write_text(WORKER.format(delay=delay, model=str(model_path),
                                        run_dir=str(run_dir)))
        return subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    proc = worker(0.15)
    deadline = time.time() + 900  # a hang guard: the poll ends once 14 lines are written
    # kill in the middle of the second step: after step 1's checkpoint, with some of step 2's rollouts written
    while time.time() < deadline and proc.poll() is None:
        lines = trace.read_bytes().count(b"\n") if trace.exists() else 0
        if lines >= 14:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # make the kill's worst case certain: a torn half line at the end of the file
    with open(trace, "ab") as f:
        f.write(b'{"schema_version": "1.0", "trace_id": "s0001-g001-r1", "st')
    kept = {tid for tid, steps in traces.group_traces(trace_checks.read_file(trace)[0], on_error="collect").items()
            if steps[-1].done}  # complete before the rerun; a partial rollout is removed and collected again
    rerun = worker(0.0)
    out, err = rerun.communicate(timeout=900)  # a hang guard
    assert rerun.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert any("torn last line" in note and "traces.jsonl:" in note for note in result["repairs"])
    assert result["resumed_from"] is not None  # the trainer resumed from its checkpoint, not from scratch
    records_, problems = trace_checks.read_file(trace)
    assert not problems
    check = trace_checks.check_traces(records_, expected_ids=collect.expected_ids(3, 2, 2), require_tokens=True)
    assert check["gate"]["complete"], check["completeness"]  # no duplicated and no missing step or rollout
    assert check["rollouts"] == 12 and result["written"] == 12 - len(kept) and 0 < len(kept) < 12


def test_last_checkpoint_skips_one_cut_by_a_kill(tmp_path):
    assert collect.last_checkpoint(tmp_path / "absent") is None
    for n, state in ((1, "{}"), (2, "{}"), (3, '{"trunc')):
        (tmp_path / f"checkpoint-{n}").mkdir()
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(state)
    (tmp_path / "checkpoint-4").mkdir()  # killed before its state was written
    assert collect.last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")


# ---------------------------------------------------------------------------------------------
# Resume preparation on hand-made files


def write(path, recs, tail=b""):
    with traces.TraceWriter(path, resume=False) as w:
        for r in recs:
            w.write(r)
    with open(path, "ab") as f:
        f.write(tail)


def test_prepare_resume_repairs_torn_lines_and_drops_partial_rollouts(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [record("a", 0), record("a", 1, done=True, reward=1.0), record("b", 0)], tail=b'{"schema_vers')
    resume = collect.prepare_resume(path)
    assert resume.done_ids == {"a"}
    assert resume.notes[0].startswith(f"{path}:4: truncated a torn last line")
    assert resume.notes[1].startswith(f"{path}:3: removed the partially written rollout 'b'")
    assert [r.trace_id for r in trace_checks.read_file(path)[0]] == ["a", "a"]
    assert collect.prepare_resume(path).notes == []  # idempotent: nothing left to repair
    assert collect.prepare_resume(tmp_path / "absent.jsonl").done_ids == set()


def test_prepare_resume_reports_but_keeps_a_bad_middle_line(tmp_path):
    path = tmp_path / "t.jsonl"
    a, b = (record(t, 0, done=True, reward=0.0).model_dump_json() for t in "ab")
    path.write_text(f"{a}\nnot json\n{b}\n")
    resume = collect.prepare_resume(path)
    assert resume.done_ids == {"a", "b"} and len(resume.notes) == 1
    assert resume.notes[0].startswith(f"{path}:2: invalid JSON") and resume.notes[0].endswith("(left in place)")
    assert path.read_text().count("\n") == 3


# ---------------------------------------------------------------------------------------------
# The benchmark's arithmetic and arguments (its runs are the collect_trl runs tested above)


def test_bench_rollouts_ratio_and_keys(monkeypatch):
    from composer.bench import rollouts

    walls = iter([10.0, 10.4, 12.0, 12.2])  # without, with, without, with
    train_s = iter([1.0, 2.0, 3.0, 6.0])  # a step's training seconds (composer.costs.phases), each run's mean
    monkeypatch.setattr(rollouts, "measure_verifiers", lambda rollouts: {"verifiers_rollouts_per_s": rollouts / 4})
    monkeypatch.setattr(rollouts, "_trl_run", lambda *a, record, **k: {
        "wall_s": next(walls), "recorder_s": 0.2 if record else 0.0, "rollouts": 8, "written": 8 if record else 0,
        "phases": {"train_s": next(train_s)}})
    result = rollouts.measure(student="unused", prompts=2, generations=2, steps=2, repeats=2)
    assert result["recorder_overhead"] == pytest.approx(11.3 / 11.0)
    assert result["trl_rollouts_per_s"] == pytest.approx(8 / 11.3)
    assert result["recorder_s_per_rollout"] == pytest.approx(0.2 / 8)
    assert result["recorder_share_of_wall"] == pytest.approx((0.2 / 10.4 + 0.2 / 12.2) / 2)
    assert result["trl_phases_s_per_step"] == {"train_s": (2.0 + 6.0) / 2}  # the median of the recorded runs
    assert result["meets_target"] is True and result["verifiers_rollouts_per_s"] == 8 / 4  # same rollout count
    assert result["cpus"] >= 1 and result["load_average_1m_at_start"] >= 0  # a loaded machine is recognisable
    monkeypatch.setattr(rollouts, "_trl_run", lambda *a, record, **k: {
        "wall_s": 1.0, "recorder_s": 0.0, "rollouts": 8, "written": 7})
    with pytest.raises(RuntimeError, match="expected 8"):
        rollouts.measure(student="unused", repeats=1)


def test_bench_rollouts_refuses_bad_arguments(capsys):
    from composer.bench import rollouts

    for argv in (["--steps", "0"], ["--policy", "oracle"], ["--repeats", "x"]):
        with pytest.raises(SystemExit) as e:
            rollouts.main(argv)
        assert e.value.code == 2


def test_recorded_chat_renders_exactly_like_the_chat_trl_rendered(model_path):
    from composer.models import load_tokenizer

    tok = load_tokenizer(model_path)
    trl_chat = [{"role": "user", "content": "fix"},
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                    "name": "edit", "arguments": {"path": "a.py", "start": 3, "end": 4, "new_text": "é\n\"q\""}}}]},
                {"role": "tool", "name": "edit", "content": "ok"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "run_tests", "arguments": {}}},
                    {"type": "function", "function": {"name": "submit", "arguments": {}}}]},
                {"role": "tool", "name": "run_tests", "content": "1 failed"},
                {"role": "tool", "name": "submit", "content": "done"}]
    ours = collect._openai(trl_chat)
    assert tok.apply_chat_template(ours, tokenize=False) == tok.apply_chat_template(trl_chat, tokenize=False)
    assert ours[1]["tool_calls"][0]["function"]["arguments"] == '{"path": "a.py", "start": 3, "end": 4, ' \
                                                                 '"new_text": "é\\n\\"q\\""}'
    assert [m.get("tool_call_id") for m in ours[4:]] == ["call_2", "call_3"]
    assert collect._runs([1, 1, 0, 0, 1, 0, 1]) == [(0, 2), (4, 5), (6, 7)] and collect._runs([0, 0]) == []


@pytest.mark.parametrize("rollouts,processes,micro,expected", [
    (8, 1, None, (8, 1)), (8, 1, 2, (2, 4)), (8, 2, None, (4, 1)), (8, 2, 1, (1, 4)), (128, 8, 1, (1, 16))])
def test_split_rollouts_keeps_a_steps_rollouts_on_any_launch(rollouts, processes, micro, expected):
    per_device, accumulation = collect.split_rollouts(rollouts, processes, micro)
    assert (per_device, accumulation) == expected and per_device * accumulation * processes == rollouts


@pytest.mark.parametrize("rollouts,processes,micro,message", [
    (6, 4, None, "6 rollouts per step do not split over 4 processes"),
    (8, 2, 3, "per_device_train_batch_size 3 must divide the 4 rollouts"),
    (8, 1, 0, "per_device_train_batch_size 0 must divide")])
def test_split_rollouts_refuses_a_batch_that_does_not_divide(rollouts, processes, micro, message):
    with pytest.raises(ValueError, match=message):
        collect.split_rollouts(rollouts, processes, micro)


def test_a_micro_batch_accumulates_to_the_same_step(model_path, records, tmp_path):
    """per_device_train_batch_size 1 for 2 prompts x 2 generations: 4 accumulated micro-batches, one generation of
    4 rollouts, every one recorded, one optimizer step."""
    plans = {r["instance_id"]: solve(r) for r in records}
    trainer, recorder, found, problems = run(model_path, records, tmp_path, plans, max_completion_length=4000,
                                             per_device_train_batch_size=1)
    assert trainer.args.gradient_accumulation_steps == 4 and trainer.args.generation_batch_size == 4
    assert not problems and recorder.written == 4 and trainer.state.global_step == 1
    assert sorted(traces.group_traces(found)) == collect.expected_ids(1, 2, 2)
    with pytest.raises(ValueError, match="gradient_accumulation_steps is derived"):
        collect.build_trainer(model_path, records, tmp_path / "x", checkpoint=False, gradient_accumulation_steps=2)


def test_channels_make_a_composer_trainer_with_its_pairs(model_path, records, tmp_path):
    from datasets import Dataset
    from trl import GRPOTrainer

    from composer.episodes import ConcurrentTools
    from composer.trainer import ComposerTrainer
    from composer.turn_cache import TurnCache

    plain = collect.build_trainer(model_path, records, tmp_path / "a", checkpoint=False)
    # stock TRL, its tool loop's episodes at once, generating through turn_cache
    assert [c for c in type(plain).__mro__ if c in (ConcurrentTools, TurnCache, GRPOTrainer, ComposerTrainer)] == \
        [ConcurrentTools, TurnCache, GRPOTrainer]
    pairs = Dataset.from_list([{"prompt": [{"role": "user", "content": "x"}], "chosen": "a", "rejected": "b",
                                "ref_chosen_logps": -1.0, "ref_rejected_logps": -2.0}])
    dpo = collect.build_trainer(model_path, records, tmp_path / "b", checkpoint=False, trace_replay_batch_size=10,
                                channels={"trace_replay_weight": 0.5, "trace_replay_batch_size": 30},
                                pairs_dataset=pairs)
    assert isinstance(dpo, ComposerTrainer) and dpo.args.trace_replay_weight == 0.5 and len(dpo._encoded_pairs) == len(pairs)
    assert dpo.args.trace_replay_batch_size == 30  # an arm's own channel field over the shared trainer_config's
    with pytest.raises(ValueError, match="pairs_dataset is required"):
        collect.build_trainer(model_path, records, tmp_path / "c", checkpoint=False,
                              channels={"trace_replay_weight": 0.5})


def test_002a_live_profile_runs_on_a_real_instance_in_containers(real_record, tmp_path):
    """The live pipeline on CPU: 002a's live profile differing only in model and scale (its YAML header), the
    scripted expert's turns through TRL's loop, every episode and every re-grading in podman."""
    from composer import report, run

    overrides = {"student": "zoo:smoke", "policy": "expert", "trainer_config": {}, "n_prompts": 1, "generations": 2,
                 "steps": 1, "tasks_source": "data/swebench-lite/marshmallow-code__marshmallow-1343.json",
                 "max_completion_length": 4096, "max_tool_calling_iterations": 12, "env_max_steps": 8,
                 "run_dir": str(tmp_path / "run")}
    assert run.run("002a", profile="live", overrides=overrides, reports_dir=tmp_path) == 0
    results = report.read_results(tmp_path / "002a-trace-collection-trl" / "executed.ipynb")
    m = results["metrics"]
    assert results["backend"] == "live" and m["rollouts"] == 2 and m["rewards"] == [1.0, 1.0]
    assert m["reward_alignment"] == {"checked": 2, "aligned": 2, "skipped": 0, "mismatches": []}
    assert m["tool_calls"] >= 6 and m["completeness"]["complete"] == 2
    assert any("1 real SWE-bench instance(s) run in containers" in n for n in results["notes"])
    assert any(n.startswith("instances: 1 from data/swebench-lite/marshmallow") for n in results["notes"])


def test_002a_refuses_real_tasks_graded_by_the_scan_alone_before_anything_runs(tmp_path, capsys):
    """A task whose tests run under django's runner is graded by the tampering scan alone: 002a stops on it at its
    first cell, before any image is needed or anything trains, naming the opt-in (no engine or image is used)."""
    from composer import run

    record = json.loads((ROOT / "data/swebench-lite/marshmallow-code__marshmallow-1343.json").read_text())
    record = record[0] if isinstance(record, list) else record
    django = tmp_path / "tasks" / "django.json"
    django.parent.mkdir()
    django.write_text(json.dumps({**record, "instance_id": "django__django-11099", "repo": "django/django",
                                  "version": "3.0"}))
    overrides = {"student": "zoo:smoke", "trainer_config": {}, "n_prompts": 1, "generations": 2, "steps": 1,
                 "tasks_source": str(django), "run_dir": str(tmp_path / "run")}
    assert run.run("002a", profile="live", overrides=overrides, reports_dir=tmp_path) != 0
    err = capsys.readouterr().err
    assert "1 of the 1 train tasks (django/django) would be graded by the tampering scan alone" in err
    assert "COMPOSER_GRADE_SCAN_ONLY=1" in err and not (tmp_path / "run").exists()
