"""composer.ab.training: the A/B's plan (validation, pairing, from parameters and prepared inputs), job hashing, caching
and resume.

    .venv/bin/pytest -q tests/test_ab_training.py

Most tests replace the two kinds of job with fakes (the orchestration is what they check); one runs real GRPO
jobs of the smoke zoo's student end to end, in this process (the slow tier's). The spawned-process path runs in
tests/test_bench_ab.py (the slow tier's) and in the notebook's report profile.
"""

import json
import os
import shutil

import numpy as np
import pytest

from composer import zoo
from composer.ab import preparation, training
from composer.ab.parameters import ABParameters

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _task(i: int, split: str = "train") -> dict:
    return {"instance_id": f"{split}-{i}", "repo": "x"}


def _plan(tmp_path=None, **changes) -> training.Plan:
    settings = dict(student="tiny-student", train=[_task(i) for i in range(6)],
                    test=[_task(i, "test") for i in range(3)],
                    arms={"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"}}, seeds=2,
                    pairs={"pairs": str(_pairs_file(tmp_path))} if tmp_path else {},
                    grpo=dict(steps=1, prompts_per_step=2))
    settings.update(changes)
    return training.Plan(**settings)


def _pairs_file(tmp_path, text=None):
    """A pairs dataset's folder and JSONL twin (what a job key hashes); written once unless text is given."""
    folder = tmp_path / "inputs" / "pairs"
    folder.mkdir(parents=True, exist_ok=True)
    if text is not None or not folder.with_suffix(".jsonl").exists():
        folder.with_suffix(".jsonl").write_text(text or '{"pair_id": "p0"}\n')
    return folder


@pytest.mark.parametrize("changes, match", [
    (dict(arms={"A": {"learning_rate": 1.0}}), r"\['learning_rate'\] are not ComposerConfig channel fields"),
    (dict(arms={"A": {"trace_replay_weight": -1.0}}), "trace_replay_weight must be >= 0"),
    (dict(arms={"B": {"trace_replay_weight": 0.5}}), "arm 'B' has trace_replay_weight > 0 and needs 'pairs'"),
    (dict(arms={"baseline": {}}), "none called 'baseline'"),
    (dict(arms={"planted": {}}), "none called 'baseline' or 'planted'"),
    (dict(arms={"B+": {"start": "planted"}}), r"start 'planted' needs .* the plan's planted checkpoint"),
    (dict(arms={"B+": {"start": "teacher"}}, planted="x/model"), r"arm 'B\+': start 'teacher' needs to be 'student'"),
    (dict(arms={}), "at least one arm"),
    (dict(seeds=0), "seeds must be >= 1"),
    (dict(grpo=dict(steps=4, prompts_per_step=2)), "8 tasks per seed, but the train split has 6"),
    (dict(grpo=dict(steps=16, prompts_per_step=2, num_iterations=4)), "8 tasks per seed, but the train split has 6"),
    (dict(grpo=dict(steps=6, prompts_per_step=2, num_iterations=4)), r"steps \(6\) must be a multiple of num_iterations"),
    (dict(test=[_task(1)]), "also train tasks"),
    (dict(test=[]), "no test tasks"),
    (dict(evaluation=dict(k=2, temprature=1.0)), r"unknown settings \['temprature'\]"),
    (dict(grpo=dict(steps=3, prompts_per_step=2), checkpoints=(2, 1)), r"checkpoints \[2, 1\]: .* increasing order"),
    (dict(grpo=dict(steps=3, prompts_per_step=2), checkpoints=(3,)), r"each from 1 to 2 \(the training's last step"),
    (dict(grpo=dict(steps=3, prompts_per_step=2), checkpoints=(1.5,)), r"checkpoints \[1.5\]: optimizer steps"),
])
def test_a_bad_plan_is_refused_with_the_field_named(tmp_path, changes, match):
    with pytest.raises(ValueError, match=match):
        _plan(tmp_path, **changes)


