"""composer.ab.preparation: what 004's plan is made from (the student and its splits, the pairs datasets, the screened
train tasks), prepared once per run folder, and training.plan_from_parameters, which makes the Plan from them.

    .venv/bin/pytest -q tests/test_ab_preparation.py
"""

import dataclasses
import json
import os

import pytest
from test_ab_training import _parameters

from composer import zoo
from composer.ab import planting, preparation, training
from composer.disagreement import pairs, reference_pairs
from composer.env.environment import EnvConfig
from composer.paths import ROOT

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_the_plan_is_made_from_the_parameters_and_the_inputs_alone(tmp_path):
    """plan_from_parameters loads no model and reads no file: a student and pairs paths that do not exist do."""
    inputs = preparation.Inputs(
        student=str(tmp_path / "no-student"), profile=None, train=[{"instance_id": f"t{i}"} for i in range(4)],
        test=[{"instance_id": "held-out"}], env=EnvConfig(max_steps=3), max_new_tokens=77,
        pairs={"pairs": {"path": str(tmp_path / "no-pairs"), "rows": 5, "skipped": 0}}, pairs_source="made up",
        oracle=False, screened=None)
    parameters = _parameters(arms={"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"}}, seeds=2)
    plan = training.plan_from_parameters(parameters, inputs)
    assert (plan.student, plan.train, plan.test, plan.env) == (inputs.student, inputs.train, inputs.test, inputs.env)
    assert plan.pairs == {"pairs": str(tmp_path / "no-pairs")} and plan.seeds == 2 and plan.arms == parameters.arms
    assert plan.evaluation["max_new_tokens"] == 77 and plan.grpo["steps"] == parameters.steps
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="needs 'pairs', one of \\['pairs'\\]; got 'expert'"):
        training.plan_from_parameters(parameters, inputs, arms={"B+": {"trace_replay_weight": 0.5, "pairs": "expert"}})


def test_prepare_pairs_builds_once_per_source_and_student(tmp_path, monkeypatch):
    made = []

    def add_reference_logps(dataset, student):
        return dataset.add_column("ref_chosen_logps", [-1.0]).add_column("ref_rejected_logps", [-2.0]), 0

    monkeypatch.setattr(pairs, "add_reference_logps", add_reference_logps)

    def make():
        made.append(1)
        return pairs.to_dataset([{"pair_id": "p", "task_id": "train-0", "prompt": [{"role": "user", "content": "x"}],
                                  "chosen": "a", "rejected": "b", "margin": 1.0}])

    first = preparation.prepare_pairs(tmp_path, "pairs", make, student=tmp_path / "student-1", source_key="k")
    again = preparation.prepare_pairs(tmp_path, "pairs", make, student=tmp_path / "student-1", source_key="k")
    assert first == again and made == [1] and first["rows"] == 1 and first["skipped"] == 0
    assert pairs.load(first["path"])["ref_chosen_logps"] == [-1.0]
    other = preparation.prepare_pairs(tmp_path, "pairs", make, student=tmp_path / "student-2", source_key="k")
    assert other["path"] != first["path"] and made == [1, 1]


def test_a_rerun_finds_its_oracle_pairs_though_the_test_output_in_their_prompts_varies(tmp_path, monkeypatch):
    """The environment's test runs print a duration and object addresses that differ every run, and oracle pairs
    carry them in their prompts. A second prepare must find the first one's pairs (and so B's train jobs, keyed by
    the pairs' file), not make new ones; here each run's prompts differ in exactly that text."""
    real, runs = reference_pairs.oracle_pairs, iter(range(2))

    def varying(*args, **kwargs):
        n, rows = next(runs), real(*args, **kwargs)
        for row in rows:
            last = row["prompt"][-1]
            row["prompt"][-1] = {**last, "content": last["content"] + f"\n1 passed in 0.0{n + 1}s <X at 0x7f{n}a>"}
        return rows

    monkeypatch.setattr(reference_pairs, "oracle_pairs", varying)
    parameters = _parameters(pairs_dir=str(tmp_path / "none"), seeds=1)
    first, again = preparation.prepare(parameters, tmp_path), preparation.prepare(parameters, tmp_path)
    assert first.oracle and first.pairs == again.pairs and first.pairs["pairs"]["rows"] > 0
    assert len(list((tmp_path / "inputs").glob("pairs-*"))) == 1
    assert len(list((tmp_path / "inputs").glob("shuffled-*"))) == 1


def test_a_student_from_outside_the_zoo_needs_its_tasks_and_budget_named(tmp_path):
    with pytest.raises(ValueError, match=r"'Qwen/Qwen3-8B' is no zoo student, so no zoo profile supplies "
                                         r"\['train_tasks', 'test_tasks', 'max_new_tokens'\]: set them"):
        preparation.prepare(_parameters(student="Qwen/Qwen3-8B"), tmp_path)
    with pytest.raises(FileNotFoundError, match="no-such-tasks.jsonl: no such file"):
        preparation.prepare(_parameters(student="Qwen/Qwen3-8B", train_tasks="no-such-tasks.jsonl",
                                              test_tasks="lite:test", max_new_tokens=64), tmp_path)
    record = json.loads((ROOT / "data/swebench-lite/marshmallow-code__marshmallow-1343.json").read_text())
    (tmp_path / "gone.json").write_text(json.dumps({**record, "image": "localhost/composer-no-such-image:latest"}))
    with pytest.raises(RuntimeError, match="1 of the real SWE-bench tasks cannot run here, e.g. marshmallow-code"):
        preparation.prepare(_parameters(student="Qwen/Qwen3-8B", train_tasks=str(tmp_path / "gone.json"),
                                              test_tasks=str(tmp_path / "gone.json"), max_new_tokens=64), tmp_path)


