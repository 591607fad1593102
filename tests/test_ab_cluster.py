"""composer.ab.cluster: 004's jobs through submitit on a real SLURM (scripts/slurm-local/start.sh: munged, slurmdbd,
slurmctld and slurmd for one node on this machine), never a mock.

    scripts/slurm-local/start.sh
    SLURM_CONF=/tmp/composer-slurm/cluster.conf .venv/bin/pytest tests/test_ab_cluster.py

Where no cluster answers the tests that need one skip, saying why; COMPOSER_REQUIRE_SLURM=1 (.ci/run sets it after
starting the cluster) turns that skip into a failure.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from composer import tether
from composer.ab import cluster, preparation, training
from test_ab_training import _parameters

os.environ.setdefault("HF_HUB_OFFLINE", "1")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the jobs below call this file's functions on the node


@pytest.fixture(scope="module")
def slurm_cluster():
    why = cluster.unavailable()
    if why:
        if os.environ.get("COMPOSER_REQUIRE_SLURM") == "1":
            pytest.fail(f"COMPOSER_REQUIRE_SLURM=1 but no SLURM cluster answers: {why}")
        pytest.skip(f"no SLURM cluster answers ({why}); scripts/slurm-local/start.sh starts one (root)")


def _sacct(job_ids: list[str], until=lambda state: state.split()[0] not in cluster.ACTIVE) -> dict[str, str]:
    """The jobs' states in SLURM's accounting once until(state) holds for all (a job publishes its result a moment
    before it ends), or after 300 s (a hang guard)."""
    deadline = time.time() + 300
    while True:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(job_ids)],
                             capture_output=True, text=True, check=True).stdout
        states = dict(line.split("|", 1) for line in out.splitlines())
        if all(until(states.get(i, "UNKNOWN")) for i in job_ids) or time.time() > deadline:
            return states
        time.sleep(0.5)


def _submitted(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "submitted.jsonl").read_text().splitlines()]


def test_settings_name_an_unknown_key_and_a_bad_executor_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"slurm settings \['gpus'\] are unknown; known: \[.*'gpus_per_node'"):
        cluster.settings({"gpus": 8})
    assert cluster.settings({"partition": "gpu"}) == {**cluster.SETTINGS, "partition": "gpu"}
    plan = training.Plan(student="s", train=[{"instance_id": "a"}], test=[{"instance_id": "b"}], arms={"A": {}})
    with pytest.raises(ValueError, match=r"executor must be one of \('local', 'slurm'\), got 'ray'"):
        training.run(plan, tmp_path, executor="ray")


@pytest.mark.parametrize("gpus, line", [("h200:8", "#SBATCH --gpus-per-node=h200:8"), (8, "#SBATCH --gpus-per-node=8")])
def test_a_typed_gpu_request_reaches_sbatch(tmp_path, monkeypatch, gpus, line):
    """The live profile asks for the GPU kind the plan priced in SLURM's typed form; submitit's generic parameter
    takes only a count. Only the job script is made, so no cluster is needed: submitit looks for `srun` on PATH
    before it makes anything, and a stand-in that does nothing answers it on a machine without SLURM."""
    stand_in = tmp_path / "bin" / "srun"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\nexit 1\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}")
    executor = cluster._executor(tmp_path, cluster.settings({"gpus_per_node": gpus}), "job", None)
    script = executor._executor._make_submission_file_text("python -c pass", "1").splitlines()
    assert line in script
    # a job keeps running past an interrupted run: the run's mark (tether.reaping) does not reach it
    assert f"unset {tether.MARK}" in script


def test_the_live_profiles_settings_are_valid_and_give_a_training_its_planned_hours():
    from composer import run
    from composer.costs import plan, power

    values, _ = run.effective_parameters("004-ab-train-grpo-vs-trace-replay-dpo", profile="live")
    s = cluster.settings(values["slurm"])
    setup = power.live_setup(values)
    w = plan.workload(values)
    hours = plan.gpu_hours(plan.MODELS[w["model"]], setup, steps=w["steps"], rollouts_per_step=w["rollouts_per_step"],
                           tokens_per_rollout=w["tokens_per_rollout"])["hours"]
    assert s["gpus_per_node"].endswith(f":{setup.gpus}") and s["timeout_min"] >= 60 * hours * 1.2  # a fifth to spare
    assert values["executor"] == "local" and values["launcher"].startswith("accelerate launch ")


def test_without_slurms_commands_it_says_what_is_missing_and_where_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cluster.unavailable().startswith("sbatch, squeue, sacct not found: executor 'slurm' submits from a machine")
    with pytest.raises(RuntimeError, match="executor 'slurm': sbatch, squeue, sacct not found"):
        cluster.run([{"key": "a"}], print, tmp_path, {}, finished=lambda job: False)


@pytest.mark.slow
def test_004_through_slurm_equals_the_local_executor(slurm_cluster, tmp_path):
    """A smoke-scale 004 (arms A and B, 2 seeds: 4 trainings, 5 evaluations): every job goes through sbatch and is
    in sacct, COMPLETED; each evaluation waited on its training (afterok); the outcomes per arm, seed, task and
    sample equal two local workers' on the same plan; a rerun submits nothing. The slow tier's: its jobs twice over,
    locally and through SLURM (the fast tier submits through the same cluster in the two tests below)."""
    parameters = _parameters(pairs_dir="", seeds=2, arms={"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"}})
    plan = training.plan_from_parameters(parameters, preparation.prepare(parameters, tmp_path / "inputs"))
    local = training.run(plan, tmp_path / "local", workers=2, progress=False)
    settings = {"cpus_per_task": 1, "poll_s": 1.0, "timeout_min": 20}
    remote = training.run(plan, tmp_path / "slurm", executor="slurm", slurm=settings, progress=False)

    assert remote["baseline"]["outcomes"] == local["baseline"]["outcomes"]
    for arm in plan.arms:
        for seed in range(plan.seeds):
            assert remote[arm, seed]["eval"]["outcomes"] == local[arm, seed]["eval"]["outcomes"], (arm, seed)
            assert remote[arm, seed]["keys"] == local[arm, seed]["keys"]
    submitted = _submitted(tmp_path / "slurm" / "slurm")
    assert len(submitted) == len(training.jobs(plan)) and {r["attempt"] for r in submitted} == {1}
    assert set(_sacct([r["job_id"] for r in submitted]).values()) == {"COMPLETED"}
    ids = {r["key"]: r["job_id"] for r in submitted}
    for job in training.jobs(plan):
        row = next(r for r in submitted if r["key"] == job["key"])
        assert row["after"] == (ids[job["after"]] if job.get("after") else None), job["key"]
    again = training.run(plan, tmp_path / "slurm", executor="slurm", slurm=settings, progress=False)
    assert len(_submitted(tmp_path / "slurm" / "slurm")) == len(submitted)
    assert again["A", 1]["eval"]["outcomes"] == remote["A", 1]["eval"]["outcomes"]


def _fails(job):
    raise RuntimeError(f"job {job['key']} cannot run: the cluster's disk is full")


def _publish(job):
    folder = Path(job["folder"])
    if job.get("hold"):  # wait for the test to release it (the file it names), not for a time a busy machine stretches
        deadline = time.time() + 600  # a hang guard
        while not Path(job["hold"]).exists() and time.time() < deadline:
            time.sleep(0.2)
    (folder / f"{job['key']}.done").write_text(os.environ.get("SLURM_JOB_ID", ""))


def _finished(job):
    return (Path(job["folder"]) / f"{job['key']}.done").is_file()


def test_a_failing_job_is_submitted_again_then_named_with_its_state_and_log(slurm_cluster, tmp_path):
    jobs = [{"key": "train-x", "folder": str(tmp_path)}, {"key": "eval-x", "after": "train-x", "folder": str(tmp_path)}]
    with pytest.raises(RuntimeError) as failed:
        cluster.run(jobs, _fails, tmp_path / "slurm", {"retries": 1, "poll_s": 0.5}, finished=_finished)
    message = str(failed.value)
    assert message.startswith("SLURM job ") and "(train-x) ended FAILED without its result after 2 submission(s)"
    assert "cannot run: the cluster's disk is full" in message.split("its log", 1)[1]
    rows = _submitted(tmp_path / "slurm")
    trainings = [r for r in rows if r["key"] == "train-x"]
    assert [r["attempt"] for r in trainings] == [1, 2]
    evaluations = [r for r in rows if r["key"] == "eval-x"]  # cancelled with each training, then waiting on the next
    assert evaluations[0]["after"] == trainings[0]["job_id"]
    first = evaluations[0]["job_id"]  # slurmctld cancels a job whose dependency failed at a scheduling pass
    assert _sacct([first], until=lambda state: state.startswith("CANCELLED"))[first].startswith("CANCELLED")


def test_an_interrupted_run_leaves_its_jobs_running_and_a_rerun_waits_for_them(slurm_cluster, tmp_path):
    """SIGINT to a run (a notebook's interrupt): it prints the ids and the scancel line; the jobs finish on their
    own; a rerun started while they run submits nothing again and returns once they are done."""
    release = tmp_path / "release"  # the jobs run until the test writes it: none can finish before the asserts
    jobs = [{"key": f"job-{i}", "folder": str(tmp_path), "hold": str(release)} for i in range(2)]
    # SIGINT raises KeyboardInterrupt in the child even where this suite runs in the background (a shell starts
    # background jobs with SIGINT ignored, and Python then installs no handler): a kernel's interrupt
    script = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"import pickle, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_ab_cluster as t\n"
              "from composer.ab import cluster\n"
              f"cluster.run(pickle.loads({cloudpickle.dumps(jobs)!r}), t._publish, {str(tmp_path / 'slurm')!r}, "
              "{'poll_s': 0.5}, finished=t._finished)")
    first = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300  # a hang guard: the poll ends once both are submitted
    while not ((tmp_path / "slurm" / "submitted.jsonl").is_file()
               and len(_submitted(tmp_path / "slurm")) == 2) and time.time() < deadline:
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=60)
    ids = [r["job_id"] for r in _submitted(tmp_path / "slurm")]
    assert "interrupted: 2 SLURM jobs keep running" in err and f"scancel {' '.join(ids)}" in err
    assert not any(_finished(j) for j in jobs)
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout.split()
    assert set(ids) <= set(queued)  # still in the queue, running or about to
    release.write_text("")
    cluster.run(jobs, _publish, tmp_path / "slurm", {"poll_s": 0.5}, finished=_finished)
    assert all(_finished(j) for j in jobs) and len(_submitted(tmp_path / "slurm")) == 2
    assert sorted((tmp_path / f"{j['key']}.done").read_text() for j in jobs) == sorted(ids)
    assert set(_sacct(ids).values()) == {"COMPLETED"}

