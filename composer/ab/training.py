"""Spike 004's runs: every arm trained from the same checkpoint, every checkpoint evaluated on held-out tasks,
each job cached under the hash of what determines its result.

    from composer.ab import training
    plan = training.Plan(student=path, train=train_tasks, test=test_tasks, seeds=3,
                     arms={"A": {}, "B": {"trace_replay_weight": 0.5, "pairs": "pairs"}},
                     pairs={"pairs": "runs/004/inputs/pairs"}, grpo=dict(steps=2, prompts_per_step=2, generations=4),
                     evaluation=dict(k=1, temperature=0.0, max_new_tokens=256))
    done = training.run(plan, "runs/004", workers=2)     # progress bar; finished jobs are read back, not rerun
    done["baseline"]["outcomes"]                     # tasks x samples of 0/1, the initial checkpoint
    done["B", 0]["eval"]["outcomes"], done["B", 0]["train"]["log"]
    # nested doses: each training also saves its model after optimizer step 1 (of 2), evaluated like the last
    done = training.run(dataclasses.replace(plan, checkpoints=(1,)), "runs/004")
    training.at_step(done, 1)["B", 0]["eval"]            # the results as the runs stood after step 1
    # from the notebook's parameters; composer.ab.preparation does the work (pairs with reference log-probs, screening)
    plan = training.plan_from_parameters(parameters, preparation.prepare(parameters, "runs/004"))

An arm is a ComposerTrainer configuration: channel fields of ComposerConfig (trace_replay_weight,
hint_distill_weight, hint_source, ...) plus `pairs`, the name of the DPO pairs dataset it trains on, and `start`:
"student", or "planted" (the plan's `planted` checkpoint, composer.ab.planting: a positive control's planted
difference; it is evaluated once, as the baseline is). Within a seed every arm starts from the same checkpoint (but a
planted one), sees the same tasks in the same order (the seed shuffles the train
split, TRL's sampler uses the seed) and the same generation seeds, with the same GRPO budget (steps, prompts,
generations): the pairs are extra signal, not extra rollouts. Every checkpoint, and the initial one (the
baseline), is evaluated on the same test tasks with the same k sampling seeds per task.

Jobs: ("train", arm, seed) -> the trained model and its training log; ("eval", arm, seed) -> per-task, per-sample
outcomes; ("eval", "baseline"), and ("eval", "planted") where the plan has one; with `checkpoints`, ("eval", arm,
seed, step) -> the outcomes of the model the training saved after that optimizer step. Nested doses: a dose-response
over training length for the price of evaluations, each dose a checkpoint of one run (its learning-rate schedule and
data order the whole run's, so the checkpoint after step 2 of 6 is not what a 2-step run would give). A job's folder
under run_dir/jobs/ is named by the hash of its configuration (for an evaluation, the hash of the model's training
job): a rerun with the same parameters reuses finished jobs, a changed parameter makes new ones. A folder is
published by an atomic rename when its job has finished, so a killed run resumes at the job (arm, seed) it was in,
started afresh: a resumed run trains exactly as an uninterrupted one.

With workers > 0 each job runs in a fresh spawned process (torch threads split between the workers): two jobs at
once on two cores, and each job's peak RSS is its own (interpreter and imports included). With workers = 0 jobs run
in this process, in order, and no peak memory is recorded. With `launch` (a launcher's command line, e.g.
["accelerate", "launch", "--config_file", "params/live/accelerate-fsdp2.yaml"]) each training runs on all the
launcher's processes, the step's rollouts shared out among them (the same GRPO budget), rank 0 writing the job's
folder, and each evaluation shares its test tasks out among them (each task with the seeds it has in one process,
so the outcomes are the one-process ones).
"""

import dataclasses
import fcntl
import functools
import itertools
import json
import multiprocessing
import os
import random
import resource
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from trl import GRPOConfig