def test_every_arm_of_a_seed_trains_on_the_same_tasks_and_seeds_differ(tmp_path):
    plan = _plan(tmp_path)
    assert training.seed_tasks(plan, 0) == training.seed_tasks(plan, 0) and len(training.seed_tasks(plan, 0)) == 2
    assert training.seed_tasks(plan, 0) != training.seed_tasks(plan, 1)
    # TRL generates once every num_iterations optimizer steps: 12 steps at 4 iterations sample 3 x 2 tasks
    assert len(training.seed_tasks(_plan(tmp_path, grpo=dict(steps=12, prompts_per_step=2, num_iterations=4)), 0)) == 6
    trains = [j for j in training.jobs(plan) if j["kind"] == "train"]
    assert [(j["arm"], j["seed"]) for j in trains] == [("A", 0), ("B", 0), ("A", 1), ("B", 1)]
    assert trains[0]["pairs"] is None and trains[1]["pairs"] == plan.pairs["pairs"]


def test_job_keys_change_with_what_determines_the_job_and_only_that(tmp_path):
    def keys(plan):
        return {(j["kind"], j["arm"], j["seed"]): j["key"] for j in training.jobs(plan)}

    base = keys(_plan(tmp_path))
    assert keys(_plan(tmp_path)) == base  # deterministic
    lr = keys(_plan(tmp_path, grpo=dict(steps=1, prompts_per_step=2, learning_rate=1e-4)))
    assert lr[("eval", "baseline", None)] == base[("eval", "baseline", None)]  # the baseline did not train
    assert all(lr[k] != base[k] for k in base if k[1] != "baseline")
    # where a training logs is not what it trains: the live profile's report_to leaves every key as it was
    assert keys(_plan(tmp_path, grpo=dict(steps=1, prompts_per_step=2, report_to=["tensorboard"]))) == base
    k2 = keys(_plan(tmp_path, evaluation=dict(k=2)))
    assert all(k2[k] == base[k] for k in base if k[0] == "train")
    assert all(k2[k] != base[k] for k in base if k[0] == "eval")
    _pairs_file(tmp_path, '{"pair_id": "other"}\n')  # the pairs changed on disk: B retrains, A does not
    changed = keys(_plan(tmp_path))
    assert changed[("train", "A", 0)] == base[("train", "A", 0)]
    assert changed[("train", "B", 0)] != base[("train", "B", 0)]


def test_a_planted_start_trains_from_the_planted_checkpoint_and_leaves_other_keys_alone(tmp_path, fake_jobs):
    def keys(plan):
        return {(j["kind"], j["arm"], j["seed"]): j["key"] for j in training.jobs(plan)}

    planted_dir = tmp_path / "inputs" / "planted-abc" / "model"
    planted_dir.mkdir(parents=True)
    (planted_dir / "weights").write_text("B, planted")  # the fakes read a model's folder: "B..." solves every task
    arms = {"A": {}, "B+": {"start": "planted"}}
    base, plan = keys(_plan(tmp_path, arms={"A": {}})), _plan(tmp_path, arms=arms, planted=str(planted_dir))
    with_planted = keys(plan)
    assert all(with_planted[k] == base[k] for k in base)  # the student's arms keep their keys
    assert with_planted[("eval", "planted", None)].startswith("eval-planted-")
    trains = {j["arm"]: j for j in training.jobs(plan) if j["kind"] == "train" and j["seed"] == 0}
    assert (trains["A"]["model"], trains["B+"]["model"]) == ("tiny-student", str(planted_dir))
    assert trains["B+"]["channels"] == {}  # trained as A is; only its start differs
    # as A, from the student, B+'s training would hash as A's: the start is what tells them apart
    assert with_planted[("train", "B+", 0)] != keys(_plan(tmp_path, arms={"A": {}, "B+": {}}))[("train", "B+", 0)]
    moved = tmp_path / "inputs" / "planted-def" / "model"  # another plant (steps, rate, tasks): B+ retrains
    shutil.copytree(planted_dir, moved)
    other = keys(_plan(tmp_path, arms=arms, planted=str(moved)))
    assert other[("train", "B+", 0)] != with_planted[("train", "B+", 0)] and other[("train", "A", 0)] == base[
        ("train", "A", 0)]
    done = training.run(plan, tmp_path, progress=False)
    assert ("eval", "planted", None) in fake_jobs and training.outcomes(done, "planted", 2).all()
    assert training.outcomes(done, "planted", 2).shape == training.outcomes(done, "baseline", 2).shape == (2, 3, 1)
    nested = _plan(tmp_path, arms=arms, planted=str(planted_dir), grpo=dict(steps=2, prompts_per_step=1),
                   checkpoints=(1,))
    at_1 = training.at_step(training.run(nested, tmp_path, progress=False), 1)  # read at a dose: evaluated once
    assert training.outcomes(at_1, "planted", 2).all() and training.outcomes(at_1, "B+", 2).shape == (2, 3, 1)


