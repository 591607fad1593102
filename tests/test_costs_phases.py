"""composer.costs.phases: the clock's sums and wall-clock on a scripted timeline, the tool wrapper keeping TRL's tool
schemas, reading a phase file, and the pilot profile's collection at smoke size writing its phase times to JSONL,
the trainer's log and TensorBoard (`--from-run` on hand-written files: tests/test_costs_plan.py).

    .venv/bin/pytest -q -p no:xdist tests/test_costs_phases.py
"""

import json
import os
import threading

import pytest
from transformers.utils import get_json_schema

from composer import run
from composer.collection import collect
from composer.costs import phases
from composer.env.defences import probes
from composer.env.embedded import tasks
from composer.env.environment import EnvConfig, TRLCodingEnv

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
PILOT = "002a-trace-collection-trl"


def test_overlapping_calls_count_fully_in_the_sums_and_once_in_the_wall():
    ticks = iter([0, 1, 3, 4, 10, 12])  # a from 0 to 3, b from 1 to 4 (overlapping), c from 10 to 12
    clock = phases.Clock(now=lambda: next(ticks))
    a, b = clock.timing("run_tests"), clock.timing("run_tests")
    a.__enter__(), b.__enter__()
    a.__exit__(None, None, None), b.__exit__(None, None, None)
    with clock.timing("submit"):
        pass
    assert dict(clock.calls) == {"run_tests": 2, "submit": 1}
    assert dict(clock.seconds) == {"run_tests": 6, "submit": 2} and clock.wall == 6  # [0, 4] and [10, 12]
    clock.clear()
    assert clock.wall == 0 and not clock.calls


