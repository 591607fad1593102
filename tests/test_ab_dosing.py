"""Spike 004's doses: what a dose may change, their names, and the dose at which B is read.

    .venv/bin/pytest tests/test_ab_dosing.py
"""

import dataclasses

import numpy as np
import pytest

from composer.ab import dosing
from composer.ab.parameters import ABParameters

PARAMETERS = ABParameters(arms={"A": {}, "B+": {"trace_replay_weight": 0.5, "pairs": "expert"}}, treatment="B+",
                          control="", steps=2, prompts_per_step=2, learning_rate=1e-4, generations=4,
                          trainer_config={"trace_replay_batch_size": 10, "gradient_checkpointing": False})


def test_a_dose_overrides_the_shared_budget_and_merges_trainer_config():
    at = dosing.apply(PARAMETERS, {"learning_rate": 1e-3, "trainer_config": {"trace_replay_batch_size": 20}})
    assert at.learning_rate == 1e-3 and at.steps == 2 and at.arms == PARAMETERS.arms
    assert at.trainer_config == {"trace_replay_batch_size": 20, "gradient_checkpointing": False}
    assert PARAMETERS.learning_rate == 1e-4 and PARAMETERS.trainer_config["trace_replay_batch_size"] == 10
    assert dosing.apply(PARAMETERS, {}) == PARAMETERS
    with pytest.raises(ValueError, match="004 parameter learning_rate: must be more than 0, got -0.001"):
        dosing.apply(PARAMETERS, {"learning_rate": -1e-3})  # a dose's value is checked as the parameter's


@pytest.mark.parametrize("dose, match", [
    ({"arms": {"B+": {"trace_replay_weight": 5.0}}}, r"\['arms'\] cannot be dosed"),  # B+'s alone
    ({"generations": 8}, r"\['generations'\] cannot be dosed.*screening"),
    ({"n_test": 80}, r"\['n_test'\] cannot be dosed"),
    ({"trainer_config": {"trace_replay_weight": 2.0}}, r"\['trace_replay_weight'\] belong to the arms"),
    ({"trainer_config": 3}, "trainer_config must be a dict"),
])
def test_a_dose_that_is_not_the_same_for_every_arm_is_refused(dose, match):
    with pytest.raises(ValueError, match=match):
        dosing.apply(PARAMETERS, dose)


def test_labels_name_only_what_differs_between_the_doses():
    assert dosing.labels(PARAMETERS, [{}, {"learning_rate": 3e-4}, {"learning_rate": 1e-3}]) == [
        "learning_rate=0.0001", "learning_rate=0.0003", "learning_rate=0.001"]
    assert dosing.labels(PARAMETERS, [{}, {"steps": 4, "trainer_config": {"trace_replay_batch_size": 20}}]) == [
        "steps=2, trace_replay_batch_size=10", "steps=4, trace_replay_batch_size=20"]
    assert dosing.labels(PARAMETERS, [{}]) == ["as set"]
    # a setting only some doses give is shown at its GRPOConfig default where they do not
    assert dosing.labels(PARAMETERS, [{}, {"steps": 6, "trainer_config": {"num_iterations": 3}}]) == [
        "steps=2, num_iterations=1", "steps=6, num_iterations=3"]


def test_b_is_read_at_the_first_dose_that_detects_the_positive_control():
    def diff(low):
        return {"estimate": low + 0.05, "low": low, "high": low + 0.1}

    assert dosing.read_at([diff(-0.02), diff(0.01), diff(0.03)]) == 1
    assert dosing.read_at([diff(0.0), diff(-0.01)]) is None  # an interval that reaches 0 detects nothing
    assert dosing.read_at([None, None]) is None  # no positive control
    # planted: detected from the start, so B is read after the most training, and only if still detected there
    assert dosing.read_at([diff(0.2), diff(0.2), diff(0.1)], planted=True) == 2
    assert dosing.read_at([diff(0.2), diff(0.2), diff(-0.01)], planted=True) is None
    assert dosing.read_at([], planted=True) is None


@pytest.mark.slow
def test_004_runs_every_dose_and_reads_b_where_the_rule_says(tmp_path):
    """The notebook at smoke scale at 1 and 2 optimizer steps on the same rollouts (the second reuses each
    generation: its steps log no reward): the three probed arms at each dose (their own jobs), the control only at
    the read dose, and metrics.dose_response with both comparisons and each arm's pass@1 per dose. The slow tier's:
    twice the jobs of 004's smoke run (tests/test_notebooks.py), which the fast tier runs at its one dose."""
    from composer import report, run

    slug = "004-ab-train-grpo-vs-trace-replay-dpo"
    code = run.run(slug, overrides={"doses": [{}, {"steps": 2, "trainer_config": {"num_iterations": 2}}],
                                          "run_dir": str(tmp_path / "run")},
                   reports_dir=tmp_path)
    assert code == 0
    results = report.read_results(tmp_path / slug / "executed.ipynb")
    response = results["metrics"]["dose_response"]
    assert response["labels"] == ["steps=1, num_iterations=1", "steps=2, num_iterations=2"]
    assert [sorted(c) for c in response["comparisons"]] == [["B - A", "B+ - A", "dose"]] * 2
    first = dosing.read_at([c["B+ - A"] for c in response["comparisons"]])
    assert response["first_detected"] == (response["labels"][first] if first is not None else None)
    read = response["labels"].index(response["read_at"])
    assert read == (first if first is not None else 1)
    assert results["metrics"]["positive_control"]["diff"] == response["comparisons"][read]["B+ - A"]
    assert read == 1  # no smoke dose detects B+: B is read where steps reuse rollouts and log no reward
    assert all(row["mean train reward"] is not None for row in results["metrics"]["jobs"])  # not NaN (-> None)
    assert [r["dose"] for r in response["pass_at_1"]] == response["labels"]  # each probed arm's pass@1 per dose
    for arm in ("A", "B", "B+"):
        assert response["pass_at_1"][read][arm] == pytest.approx(np.mean(results["metrics"]["outcomes"][arm]))
    trained = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "run" / "jobs").glob("train-*"))
    seeds = results["params"]["seeds"]
    assert trained == sorted([f"train-{arm}-s{s}" for arm in ("A", "B", "B+") for s in range(seeds)] * 2
                             + [f"train-control-s{s}" for s in range(seeds)])