@pytest.fixture
def fake_jobs(monkeypatch):
    calls = []

    def train(plan, job, out):
        calls.append(("train", job["arm"], job["seed"]))
        for step in (*plan.checkpoints, None):
            (out / training.model_folder(step)).mkdir()
            (out / training.model_folder(step) / "weights").write_text(f"{job['arm']}{job['seed']}")
        return {"wall_s": 1.0, "log": [{"step": 1, "loss": 0.0, "reward": 0.5}], "model": "model"}

    def evaluate(plan, job, model):
        calls.append(("eval", job["arm"], job["seed"]))
        hit = 0 if job["arm"] == training.BASELINE else int((model / "weights").read_text().startswith("B"))
        return {"wall_s": 0.5, "task_ids": [r["instance_id"] for r in plan.test], "model": model.name,
                "outcomes": [[hit] * plan.evaluation["k"] for _ in plan.test]}

    monkeypatch.setattr(training, "_train", train)
    monkeypatch.setattr(training, "_evaluate", evaluate)
    return calls


def test_run_reuses_finished_jobs_and_resumes_at_the_unfinished_one(tmp_path, fake_jobs):
    plan = _plan(tmp_path)
    first = training.run(plan, tmp_path, progress=False)
    assert len(fake_jobs) == 1 + 2 * 2 * 2  # baseline + (train, eval) x 2 arms x 2 seeds
    assert training.outcomes(first, "B", 2).shape == (2, 3, 1) and training.outcomes(first, "B", 2).all()
    assert not training.outcomes(first, "A", 2).any() and training.outcomes(first, "baseline", 2).shape == (2, 3, 1)
    assert training.train_curve(first, "A", 2) == [[0.5], [0.5]]

    fake_jobs.clear()
    assert training.run(plan, tmp_path, progress=False) == first and fake_jobs == []  # all cached

    # A killed run: B seed 1's evaluation never published, a half-written folder left behind
    key = next(j["key"] for j in training.jobs(plan) if (j["kind"], j["arm"], j["seed"]) == ("eval", "B", 1))
    shutil.rmtree(tmp_path / "jobs" / key)
    (tmp_path / "jobs" / f".{key}.abc.tmp").mkdir()
    again = training.run(plan, tmp_path, progress=False)
    assert fake_jobs == [("eval", "B", 1)] and again == first
    assert not list((tmp_path / "jobs").glob(".*.tmp"))


def test_nested_doses_evaluate_each_checkpoint_of_one_training(tmp_path, fake_jobs):
    """With checkpoints, each arm and seed trains once and every checkpoint it saved is evaluated like its last
    model; at_step reads the results as the trainings stood there. The checkpoints are part of a training's key
    (its folder holds them), the baseline's stays."""
    plan = _plan(tmp_path, grpo=dict(steps=3, prompts_per_step=2), checkpoints=(1, 2))
    done = training.run(plan, tmp_path, progress=False)
    assert sorted(set(fake_jobs)) == sorted(fake_jobs[:1] + [(kind, arm, seed) for kind in ("train", "eval")
                                                             for arm in ("A", "B") for seed in (0, 1)])
    assert fake_jobs.count(("train", "B", 0)) == 1 and fake_jobs.count(("eval", "B", 0)) == 3
    assert {step: training.at_step(done, step)["B", 0]["eval"]["model"] for step in (1, 2, None)} == {
        1: "model-step1", 2: "model-step2", None: "model"}
    assert training.at_step(done, 1)["B", 1]["train"] == done["B", 1]["train"] and training.at_step(done, None) == done
    assert training.outcomes(training.at_step(done, 2), "B", 2).shape == (2, 3, 1)
    fake_jobs.clear()
    assert training.run(plan, tmp_path, progress=False) == done and fake_jobs == []  # all cached

    def keys(p):
        return {(j["kind"], j["arm"], j["seed"], j.get("step")): j["key"] for j in training.jobs(p)}
    nested, plain = keys(plan), keys(_plan(tmp_path, grpo=dict(steps=3, prompts_per_step=2)))
    assert nested[("eval", "baseline", None, None)] == plain[("eval", "baseline", None, None)]
    assert nested[("train", "A", 0, None)] != plain[("train", "A", 0, None)]
    assert len({nested["eval", "A", 0, step] for step in (1, 2, None)}) == 3