from composer import tether
from composer.ab import preparation
from composer.ab.parameters import STARTS, ABParameters
from composer.env.environment import EnvConfig
from composer.files import config_hash, publish
from composer.policies import ENGINES
from composer.progress import bar
from composer.trainer import ComposerConfig, check_channels

BASELINE = "baseline"
PLANTED = STARTS[1]  # "planted": an arm's start (ABParameters.arms), and the results' key of that checkpoint's eval
CHANNEL_FIELDS = {f.name for f in dataclasses.fields(ComposerConfig)} - {f.name for f in dataclasses.fields(GRPOConfig)}
CHANNEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ComposerConfig) if f.name in CHANNEL_FIELDS}
GRPO_DEFAULTS = dict(steps=1, prompts_per_step=1, generations=2, max_completion_length=1024,
                     max_tool_calling_iterations=12, temperature=1.0, learning_rate=1e-5)
EVAL_DEFAULTS = dict(k=1, temperature=0.0, max_new_tokens=160, seed=0)
EXECUTORS = ("local", "slurm")
# and "engine" (policies.ENGINES), named only for vLLM: a transformers evaluation keeps the key it had before
EVAL_SETTINGS = {*EVAL_DEFAULTS, "engine"}


@dataclass
class Plan:
    """What an A/B trains and evaluates (see the module docstring). `pairs`: {name: path of a pairs dataset saved
    by composer.disagreement.pairs.save, with reference log-probs under `student`}; `grpo`: collect.build_trainer settings
    (GRPO_DEFAULTS keys, plus any GRPOConfig field); `evaluation`: EVAL_DEFAULTS keys."""

    student: str
    train: list[dict]
    test: list[dict]
    arms: dict[str, dict]
    seeds: int = 1
    pairs: dict[str, str] = field(default_factory=dict)
    grpo: dict = field(default_factory=dict)
    evaluation: dict = field(default_factory=dict)
    env: EnvConfig = field(default_factory=EnvConfig)
    checkpoints: tuple[int, ...] = ()  # optimizer steps before the last at which each training saves its model too
    planted: str = ""  # the checkpoint an arm with "start": "planted" trains from (composer.ab.planting; "": none)

    def __post_init__(self):
        self.student = str(self.student)
        self.grpo = {**GRPO_DEFAULTS, **self.grpo}
        self.checkpoints = tuple(self.checkpoints)
        steps = self.grpo["steps"]
        if any(not isinstance(c, int) or isinstance(c, bool) for c in self.checkpoints) or \
                list(self.checkpoints) != sorted(set(self.checkpoints)) or \
                any(not 1 <= c < steps for c in self.checkpoints):
            raise ValueError(f"checkpoints {list(self.checkpoints)}: optimizer steps in increasing order, each from 1 "
                             f"to {steps - 1} (the training's last step, {steps}, is always evaluated)")
        unknown = set(self.evaluation) - EVAL_SETTINGS
        if unknown:
            raise ValueError(f"evaluation: unknown settings {sorted(unknown)}; known: {sorted(EVAL_SETTINGS)}")
        if self.evaluation.get("engine", "transformers") not in ENGINES:
            raise ValueError(f"evaluation: engine must be one of {ENGINES}, got {self.evaluation['engine']!r}")
        self.evaluation = {**EVAL_DEFAULTS, **self.evaluation}
        if not self.arms or {BASELINE, PLANTED} & set(self.arms):
            raise ValueError(f"arms must name at least one arm, none called {BASELINE!r} or {PLANTED!r}; got "
                             f"{list(self.arms)}")
        for name, arm in self.arms.items():
            bad = set(arm) - CHANNEL_FIELDS - {"pairs", "start"}
            if bad:
                raise ValueError(f"arm {name!r}: {sorted(bad)} are not ComposerConfig channel fields "
                                 f"({sorted(CHANNEL_FIELDS)}), 'pairs' or 'start'")
            if arm.get("start", "student") not in STARTS or (arm.get("start") == PLANTED
                                                                          and not self.planted):
                raise ValueError(f"arm {name!r}: start {arm['start']!r} needs to be 'student', or 'planted' with the "
                                 "plan's planted checkpoint (composer.ab.planting)")
            check_channels(SimpleNamespace(**{**CHANNEL_DEFAULTS, **arm}))  # the message names the bad field
            if arm.get("trace_replay_weight", 0) > 0 and arm.get("pairs") not in self.pairs:
                raise ValueError(f"arm {name!r} has trace_replay_weight > 0 and needs 'pairs', one of "
                                 f"{sorted(self.pairs)}; got {arm.get('pairs')!r}")
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        iterations = self.grpo.get("num_iterations", 1)
        if self.grpo["steps"] % iterations:
            raise ValueError(f"steps ({self.grpo['steps']}) must be a multiple of num_iterations ({iterations}): "
                             "each generation is trained on num_iterations optimizer steps")
        per_seed = preparation.tasks_per_seed(self.grpo)
        if per_seed > len(self.train):
            raise ValueError(f"steps / num_iterations x prompts_per_step = {per_seed} tasks per seed, but the train "
                             f"split has {len(self.train)}")
        if not self.test:
            raise ValueError("no test tasks to evaluate on")
        overlap = {r["instance_id"] for r in self.train} & {r["instance_id"] for r in self.test}
        if overlap:
            raise ValueError(f"{len(overlap)} test tasks are also train tasks (e.g. {sorted(overlap)[0]})")


