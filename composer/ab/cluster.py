"""004's jobs on a SLURM cluster, submitted through submitit: one sbatch job per training or evaluation, each running
the same code as a local job (under `launcher` inside its allocation where the notebook names one), an evaluation
waiting on its training through SLURM (afterok).

    from composer.ab import cluster, training
    done = training.run(plan, "runs/004", executor="slurm",
                        slurm={"partition": "gpu", "gpus_per_node": 8, "cpus_per_task": 32, "timeout_min": 2880})
    cluster.settings({"partition": "gpu"})   # every setting, defaults filled in; a ValueError names an unknown one
    cluster.unavailable()                    # None where sbatch, squeue and sacct answer here, else why not

The jobs publish into RUN_DIR/jobs/ exactly as local ones do, and the notebook reads them from there. submitit's
files (each job's pickled call and its log) are under RUN_DIR/slurm/, and every job id is noted in
RUN_DIR/slurm/submitted.jsonl the moment it is submitted.

A killed notebook leaves its jobs running, on purpose: a job may have waited hours for its nodes, and what it trains
is cached like any job's. A rerun waits for the noted jobs still queued or running instead of submitting them again,
and submits only the jobs whose folder is not finished and that are not queued. An interrupted run prints the ids
and the `scancel` line that stops them. A job that ends without its folder (failed, preempted, timed out, out of
memory, node failure) is submitted again, up to `retries` times; then the run stops, naming the job, its SLURM
state and the last lines of its log.
"""

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from composer import tether

SETTINGS = dict(
    partition="",  # sbatch --partition ("": the cluster's default)
    account="",  # sbatch --account ("": none)
    nodes=1,  # per job; a launcher that spans nodes must be configured for it (accelerate's --num_machines)
    gpus_per_node=0,  # a count, or SLURM's typed form "h200:8" (the GPU kind the plan priced: composer.costs.power)
    cpus_per_task=1,  # one task per node: the launcher starts the processes; torch's threads in a CPU job
    mem_gb=0,  # 0: the cluster's default
    timeout_min=60,  # a job's time limit; the live profile sets it from composer plan's hours
    retries=1,  # submissions again of a job that ended without its folder
    poll_s=10.0,  # seconds between two looks at the queue (one sacct call for every job)
)
# sacct states of a job that may still publish its folder
ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "RESIZING", "SUSPENDED", "READY", "UNKNOWN"}


def settings(given: dict) -> dict:
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise ValueError(f"slurm settings {unknown} are unknown; known: {sorted(SETTINGS)}")
    return {**SETTINGS, **given}