def test_a_rerun_spares_the_temp_folder_of_a_job_still_building(tmp_path, fake_jobs):
    """A job building elsewhere (on a SLURM node, in another notebook) holds its lock: a rerun's cleanup of killed
    runs' temp folders leaves its folder alone and removes the others."""
    import fcntl

    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    (jobs_dir / ".train-X-s0-123.abc.tmp").mkdir()
    (jobs_dir / ".train-Y-s0-456.def.tmp").mkdir()
    with open(jobs_dir / ".train-X-s0-123.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        training.run(_plan(tmp_path), tmp_path, progress=False)
        assert [p.name for p in jobs_dir.glob(".*.tmp")] == [".train-X-s0-123.abc.tmp"]


def test_a_failing_job_is_named_and_the_finished_ones_are_kept(tmp_path, fake_jobs, monkeypatch):
    def broken(plan, job, out):
        if job["arm"] == "B":
            raise OSError("disk full")
        (out / "model").mkdir()
        (out / "model" / "weights").write_text("A")
        return {"wall_s": 1.0, "log": [], "model": "model"}

    monkeypatch.setattr(training, "_train", broken)
    with pytest.raises(RuntimeError, match=r"004 job train-B-s0-\w+ failed: OSError\('disk full'\)"):
        training.run(_plan(tmp_path), tmp_path, progress=False)
    finished = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "jobs").iterdir())
    assert finished == ["eval-A-s0", "eval-baseline", "train-A-s0"] and not list((tmp_path / "jobs").glob(".*"))


def _parameters(**changes) -> ABParameters:
    """The notebook's parameters with `changes`; a role (reference, treatment, control, positive control) whose arm
    the changed arms leave out is set to none."""
    from composer import run

    values = {**run.effective_parameters("004-ab-train-grpo-vs-trace-replay-dpo")[0], **changes}
    roles = ("reference", "treatment", "control", "positive_control")
    return ABParameters.of({**values, **{r: values[r] if values[r] in values["arms"] else "" for r in roles}})


def _planned(parameters: ABParameters, run_dir) -> tuple[training.Plan, preparation.Inputs]:
    inputs = preparation.prepare(parameters, run_dir)
    return training.plan_from_parameters(parameters, inputs), inputs


def test_any_hugging_face_student_trains_and_is_evaluated_on_named_tasks_real_ones_in_containers(tmp_path, real_record):
    """004 with a model folder as its student (not "zoo:..."): GRPO on tasks from a .jsonl, evaluation on the real
    SWE-bench Lite instance (a path relative to the checkout), in its container; the environment is CodingEnv's
    default one, not a zoo profile's."""
    from composer.env.environment import EnvConfig

    profile = zoo.PROFILES["smoke"]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(t) + "\n" for t in zoo.split_tasks(profile, "train")[:2]))
    student = str(zoo.model(profile, "student"))
    plan, inputs = _planned(_parameters(
        student=student, train_tasks=str(train), test_tasks="data/swebench-lite/marshmallow-code__marshmallow-1343.json",
        max_new_tokens=24, env_max_steps=2, arms={"A": {}}, seeds=1, generations=2), tmp_path)
    assert plan.student == student and inputs.profile is None and plan.env == EnvConfig(max_steps=2)
    assert [t["instance_id"] for t in plan.test] == [real_record["instance_id"]] and len(plan.train) == 2
    done = training.run(plan, tmp_path, progress=False)
    for result in (done["baseline"], done["A", 0]["eval"]):  # the tiny student's turns do not fit the prompt:
        assert result["task_ids"] == [real_record["instance_id"]] and result["steps"] == 2  # malformed, not skipped
    assert [h for h in done["A", 0]["train"]["log"] if "loss" in h]