def test_prepare_refuses_pairs_from_test_tasks_and_an_unequal_control(tmp_path):
    test_task = zoo.split_tasks(zoo.PROFILES["smoke"], "test")[0]["instance_id"]
    row = {"pair_id": "p", "task_id": test_task, "prompt": [{"role": "user", "content": "x"}], "chosen": "a",
           "rejected": "b", "margin": 1.0}
    source = tmp_path / "003"
    pairs.save(pairs.to_dataset([row]), source / "pairs")
    pairs.save(pairs.to_dataset([row, {**row, "pair_id": "q"}]), source / "shuffled")
    with pytest.raises(ValueError, match="as many pairs as B: 2 shuffled vs 1"):
        preparation.prepare(_parameters(pairs_dir=str(source)), tmp_path / "run")
    pairs.save(pairs.to_dataset([row]), source / "shuffled")
    with pytest.raises(ValueError, match="pairs come from test tasks"):
        preparation.prepare(_parameters(pairs_dir=str(source)), tmp_path / "run")


def test_a_planted_positive_control_trains_on_the_test_tasks_and_only_it_may(tmp_path, monkeypatch):
    """positive_control_tasks "test": B+'s expert pairs are made on the evaluated test tasks, at least one each (and
    the leak check lets them, and them alone, through); "train": on the train split, as many as B's; anything else is
    refused by name."""
    given = []

    def expert_pairs(instances, student, *, count, max_new_tokens):
        given.append([t["instance_id"] for t in instances])
        return [{"pair_id": f"e{i}", "task_id": instances[i % len(instances)]["instance_id"], "rule": "expert",
                 "prompt": [{"role": "user", "content": "x"}], "chosen": "a", "rejected": "b", "margin": 1.0}
                for i in range(count)]

    monkeypatch.setattr(reference_pairs, "expert_pairs", expert_pairs)
    for split in ("test", "train"):
        inputs = preparation.prepare(_parameters(positive_control_tasks=split, oracle_pairs=1), tmp_path / split)
        made = set(pairs.load(inputs.pairs["expert"]["path"])["task_id"])
        assert given[-1] == [t["instance_id"] for t in getattr(inputs, split)] and made <= set(given[-1])
        assert bool(made & {t["instance_id"] for t in inputs.test}) == preparation.PLANTED[split]
        # planted, every evaluated task gets a pair even where B has fewer; from train, as many as B's
        b = inputs.pairs["pairs"]["rows"]
        assert inputs.pairs["expert"]["rows"] == (max(b, len(inputs.test)) if split == "test" else b)
        assert split == "train" or made == {t["instance_id"] for t in inputs.test} and b < len(inputs.test)
    with pytest.raises(ValueError, match=r"004 parameter positive_control_tasks: must be train \| test, got 'held-out'"):
        _parameters(positive_control_tasks="held-out")  # refused before anything is prepared
    # B's pairs are held out whatever B+'s are
    test_task = zoo.split_tasks(zoo.PROFILES["smoke"], "test")[0]["instance_id"]
    row = {"pair_id": "p", "task_id": test_task, "prompt": [{"role": "user", "content": "x"}], "chosen": "a",
           "rejected": "b", "margin": 1.0}
    for name in ("pairs", "shuffled"):
        pairs.save(pairs.to_dataset([row]), tmp_path / "003" / name)
    with pytest.raises(ValueError, match="pairs come from test tasks"):
        preparation.prepare(_parameters(pairs_dir=str(tmp_path / "003"), positive_control_tasks="test"),
                          tmp_path / "leak")


def test_a_planted_start_is_planted_on_the_evaluated_test_tasks_and_reaches_the_plan(tmp_path, monkeypatch):
    given = []

    def plant(student, tasks, env, *, steps, learning_rate, run_dir):
        given.append(([t["instance_id"] for t in tasks], steps, learning_rate))
        return {"path": str(tmp_path / "planted" / "model"), "steps": steps, "learning_rate": learning_rate,
                "nll": [1.0, 0.5], "tasks": len(tasks)}

    monkeypatch.setattr(planting, "plant", plant)
    assert preparation.prepare(_parameters(oracle_pairs=1), tmp_path / "run").planted is None and not given
    parameters = _parameters(oracle_pairs=1, arms={"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"},
                                                   "B+": {"start": "planted"}}, control="", n_test=2,
                             plant_steps=3, plant_learning_rate=0.01)
    inputs = preparation.prepare(parameters, tmp_path / "run")
    assert given == [([t["instance_id"] for t in inputs.test], 3, 0.01)] and len(inputs.test) == 2
    assert "expert" not in inputs.pairs  # no arm trains on expert pairs
    plan = training.plan_from_parameters(parameters, inputs)
    assert plan.planted == str(tmp_path / "planted" / "model")
    assert {j["arm"]: j["model"] for j in training.jobs(plan) if j["kind"] == "train"}["B+"] == plan.planted