def plan_from_parameters(p: ABParameters, inputs: preparation.Inputs, arms: dict | None = None) -> Plan:
    """The parameters and the inputs preparation.prepare made from them -> the Plan (of `arms`, a subset of p.arms,
    where given). Loads no model and reads no file: the student, the splits, the environment, the turn budget and the
    pairs datasets are the inputs'; the arms, seeds, GRPO budget and evaluation settings are the parameters'."""
    return Plan(
        student=inputs.student, train=inputs.train, test=inputs.test, arms=p.arms if arms is None else arms,
        seeds=p.seeds,
        pairs={name: info["path"] for name, info in inputs.pairs.items()},
        grpo=dict(steps=p.steps, prompts_per_step=p.prompts_per_step, generations=p.generations,
                  max_completion_length=p.max_completion_length,
                  max_tool_calling_iterations=p.max_tool_calling_iterations, temperature=p.temperature,
                  learning_rate=p.learning_rate, **p.trainer_config),
        evaluation=dict(k=p.eval_k, temperature=p.eval_temperature, max_new_tokens=inputs.max_new_tokens,
                        **preparation.evaluation_engine(p), seed=p.seed),
        env=inputs.env, checkpoints=tuple(p.checkpoints), planted=inputs.planted["path"] if inputs.planted else "")


def model_folder(step: int | None) -> str:
    """Where a training job keeps the model it saved after `step` (None: its last)."""
    return "model" if step is None else f"model-step{step}"


def seed_tasks(plan: Plan, seed: int) -> list[dict]:
    """The train tasks of one seed, in order: the same for every arm of that seed."""
    tasks = list(plan.train)
    random.Random(seed).shuffle(tasks)
    return tasks[:preparation.tasks_per_seed(plan.grpo)]


def _file_key(path) -> str:
    """A pairs dataset's identity: its JSONL twin (what pairs.save writes next to the folder)."""
    jsonl = Path(path).with_suffix(".jsonl")
    if not jsonl.is_file():
        raise FileNotFoundError(f"{jsonl}: a pairs dataset saved by composer.disagreement.pairs.save has this "
                                "JSONL twin")
    return config_hash(text=jsonl.read_text(encoding="utf-8"))