def unavailable() -> str | None:
    """None where this machine can submit jobs and read their states (sbatch, squeue and sacct answer), else why
    not, with what to do."""
    missing = [tool for tool in ("sbatch", "squeue", "sacct") if shutil.which(tool) is None]
    if missing:
        return (f"{', '.join(missing)} not found: executor 'slurm' submits from a machine with SLURM's client "
                "commands (a login node); scripts/slurm-local/start.sh starts a one-node cluster for tests")
    for command in (["squeue", "-h", "-o", "%i"], ["sacct", "-n", "-X", "-S", "now"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(command)}` did not answer in 30 s"
        if done.returncode != 0:
            return f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}"
    return None


def _executor(folder: Path, s: dict, name: str, after: str | None):
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=0)
    extra = {"kill-on-invalid-dep": "yes"} if after else {}  # a failed training cancels its evaluation
    executor.update_parameters(
        name=name, timeout_min=s["timeout_min"], nodes=s["nodes"], tasks_per_node=1, cpus_per_task=s["cpus_per_task"],
        **_gpus(s["gpus_per_node"]),
        **({"mem_gb": s["mem_gb"]} if s["mem_gb"] else {}),
        **({"slurm_partition": s["partition"]} if s["partition"] else {}),
        **({"slurm_account": s["account"]} if s["account"] else {}),
        **({"slurm_dependency": f"afterok:{after}"} if after else {}),
        # a job outlives an interrupted run on purpose (module doc): it must not carry the run's mark, which
        # tether.reaping stops every process by when the run ends (sbatch exports the submitter's environment)
        slurm_setup=[f"unset {tether.MARK}"], slurm_additional_parameters=extra)
    return executor


def _gpus(gpus) -> dict:
    """submitit's parameter for --gpus-per-node: its generic one takes only a count; a typed "h200:8" goes through
    the SLURM executor's own."""
    if not gpus:
        return {}
    return {"gpus_per_node": gpus} if isinstance(gpus, int) else {"slurm_gpus_per_node": str(gpus)}


def _noted(folder: Path) -> dict[str, str]:
    """key -> the last job id submitted for it (RUN_DIR/slurm/submitted.jsonl)."""
    path = folder / "submitted.jsonl"
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["key"]: r["job_id"] for r in rows}


def _log_tail(handle, chars: int = 2000) -> str:
    text = handle.stderr() or ""
    return text[-chars:].strip() or f"(no log at {handle.paths.stderr})"


def run(jobs: list[dict], do: Callable[[dict], object], folder, given: dict, *, finished: Callable[[dict], bool],
        bar=None) -> None:
    """Submit every job of `jobs` (dicts with their "key" and, for one that waits on another, "after": that one's
    key; waited-on jobs first) that is not finished(job), do(job) running on the cluster, and wait until all are
    finished. `bar`: a tqdm bar, advanced per finished job, its postfix the counts of jobs pending, running and
    submitted again; without one a line with those counts is printed whenever they change (a notebook's record of a
    day-long run, a line per change rather than a bar redrawn every poll)."""
    import submitit

    s = settings(given)
    why = unavailable()
    if why:
        raise RuntimeError(f"executor 'slurm': {why}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    by_key = {j["key"]: j for j in jobs}
    noted = _noted(folder)
    handles, attempts = {}, Counter()
    last = None

    def submit(job):
        after = job.get("after")
        waits_on = handles[after].job_id if after in handles and not finished(by_key[after]) else None
        handle = _executor(folder, s, job["key"], waits_on).submit(do, job)
        handles[job["key"]] = handle
        attempts[job["key"]] += 1
        with open(folder / "submitted.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": job["key"], "job_id": handle.job_id, "attempt": attempts[job["key"]],
                                "after": waits_on, "at": time.time()}) + "\n")

    try:
        waiting = [j for j in jobs if not finished(j)]
        for job in waiting:
            if job["key"] in noted:  # submitted by an earlier run: still queued or running?
                handle = submitit.SlurmJob(folder=folder, job_id=noted[job["key"]])
                if handle.watcher.get_state(handle.job_id, mode="force").split()[0] in ACTIVE:
                    handles[job["key"]] = handle
                    continue
            submit(job)
        left = {j["key"] for j in waiting}
        while left:
            time.sleep(s["poll_s"])
            next(iter(handles.values())).watcher.update()  # one sacct call for every job
            states = {}
            for key in [k for k in by_key if k in left]:  # trainings before the evaluations waiting on them
                if finished(by_key[key]):
                    left.discard(key)
                    if bar is not None:
                        bar.update()
                    continue
                state = handles[key].state.split()[0]  # "CANCELLED by 0" -> "CANCELLED"
                states[key] = state
                if state in ACTIVE:
                    continue
                after = by_key[key].get("after")
                if after in left:  # cancelled with its training (kill-on-invalid-dep): wait on the new one
                    attempts[key] -= 1
                elif attempts[key] > s["retries"]:
                    raise RuntimeError(
                        f"SLURM job {handles[key].job_id} ({key}) ended {state} without its result after "
                        f"{attempts[key]} submission(s); its log ({handles[key].paths.stderr}) ends:\n"
                        f"{_log_tail(handles[key])}")
                print(f"SLURM job {handles[key].job_id} ({key}) ended {state} without its result; submitting it "
                      "again", file=sys.stderr)
                submit(by_key[key])
            counts = Counter("running" if v == "RUNNING" else "pending" for v in states.values())
            status = dict(pending=counts["pending"], running=counts["running"], done=len(waiting) - len(left),
                          submitted_again=sum(a - 1 for a in attempts.values()))
            if bar is not None:
                bar.set_postfix(status)
            elif status != last:
                print(time.strftime("%H:%M:%S"), "SLURM jobs:", ", ".join(f"{v} {k.replace('_', ' ')}"
                                                                         for k, v in status.items()))
            last = status
    except KeyboardInterrupt:
        ids = [handles[k].job_id for k in by_key if k in handles and not finished(by_key[k])]
        if ids:
            print(f"interrupted: {len(ids)} SLURM jobs keep running and publish into the job folders; a rerun waits "
                  f"for them (noted in {folder / 'submitted.jsonl'}). To stop them: scancel {' '.join(ids)}",
                  file=sys.stderr)
        raise