@pytest.mark.slow
def test_real_jobs_end_to_end_on_the_smoke_zoo(tmp_path):
    """Real GRPO (+ DPO on oracle pairs) and real evaluations, in this process: every arm's model is its own,
    outcomes are 0/1 per task and sample, the B arm logged its DPO channel. The slow tier's: the fast tier runs
    real jobs of every arm through 004's smoke run (tests/test_notebooks.py) and under a launcher (below)."""
    plan, inputs = _planned(_parameters(pairs_dir=str(tmp_path / "none"), seeds=1), tmp_path)
    assert inputs.oracle and inputs.pairs["pairs"]["rows"] == inputs.pairs["shuffled"]["rows"] > 0
    done = training.run(plan, tmp_path, progress=False)
    for arm in plan.arms:
        cell = done[arm, 0]
        assert (tmp_path / "jobs" / cell["keys"][0] / "model" / "model.safetensors").is_file()
        x = np.array(cell["eval"]["outcomes"])
        assert x.shape == (len(plan.test), plan.evaluation["k"]) and set(x.ravel()) <= {0, 1}
        assert cell["eval"]["task_ids"] == [r["instance_id"] for r in plan.test]
    logged = [h for h in done["B", 0]["train"]["log"] if "loss" in h]
    assert logged and "trace_replay/reward_accuracy" in logged[0]
    assert "trace_replay/reward_accuracy" not in [h for h in done["A", 0]["train"]["log"] if "loss" in h][0]
    result = json.loads((tmp_path / "jobs" / done["B", 0]["keys"][0] / "result.json").read_text())
    assert result["job"]["pairs"] == inputs.pairs["pairs"]["path"]


def test_a_spawned_jobs_peak_memory_is_its_own_not_its_parents():
    """getrusage's ru_maxrss survives fork + exec: a spawned job would report its parent's high-water mark."""
    import multiprocessing

    ballast = bytearray(1024 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page: 1 GiB resident in the parent
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        child = pool.apply(training.peak_rss_bytes)
    assert child + 512 * 2**20 < training.peak_rss_bytes()
    del ballast


def test_a_spawned_job_worker_keeps_its_parents_warning_filters():
    import multiprocessing
    import os
    import warnings
    from concurrent.futures import ProcessPoolExecutor

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)  # what report.quiet() does in a notebook
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=training._worker_init,
                                 initargs=(os.getpid(), list(warnings.filters))) as pool:
            first = pool.submit(eval, "__import__('warnings').filters[0][:3:2]").result()
    assert first == ("ignore", FutureWarning)


def test_an_evaluation_under_a_two_process_launcher_equals_the_one_process_one(tmp_path):
    """The baseline's evaluation (sampled, 2 per task) with each of 2 torchrun processes on its share of the test
    tasks: the same outcomes and step counts as in one process, in plan.test's order, published like any job."""
    import dataclasses
    import sys

    plan, _ = _planned(_parameters(pairs_dir=str(tmp_path / "none"), seeds=1), tmp_path)
    plan = dataclasses.replace(plan, test=plan.test[:3], evaluation={**plan.evaluation, "k": 2, "temperature": 1.0})
    job = training.jobs(plan)[0]
    assert job["kind"] == "eval" and job["arm"] == training.BASELINE
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    results = {}
    for name, how in (("launched", launch), ("alone", None)):
        (tmp_path / name).mkdir()
        results[name] = training._run_job(plan, job, tmp_path / name, False, None, how)
    launched, alone = results["launched"], results["alone"]
    assert launched["processes"] == 2 and launched["task_ids"] == [r["instance_id"] for r in plan.test]
    for key in ("outcomes", "steps", "malformed", "submitted", "task_ids"):
        assert launched[key] == alone[key], key
    assert sorted(p.name for p in (tmp_path / "launched" / job["key"]).iterdir()) == ["result.json"]


def test_merge_evaluations_refuses_a_missing_task(tmp_path):
    plan, _ = _planned(_parameters(pairs_dir=str(tmp_path / "none"), seeds=1), tmp_path)
    ids = [r["instance_id"] for r in plan.test]
    shard = {"wall_s": 1.0, "task_ids": ids[:1], "outcomes": [[1]], "steps": 3, "malformed": 0, "submitted": 1}
    with pytest.raises(RuntimeError, match=f"lack {len(ids) - 1} test tasks, e.g. {ids[1]}"):
        training.merge_evaluations(plan, [shard])