def test_nested_doses_are_named_by_their_step_of_the_one_training():
    assert dosing.nested_labels(6, [2, 4]) == ["step 2 of 6", "step 4 of 6", "step 6 of 6"]


def test_the_trainings_of_a_dose_response_nested_or_not():
    """Nested doses share one training, read at each checkpoint and its last step; doses are each a training; both
    at once are refused before anything trains."""
    nested = dataclasses.replace(PARAMETERS, checkpoints=[1])
    assert dosing.trainings(nested) == ([nested], [1, None], ["step 1 of 2", "step 2 of 2"])
    assert dosing.trainings(PARAMETERS) == ([PARAMETERS], [None], ["as set"])
    doses = dataclasses.replace(PARAMETERS, doses=[{}, {"learning_rate": 1e-3}])
    at, steps, names = dosing.trainings(doses)
    assert at == [doses, dataclasses.replace(doses, learning_rate=1e-3)] and steps == [None, None]
    assert names == ["learning_rate=0.0001", "learning_rate=0.001"]
    with pytest.raises(ValueError, match="004 parameters doses and checkpoints: set one, not both"):
        dataclasses.replace(PARAMETERS, doses=[{}, {"steps": 4}], checkpoints=[1])


@pytest.mark.slow
def test_004_reads_nested_doses_from_one_training_per_arm_and_seed(tmp_path):
    """The notebook at smoke scale with a checkpoint after step 1 of 2: one training per arm and seed (the control's
    too), an evaluation of each probed arm after step 1 and after step 2, and the dose-response read from them. Its
    positive control is planted (expert pairs from the test tasks), which the report says."""
    from composer import report, run

    slug = "004-ab-train-grpo-vs-trace-replay-dpo"
    code = run.run(slug, overrides={"steps": 2, "checkpoints": [1], "positive_control_tasks": "test",
                                    "run_dir": str(tmp_path / "run")}, reports_dir=tmp_path)
    assert code == 0
    results = report.read_results(tmp_path / slug / "executed.ipynb")
    response, seeds = results["metrics"]["dose_response"], results["params"]["seeds"]
    assert response["labels"] == ["step 1 of 2", "step 2 of 2"] and response["checkpoints"] == [1]
    assert any(note.startswith("the positive control B+ is planted") for note in results["notes"])
    assert [sorted(c) for c in response["comparisons"]] == [["B - A", "B+ - A", "dose"]] * 2
    read = response["labels"].index(response["read_at"])
    assert results["metrics"]["positive_control"]["diff"] == response["comparisons"][read]["B+ - A"]
    for arm in ("A", "B", "B+"):
        assert response["pass_at_1"][read][arm] == pytest.approx(np.mean(results["metrics"]["outcomes"][arm]))
    jobs = tmp_path / "run" / "jobs"
    trained = sorted(p.name.rsplit("-", 1)[0] for p in jobs.glob("train-*"))
    assert trained == sorted(f"train-{arm}-s{s}" for arm in ("A", "B", "B+", "control") for s in range(seeds))
    at_step_1 = sorted(p.name.rsplit("-", 1)[0] for p in jobs.glob("eval-*-step1-*"))
    assert at_step_1 == sorted(f"eval-{arm}-s{s}-step1" for arm in ("A", "B", "B+", "control") for s in range(seeds))


@pytest.mark.slow
def test_004_with_a_planted_control_says_so_and_reads_b_at_the_last_dose(tmp_path):
    """The notebook at smoke scale with B+ starting from a planted checkpoint and a checkpoint after step 1 of 2: the
    planted checkpoint is evaluated once (its own row and metrics.planted), the report's note says what it is, and B
    is read at the last dose if B+ is detected there (else, with none detected, at the last dose too)."""
    from composer import report, run

    slug = "004-ab-train-grpo-vs-trace-replay-dpo"
    arms = {"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"},
            "control": {"trace_replay_weight": 0.5, "pairs": "shuffled"}, "B+": {"start": "planted"}}
    code = run.run(slug, overrides={"steps": 2, "checkpoints": [1], "arms": arms, "plant_steps": 2,
                                    "run_dir": str(tmp_path / "run")}, reports_dir=tmp_path)
    assert code == 0
    results = report.read_results(tmp_path / slug / "executed.ipynb")
    metrics = results["metrics"]
    assert metrics["planted"]["steps"] == 2 and len(metrics["planted"]["nll"]) == 3
    assert [row["arm"] for row in metrics["per_arm"]][:2] == ["baseline", "planted"]
    assert len(metrics["outcomes"]["planted"]) == len(metrics["task_ids"])  # one evaluation: tasks x samples
    assert any(note.startswith("the positive control B+ is planted: it trains as A does") for note in results["notes"])
    response = metrics["dose_response"]
    assert response["read_at"] == response["labels"][-1]
    evaluated = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "run" / "jobs").glob("eval-planted-*"))
    assert evaluated == ["eval-planted"]  # once, not per seed or dose