def test_screening_keeps_the_tasks_that_give_grpo_a_gradient_measured_once(tmp_path, monkeypatch):
    from composer import policies

    calls = []

    def evaluate(student, tasks, *, n, return_rollouts, **_):  # task i: i % 3 of n rollouts solved
        calls.append(len(tasks))
        runs = [(t["instance_id"], [], float(j < i % 3), {}) for i, t in enumerate(tasks) for j in range(n)]
        return {}, runs

    monkeypatch.setattr(policies, "evaluate", evaluate)
    parameters = _parameters(arms={"A": {}}, screen_tasks=4, generations=2, steps=1, prompts_per_step=1)
    inputs = preparation.prepare(parameters, tmp_path)
    train = zoo.split_tasks(zoo.PROFILES["smoke"], "train")
    # successes 0, 1, 2, 0 of 2: only task 1 is strictly between
    assert inputs.screened["successes"] == [0, 1, 2, 0] and [t["instance_id"] for t in inputs.train] == [
        train[1]["instance_id"]]
    planned = training.plan_from_parameters(parameters, inputs).train
    assert [t["instance_id"] for t in planned] == [train[1]["instance_id"]]
    again = preparation.prepare(parameters, tmp_path)
    assert calls == [4] and again.train == inputs.train  # measured once, then read back
    with pytest.raises(ValueError, match="1 of 4 screened train tasks .* a seed trains on 2: screen more"):
        preparation.prepare(dataclasses.replace(parameters, prompts_per_step=2), tmp_path)
    assert preparation.prepare(_parameters(arms={"A": {}}), tmp_path).screened is None


def test_a_pilots_within_reach_file_as_test_tasks_is_named_for_the_verdict(tmp_path):
    """A pilot's within-reach.jsonl (beside its pilot.json) as test_tasks: the tasks are its records, and the
    inputs say in words which tasks they are, so 004's verdict speaks for them alone; the same records under
    another name, or without the pilot's summary beside them, are plain test tasks."""
    from composer.costs import pilot

    test = zoo.split_tasks(zoo.PROFILES["smoke"], "test")[:2]
    folder = tmp_path / "pilot"
    folder.mkdir()
    reach = folder / pilot.WITHIN_REACH_FILE
    reach.write_text("".join(json.dumps(r) + "\n" for r in test))
    parameters = _parameters(arms={"A": {}}, test_tasks=str(reach))
    assert preparation.prepare(parameters, tmp_path / "run").test_scope is None  # no pilot.json beside it
    (folder / pilot.SUMMARY_FILE).write_text(json.dumps({
        "schema": pilot.SCHEMA, "pool": "embedded", "student": {"model": "student"},
        "within_reach": pilot.within_reach({"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.0, 0.0]}, 2)}))
    inputs = preparation.prepare(parameters, tmp_path / "run")
    assert [t["instance_id"] for t in inputs.test] == [t["instance_id"] for t in test]
    assert inputs.test_scope == (f"within the student's reach (2 of 3 embedded tasks that student solved at least "
                                 f"once in 2 runs of the pilot at {folder}): the verdict speaks for these tasks only")
    other = folder / "tasks.jsonl"
    other.write_text(reach.read_text())
    assert preparation.prepare(dataclasses.replace(parameters, test_tasks=str(other)), tmp_path / "run").test_scope is None


def test_real_tasks_graded_by_the_scan_alone_stop_004_before_training_unless_opted_in(tmp_path, monkeypatch):
    """A django task (its tests run by runtests.py, so grading runs the tampering scan alone) among 004's test tasks
    is refused before anything is trained, with the counts; on the opt-in it runs and the inputs count it for the
    report's notes."""
    from composer.env.real import container, swebench

    record = json.loads((ROOT / "data/swebench-lite/marshmallow-code__marshmallow-1343.json").read_text())
    django = {**record, "instance_id": "django__django-11099", "repo": "django/django", "version": "3.0"}
    (tmp_path / "test.json").write_text(json.dumps([django]))
    parameters = _parameters(arms={"A": {}}, test_tasks=str(tmp_path / "test.json"))
    monkeypatch.delenv(container.SCAN_ONLY_GRADING, raising=False)
    with pytest.raises(ValueError, match=r"1 of the 1 test tasks and 0 of the \d+ train tasks \(django/django\) "
                                         r"would be graded by the tampering scan alone; the first: refusing"):
        preparation.prepare(parameters, tmp_path / "run")
    monkeypatch.setenv(container.SCAN_ONLY_GRADING, "1")
    monkeypatch.setattr(swebench, "real_missing", lambda instance: [])  # no image needed to prepare
    assert preparation.prepare(parameters, tmp_path / "run").scan_only == 1