def test_a_training_runs_under_a_two_process_launcher(tmp_path):
    """One arm's training (GRPO + DPO) on 2 CPU processes under torchrun (what `accelerate launch` with the FSDP2
    config does on GPUs): the step's rollouts are shared out, rank 0 publishes the job folder, the model loads."""
    import dataclasses
    import sys

    plan, _ = _planned(_parameters(pairs_dir=str(tmp_path / "none"), seeds=1), tmp_path)
    plan = dataclasses.replace(plan, arms={"B": plan.arms["B"]})
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    done = training.run(plan, tmp_path, progress=False, train_only=True, launch=launch)
    train = done["B", 0]["train"]
    assert train["processes"] == 2
    logged = [h for h in train["log"] if "loss" in h]
    assert len(logged) == plan.grpo["steps"] and "trace_replay/reward_accuracy" in logged[0]
    folder = tmp_path / "jobs" / done["B", 0]["keys"][0]
    assert (folder / "model" / "model.safetensors").is_file()
    # nothing of the launch left; each rank's phase times (composer.costs.phases), one record per optimizer step
    assert sorted(p.name for p in folder.iterdir()) == ["model", "phases-p1.jsonl", "phases.jsonl", "result.json"]
    for name, rank in (("phases.jsonl", 0), ("phases-p1.jsonl", 1)):
        records = [json.loads(line) for line in (folder / name).read_text().splitlines()]
        assert [(r["step"], r["process"], r["processes"]) for r in records] == [
            (s, rank, 2) for s in range(1, plan.grpo["steps"] + 1)]
    with pytest.raises(RuntimeError, match="exited with"):
        training.run(dataclasses.replace(plan, seeds=2), tmp_path, progress=False, train_only=True,
                 launch=[sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--no-such-flag"])


def test_a_training_saves_the_model_after_each_checkpoint_step(tmp_path):
    """A real training of the smoke zoo's student (GRPO + DPO on oracle pairs, whose gradient is never 0) with a
    checkpoint: the model after step 1 is saved in its own folder, and it is not the last step's."""
    from safetensors.torch import load_file

    plan, _ = _planned(_parameters(pairs_dir=str(tmp_path / "none"), seeds=1, steps=2, learning_rate=1e-2,
                                   arms={"B": {"trace_replay_weight": 0.5, "pairs": "pairs"}}, checkpoints=[1]),
                       tmp_path)
    (job,) = [j for j in training.jobs(plan) if j["kind"] == "train"]
    training._train(plan, job, tmp_path / "job")
    first, last = (load_file(tmp_path / "job" / training.model_folder(s) / "model.safetensors") for s in (1, None))
    assert first.keys() == last.keys() and any((first[k] != last[k]).any() for k in first)


def test_the_report_profiles_dpo_arms_encode_a_pairs_prompt_once(tmp_path, monkeypatch):
    """TRL's GRPOConfig turns gradient checkpointing on, and a checkpointed model keeps no cache, so
    trainer.completion_token_logps would encode each pair's ~3,500-token prompt once per row (chosen, rejected) and
    recompute it in the backward. 004's train jobs encode a pair's prompt once, never as whole rows: on CPU (the
    report profile's unmasked_cpu_rows) one pair at a time on the cache of its unmasked prompt
    (trainer.completion_token_logps), else packed (trainer.packed_logps: chosen and rejected as two branches of one
    row)."""
    from composer import run, trainer

    report = run.effective_parameters("004-ab-train-grpo-vs-trace-replay-dpo", profile="report")[0]
    steps = report["trainer_config"].get("num_iterations", 1)  # one generation, trained on as often as the report's
    plan, _ = _planned(_parameters(pairs_dir=str(tmp_path / "none"), seeds=1, steps=steps,
                                   trainer_config=report["trainer_config"]), tmp_path)
    (job,) = [j for j in training.jobs(plan) if j["kind"] == "train" and j["arm"] == "B"]
    assert report["trainer_config"]["unmasked_cpu_rows"]
    calls = {"shared": 0, "whole rows": 0}
    for name, key in (("packed_logps", "shared"), ("completion_token_logps", "shared"),
                      ("_whole_rows_logps", "whole rows")):
        def counted(*args, _f=getattr(trainer, name), _key=key, **kwargs):
            calls[_key] += 1
            return _f(*args, **kwargs)
        monkeypatch.setattr(trainer, name, counted)
    result = training._train(plan, job, tmp_path / "job")
    assert any("trace_replay/reward_accuracy" in h for h in result["log"])  # the DPO channel ran
    assert calls["shared"] > 0 and calls["whole rows"] == 0