def test_calls_from_threads_are_each_counted():
    clock = phases.Clock()
    tool = clock.timed(lambda: None, "view")
    threads = [threading.Thread(target=lambda: [tool() for _ in range(50)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.calls["view"] == 400 and 0 <= clock.wall <= clock.seconds["view"]


def test_a_timed_environment_keeps_its_tools_names_and_schemas_and_times_each_by_name():
    records = tasks.generate(1, seed=0)
    env = TRLCodingEnv(EnvConfig(max_steps=4))
    before = {name: get_json_schema(getattr(env, name)) for name in ("view", "edit", "run_tests", "submit")}
    timer = phases.PhaseTimer(trainer=None, path="unused")
    timer.environment(env)
    assert {name: get_json_schema(getattr(env, name)) for name in before} == before  # what TRL renders
    assert env.view.__name__ == "view"
    env.reset(**records[0])
    env.list_files()
    env.view(path="nowhere.py")
    env.submit()
    env.env.close()
    assert dict(timer.tools.calls) == {"list_files": 1, "view": 1, "submit": 1}
    assert dict(timer.resets.calls) == {"reset": 1}


def test_read_keeps_a_resumed_steps_last_record_and_names_a_bad_line(tmp_path):
    line = {"schema": 1, "step": 1, "train_s": 1.0}
    (tmp_path / phases.FILE).write_text("\n".join(json.dumps(r) for r in (
        line, {**line, "step": 2}, {**line, "train_s": 5.0})) + "\n")
    assert [(r["step"], r["train_s"]) for r in phases.read(tmp_path)] == [(1, 5.0), (2, 1.0)]
    (tmp_path / phases.FILE).write_text(json.dumps(line) + "\n{not json\n")
    with pytest.raises(phases.PhaseFileError, match=r"phases.jsonl:2: not a phase record .*delete the line"):
        phases.read(tmp_path)


# ---------------------------------------------------------------------------------------------
# The pilot profile's collection at smoke size


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    """002a's pilot profile resolved as `python -m composer run 002a --profile pilot` resolves it, at smoke size: a
    tiny student, embedded tasks, 1 task x 2 rollouts a step, the scripted expert's turns (run_tests, the gold edits,
    submit: the tools and grading run), the GPU settings dropped from trainer_config (report_to kept), offline.
    Called the way the notebook calls collect_trl (a notebook run would add a kernel and 002a's checks, not phases)."""
    from composer.models import tiny_model

    profile, _ = run.effective_parameters(PILOT, profile="pilot")
    values, _ = run.effective_parameters(PILOT, profile="pilot", overrides=dict(
        backend="offline", tasks_source="embedded", policy="expert", n_prompts=profile["steps"], generations=2,
        max_completion_length=4000, max_tool_calling_iterations=12, env_max_steps=8,
        trainer_config={"report_to": profile["trainer_config"]["report_to"]}))
    instances = probes.rewarded(values["n_prompts"], seed=values["seed"])[0]
    run_dir = tmp_path_factory.mktemp("pilot")
    result = collect.collect_trl(
        tiny_model(), instances, run_dir, resume=False, steps=values["steps"],
        prompts_per_step=values["n_prompts"] // values["steps"], generations=values["generations"],
        max_completion_length=values["max_completion_length"],
        max_tool_calling_iterations=values["max_tool_calling_iterations"],
        env_config=EnvConfig(max_steps=values["env_max_steps"], max_observation_chars=1200, test_timeout_s=10.0),
        call_timeout_s=values["call_timeout_s"], seed=values["seed"], temperature=values["temperature"],
        learning_rate=values["learning_rate"], checkpoint=False, **values["trainer_config"],
        sampler=collect.scripted_sampler({r["instance_id"]: collect.solve_plan(r) for r in instances}))
    return values, run_dir, result


def test_the_pilot_is_a_few_steps_of_the_live_profile_logging_to_tensorboard():
    live, _ = run.effective_parameters(PILOT, profile="live")
    pilot, _ = run.effective_parameters(PILOT, profile="pilot")
    assert pilot["steps"] < live["steps"] and pilot["trainer_config"]["report_to"] == ["tensorboard"]
    assert pilot["n_prompts"] // pilot["steps"] == live["n_prompts"] // live["steps"]  # the live step's rollouts
    same = {k for k in live if k not in ("steps", "n_prompts", "run_dir")}
    assert {k: pilot[k] for k in same} == {k: live[k] for k in same}


def test_the_pilot_writes_one_phase_record_a_step(pilot):
    values, run_dir, result = pilot
    records = phases.read(run_dir)
    assert [r["step"] for r in records] == list(range(1, values["steps"] + 1))
    episodes = values["n_prompts"] // values["steps"] * values["generations"]
    for r in records:
        assert r["device"] == "cpu" and (r["process"], r["processes"]) == (0, 1)
        assert r["step_s"] == pytest.approx(r["generate_s"] + r["tools_s"] + r["reset_s"] + r["train_s"])
        assert min(r[k] for k in phases.PHASES) >= 0
        assert r["episodes"] == r["resets"] == r["submissions"] == episodes
        assert r["grade_s"] == r["tools"]["submit"]["s"] > 0 and r["tools"]["run_tests"]["calls"] == episodes
        assert r["turns"] >= 3 * episodes  # run_tests, an edit, submit (then "Done.")
        assert r["completion_tokens"] > 0 and r["prompt_tokens"] > 0 and r["tool_tokens"] > 0
        assert r["trained_tokens"] == r["prompt_tokens"] + r["completion_tokens"] + r["tool_tokens"]
    logged = [h for h in result.log_history if "loss" in h]
    assert [h["phases/train_s"] for h in logged] == [r["train_s"] for r in records]
    unit = phases.per_unit(records)
    assert unit["grade_s_per_submission"] > 0 and unit["train_s_per_token"] > 0 and unit["turns_per_episode"] >= 3


def test_the_pilot_writes_its_phase_times_to_tensorboard(pilot):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values, run_dir, _ = pilot
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    records = phases.read(run_dir)
    for key in ("step_s", "generate_s", "tools_s", "train_s", "grade_s", "tool/submit_s", "completion_tokens"):
        scalars = events.Scalars(f"train/phases/{key}")
        assert [s.step for s in scalars] == [r["step"] for r in records]
        field = key.split("/")[1][:-2] if key.startswith("tool/") else key
        want = [r["tools"][field]["s"] if key.startswith("tool/") else r[field] for r in records]
        assert [s.value for s in scalars] == pytest.approx(want, rel=1e-5)  # float32 in the event file