def jobs(plan: Plan) -> list[dict]:
    """Every job of the plan, trainings before their evaluations, each with its `key` (the folder name)."""
    from composer.zoo import versions

    student = Path(plan.student)
    base = dict(student=student.name if student.is_dir() else plan.student, env=dataclasses.asdict(plan.env),
                **versions())
    evaluation = dict(test=preparation.records_key(plan.test), **plan.evaluation)
    out = [{"kind": "eval", "arm": BASELINE, "seed": None, "model": plan.student,
            "key": f"eval-{BASELINE}-" + config_hash(model=base, **evaluation)}]
    # the planted checkpoint by its folder's name (its hash: student, tasks, steps, learning rate), evaluated as the
    # baseline is: what it starts with, before any GRPO step
    planted = Path(plan.planted).parent.name if plan.planted else None
    if planted:
        out.append({"kind": "eval", "arm": PLANTED, "seed": None, "model": plan.planted,
                    "key": f"eval-{PLANTED}-" + config_hash(model=base, planted=planted, **evaluation)})
    pair_keys = {}
    for seed, (name, arm) in itertools.product(range(plan.seeds), plan.arms.items()):
        pairs = arm.get("pairs") if arm.get("trace_replay_weight", 0) > 0 else None
        if pairs is not None and pairs not in pair_keys:
            pair_keys[pairs] = _file_key(plan.pairs[pairs])
        channels = {k: v for k, v in arm.items() if k not in ("pairs", "start")}
        # a planted start is in the key; a student's start leaves the keys runs before planting had
        start = {"start": planted} if arm.get("start") == PLANTED else {}
        # where the training logs (report_to) does not change what it trains: not in the key
        grpo = {k: v for k, v in plan.grpo.items() if k != "report_to"}
        # the checkpoints it saves are what its folder holds (without any, the keys runs before them had)
        saved = {"checkpoints": list(plan.checkpoints)} if plan.checkpoints else {}
        train_key = f"train-{name}-s{seed}-" + config_hash(
            **base, seed=seed, tasks=preparation.records_key(seed_tasks(plan, seed)), grpo=grpo, channels=channels,
            pairs=pair_keys.get(pairs), **saved, **start)
        out.append({"kind": "train", "arm": name, "seed": seed, "channels": channels,
                    "pairs": plan.pairs[pairs] if pairs else None, "key": train_key,
                    "model": plan.planted if start else plan.student})
        for step in plan.checkpoints:
            out.append({"kind": "eval", "arm": name, "seed": seed, "after": train_key, "step": step,
                        "key": f"eval-{name}-s{seed}-step{step}-" + config_hash(model=train_key, step=step,
                                                                                 **evaluation)})
        out.append({"kind": "eval", "arm": name, "seed": seed, "after": train_key,
                    "key": f"eval-{name}-s{seed}-" + config_hash(model=train_key, **evaluation)})
    return out


# ---------------------------------------------------------------------------------------------
# The two kinds of job (run in a worker process, or in this one)


def _train(plan: Plan, job: dict, out: Path) -> dict:
    """Train one arm and seed into `out`; on every process of a distributed launch alike (rank 0 writes)."""
    from transformers import TrainerCallback

    from composer.collection import collect
    from composer.disagreement import pairs

    class SaveAt(TrainerCallback):
        """The model after each of plan.checkpoints' optimizer steps, in its own folder (model_folder)."""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in plan.checkpoints:  # every rank takes part, as in the last save below
                trainer.save_model(str(out / model_folder(state.global_step)))

    dataset = pairs.load(job["pairs"]) if job["pairs"] else None
    # under a launcher the step's rollouts are shared out over its processes (collect.split_rollouts)
    trainer = collect.build_trainer(
        job["model"], seed_tasks(plan, job["seed"]), out, env_config=plan.env, seed=job["seed"], checkpoint=False,
        recording_env=False, channels=job["channels"], pairs_dataset=dataset, **plan.grpo)
    if plan.checkpoints:
        trainer.add_callback(SaveAt())
    wall = collect.train_timed(trainer)
    trainer.save_model(str(out / "model"))  # every rank takes part; the main process writes
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        shutil.rmtree(out / "trainer", ignore_errors=True)  # TRL's run folder: logs we keep below
    return {"wall_s": round(wall, 2), "log": trainer.state.log_history, "model": "model",
            "processes": trainer.accelerator.num_processes}


def _launched(plan: Plan, job: dict, out: Path, launch: list[str], model: Path | None = None) -> dict:
    """A job under a launcher (`accelerate launch --config_file params/live/accelerate-fsdp2.yaml`, `torchrun
    --nproc-per-node N`): every rank runs `python -m composer.ab.training FOLDER`, a training on all of them, an
    evaluation of `model` with each rank on its share of the test tasks; rank 0 writes the model (a training's) and the result
    into `out`, which this process then publishes like any job's."""
    spec = out / "launch.json"
    spec.write_text(json.dumps({"plan": dataclasses.asdict(plan), "job": job, "model": model}, default=str),
                    encoding="utf-8")
    done = subprocess.run([*launch, "-m", "composer.ab.training", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(launch)} exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
    result = json.loads((out / "launched.json").read_text(encoding="utf-8"))
    spec.unlink()
    (out / "launched.json").unlink()
    return result


def _launched_main(folder: str) -> None:
    from accelerate import PartialState

    spec = json.loads((Path(folder) / "launch.json").read_text(encoding="utf-8"))
    plan = Plan(**{**spec["plan"], "env": EnvConfig(**spec["plan"]["env"])})
    if spec["job"]["kind"] == "train":
        result = _train(plan, spec["job"], Path(folder))
        main = PartialState().is_main_process
    else:
        result, main = _evaluate_launched(plan, spec["job"], Path(spec["model"]))
    if main:
        (Path(folder) / "launched.json").write_text(json.dumps(result, default=str), encoding="utf-8")


def _evaluate_launched(plan: Plan, job: dict, model: Path) -> tuple[dict, bool]:
    """One rank of a launched evaluation: its share of the test tasks, on its own GPU (if any); every rank gets
    the merged result, and whether it is rank 0. The launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK) names the
    share; the process group is torch's own (accelerate's PartialState does not form one on CPU)."""
    import torch
    import torch.distributed as dist

    rank, world, local = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        shard = _evaluate(plan, job, model, shard=(rank, world), device=f"cuda:{local}" if cuda else None)
        shards = [None] * world
        dist.all_gather_object(shards, shard)
    finally:
        dist.destroy_process_group()
    return merge_evaluations(plan, shards), rank == 0


def _evaluate(plan: Plan, job: dict, model: Path, shard: tuple[int, int] = (0, 1), device=None) -> dict:
    """The evaluation of `model` on plan.test (on shard=(rank, world), that rank's share of the tasks)."""
    from composer import policies

    settings = plan.evaluation
    start = time.perf_counter()
    _, runs = policies.evaluate(model, plan.test, k=1, n=settings["k"], temperature=settings["temperature"],
                                seed=settings["seed"], env_config=plan.env,
                                max_new_tokens=settings["max_new_tokens"], return_rollouts=True, shard=shard,
                                device=device, engine=settings.get("engine", "transformers"))
    wall = time.perf_counter() - start
    k = settings["k"]
    task_ids = [r["instance_id"] for r in plan.test][shard[0]::shard[1]]
    return {"wall_s": round(wall, 2), "task_ids": task_ids,
            "outcomes": [[int(runs[i * k + j][2] == 1.0) for j in range(k)] for i in range(len(task_ids))],
            "steps": sum(r[3]["steps"] for r in runs), "malformed": sum(r[3]["malformed"] for r in runs),
            "submitted": sum(r[3]["submitted"] for r in runs)}


def merge_evaluations(plan: Plan, shards: list[dict]) -> dict:
    """One evaluation from its launch's shards: outcomes in plan.test's order, counts summed, the slowest shard's
    wall time."""
    by_task = {t: o for shard in shards for t, o in zip(shard["task_ids"], shard["outcomes"], strict=True)}
    task_ids = [r["instance_id"] for r in plan.test]
    missing = [t for t in task_ids if t not in by_task]
    if missing:
        raise RuntimeError(f"the launch's evaluation shards lack {len(missing)} test tasks, e.g. {missing[0]}")
    return {"wall_s": max(s["wall_s"] for s in shards), "task_ids": task_ids,
            "outcomes": [by_task[t] for t in task_ids], "processes": len(shards),
            **{key: sum(s[key] for s in shards) for key in ("steps", "malformed", "submitted")}}


def _worker_init(parent: int, filters: list) -> None:
    """A spawned job worker: tied to its parent (else a job trains on for minutes after a killed run,
    composer.tether), and with its parent's warning filters (a notebook's report.quiet() would not reach it, and
    each worker would print library deprecation notices into the report)."""
    tether.die_with(parent)
    warnings.filters[:] = filters


def _run_job(plan: Plan, job: dict, jobs_dir: Path, fresh_process: bool, threads: int | None,
             launch: list[str] | None = None) -> dict:
    """Do one job into its folder (published when done) and return its result; a training under `launch`."""
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    if threads:
        torch.set_num_threads(threads)

    def build(tmp: Path):
        if job["kind"] == "train":
            result = _launched(plan, job, tmp, launch) if launch else _train(plan, job, tmp)
        else:
            model = Path(job["model"] if "model" in job else jobs_dir / job["after"] / model_folder(job.get("step")))
            result = _launched(plan, job, tmp, launch, model) if launch else _evaluate(plan, job, model)
        if fresh_process:
            result["peak_rss_bytes"] = peak_rss_bytes()
        (tmp / "result.json").write_text(json.dumps(
            {**result, "job": {k: v for k, v in job.items() if k != "key"}}, default=str), encoding="utf-8")

    return read(publish(jobs_dir / job["key"], build))


def peak_rss_bytes() -> int:
    """This process's own peak RSS: VmHWM, the high-water mark of its address space. Not getrusage's ru_maxrss,
    which a spawned child inherits from its parent across fork and exec (every job would report the parent's)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def read(folder: Path) -> dict:
    return json.loads((Path(folder) / "result.json").read_text(encoding="utf-8"))


def _cluster_job(plan: Plan, jobs_dir: Path, threads: int, launch: list[str] | None, job: dict) -> None:
    """One job on a SLURM node (composer.ab.cluster): a local job's code, its result left in its folder."""
    _run_job(plan, job, jobs_dir, True, threads, launch)


def _stale(tmp: Path) -> bool:
    """A job's temp folder that no live job is building: files.publish holds the job's lock while it builds (a job
    on a cluster node included), so a lock this process can take belongs to nobody."""
    name = tmp.name[1:].rsplit(".", 2)[0]  # .KEY.RANDOM.tmp
    with open(tmp.parent / f".{name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(lock, fcntl.LOCK_UN)
        return True


def run(plan: Plan, run_dir, *, workers: int = 0, progress: bool = True, train_only: bool = False,
        launch: list[str] | None = None, executor: str = "local", slurm: dict | None = None) -> dict:
    """Do every job of the plan not finished yet (see the module docstring) and return every result:
    {"baseline": eval result, (arm, seed): {"train": ..., "eval": ..., "keys": (train key, eval key)}}, with
    plan.checkpoints also "checkpoints": {step: eval result} in each cell (at_step reads them)
    (train_only: the trainings alone, e.g. for the benchmark). launch: a launcher's command line that each
    training runs under (accelerate launch ..., torchrun ...; see _launched). A failing job stops the run with its
    name once the jobs already running have finished (their results are kept). executor "slurm": every job is
    submitted to SLURM instead (composer.ab.cluster; `slurm`: its settings) and `workers` does not apply."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    jobs_dir = Path(run_dir) / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    for tmp in jobs_dir.glob(".*.tmp"):  # a killed run's unfinished job
        if _stale(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    todo = [j for j in jobs(plan) if j["kind"] == "train" or not train_only]
    done = {j["key"]: read(jobs_dir / j["key"]) for j in todo if (jobs_dir / j["key"] / "result.json").is_file()}
    pending = [j for j in todo if j["key"] not in done]
    meter = bar(total=len(todo), initial=len(done), desc="004 jobs", unit="job", disable=not progress)
    threads = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
                  // max(workers, 1)) if workers else None

    def ready(job):
        return job.get("after") is None or job["after"] in done

    try:
        if executor == "slurm":
            from composer.ab import cluster

            s = cluster.settings(slurm or {})
            cluster.run(pending, functools.partial(_cluster_job, plan, jobs_dir, s["cpus_per_task"], launch),
                        Path(run_dir) / "slurm", s, bar=meter if progress else None,
                        finished=lambda job: (jobs_dir / job["key"] / "result.json").is_file())
            done.update({job["key"]: read(jobs_dir / job["key"]) for job in pending})
        elif workers == 0:
            for job in pending:
                meter.set_postfix_str(job["key"].rsplit("-", 1)[0])
                try:
                    done[job["key"]] = _run_job(plan, job, jobs_dir, False, None, launch)
                except Exception as e:
                    raise RuntimeError(f"004 job {job['key']} failed: {e!r}") from e
                meter.update()
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(workers, mp_context=context, max_tasks_per_child=1, initializer=_worker_init,
                                     initargs=(os.getpid(), list(warnings.filters))) as pool:
                running, failure = {}, None
                while pending or running:
                    for job in [j for j in pending if ready(j) and failure is None][:workers - len(running)]:
                        pending.remove(job)
                        running[pool.submit(_run_job, plan, job, jobs_dir, True, threads, launch)] = job
                    if not running:
                        break
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        job = running.pop(future)
                        try:
                            done[job["key"]] = future.result()
                            meter.update()
                        except Exception as e:  # noqa: BLE001 - re-raised below with the job's name
                            failure = failure or (job, e)
                if failure:
                    raise RuntimeError(f"004 job {failure[0]['key']} failed: {failure[1]!r}") from failure[1]
    finally:
        meter.close()
    results = {}
    for job in todo:
        if job["arm"] in (BASELINE, PLANTED):
            results[job["arm"]] = done[job["key"]]
            continue
        cell = results.setdefault((job["arm"], job["seed"]), {"keys": ()})
        if job.get("step") is not None:
            cell.setdefault("checkpoints", {})[job["step"]] = done[job["key"]]
        else:
            cell[job["kind"]] = done[job["key"]]
            cell["keys"] += (job["key"],)
    return results


def at_step(results: dict, step: int | None) -> dict:
    """run's results as the trainings stood after optimizer `step` (one of the plan's checkpoints; None: the last):
    each cell's "eval" is that checkpoint's evaluation, its "train" the whole run's."""
    if step is None:
        return results
    return {key: cell if key in (BASELINE, PLANTED) else {**cell, "eval": cell["checkpoints"][step]}
            for key, cell in results.items()}


def outcomes(results: dict, arm: str, seeds: int):
    """seeds x tasks x samples of 0/1 for analysis.compare (the baseline and the planted checkpoint: the same outcomes
    for every seed)."""
    import numpy as np

    if arm in (BASELINE, PLANTED):
        return np.array([results[arm]["outcomes"]] * seeds)
    return np.array([results[arm, s]["eval"]["outcomes"] for s in range(seeds)])


def train_curve(results: dict, arm: str, seeds: int, metric: str = "reward") -> list[list[float]]:
    """One list per seed: `metric` at every logged training step (nan where a step did not log it)."""
    return [[h.get(metric, float("nan")) for h in results[arm, s]["train"]["log"] if "step" in h and "loss" in h]
            for s in range(seeds)]


if __name__ == "__main__":  # one rank of a launched job (_launched)
    _launched_main(sys.argv[1])
