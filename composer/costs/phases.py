"""Measured phase times: per optimizer step, the seconds a GRPO run spends generating, in each tool, grading and
training, and the tokens it prefilled and decoded; logged through the trainer and written as JSONL.

    from composer.costs import phases
    phases.attach(trainer, "runs/x/phases.jsonl")   # collect.build_trainer does it for 002a, 004 and the benches
    trainer.train()
    records = phases.read("runs/x")                 # one dict per optimizer step (FILE in a run folder)
    unit = phases.per_unit(records)                 # seconds per turn, per tool call, per submission, per token
    phases.scaled(unit, model, setup, steps=100, rollouts_per_step=112, tokens_per_rollout=19_500, turns=18)

`python -m composer plan --from-run DIR` prices the live 004 from a run's file (composer.costs.plan).

One JSON object per line, written when the step ends (a crash loses at most the step it was in; a resumed run
appends, and `read` keeps the last record of a step):

  schema          SCHEMA (1)
  step            the trainer's global_step after the step (1, 2, ...)
  process, processes   this training process and how many there are (process k > 0 writes phases-p<k>.jsonl)
  device, model   where it ran (torch's device: "cpu", "cuda:0") and the student (its path or name)
  gpu             the GPU's name ("NVIDIA H100 80GB HBM3"), "" on a CPU; absent in older files (an unknown GPU)
  step_s          wall-clock from the step's start to its end (TrainerCallback on_step_begin to on_step_end:
                  checkpoints and logging after it are not in it) = generate_s + tools_s + reset_s + train_s
  generate_s      inside TRL's _generate (a generation batch: every turn's sampling, prompt rendering, parsing, the
                  tool loop's bookkeeping) less the environment's wall-clock in it; 0 on a step that trains on earlier
                  rollouts (num_iterations > 1)
  tools_s         wall-clock during which at least one tool call ran (concurrent calls count once; submit included)
  reset_s         wall-clock of environment resets (an episode's start: a container's, for real tasks)
  train_s         the rest: rewards, the old and reference log-probs, forward and backward, the optimizer step
                  (and, in a 002a collection, the trace recorder's writing: Collection.recorder_s)
  tools           {tool name: {"calls": n, "s": seconds summed over its calls}} (concurrent calls each count fully)
  grade_s, submissions   tools["submit"]: grading runs inside the submit tool
  resets          environment resets
  episodes, turns the rollouts generated in the step and their assistant turns
  prompt_tokens   the rollouts' prompt tokens
  completion_tokens   tokens the policy generated (TRL's tool_mask = 1): DECODED
  tool_tokens     tool results inserted into the completions (tool_mask = 0)
  trained_tokens  the unpadded tokens of the step's micro-batches (prompt_mask + completion_mask), over every
                  micro-batch and iteration; the trace-replay channel's pairs are not counted
Tokens PREFILLED are not measured: prompt_tokens + tool_tokens is the offline proxy (what entered each context
without being generated, each once); a backend that re-encodes earlier turns (TRL's transformers generate)
prefills more, one that keeps each rollout's cache (composer.turn_cache, vLLM's prefix cache) about that.

The trainer's log gets the same per step (TRL's `_metrics`, so report_to's TensorBoard and the log history carry
them): phases/step_s, phases/generate_s, phases/tools_s, phases/reset_s, phases/train_s, phases/grade_s,
phases/tool/<name>_s, phases/turns and phases/<kind>_tokens, this process's (rank 0's in the log).

The tool timing wraps the environment's public methods (what TRL calls as tools) on each instance TRL makes, so it
does not depend on who calls them or in what order: sums and the wall-clock are kept under a lock, so tool calls
made concurrently from threads are timed like serial ones.
"""

import functools
import inspect
import json
import math
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import TrainerCallback

from composer.costs import compute

SCHEMA = 1
FILE = "phases.jsonl"
GRADE_TOOL = "submit"
PHASES = ("generate_s", "tools_s", "reset_s", "train_s")


class Clock:
    """Seconds of calls by name, summed over calls, and `wall`: the wall-clock during which at least one ran."""

    def __init__(self, now=time.perf_counter):
        self._now = now
        self._lock = threading.Lock()
        self._running = 0
        self._since = 0.0
        self.clear()

    def clear(self):
        with self._lock:
            self.wall = 0.0
            self.calls: dict[str, int] = defaultdict(int)
            self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def timing(self, name: str):
        start = self._now()
        with self._lock:
            if self._running == 0:
                self._since = start
            self._running += 1
        try:
            yield
        finally:
            end = self._now()
            with self._lock:
                self.calls[name] += 1
                self.seconds[name] += end - start
                self._running -= 1
                if self._running == 0:
                    self.wall += end - self._since

    def timed(self, method, name: str):
        """`method` (sync or async) timed under `name`, keeping its name, docstring and signature (TRL builds the
        tool's schema from them)."""
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def timed(*args, **kwargs):
                with self.timing(name):
                    return await method(*args, **kwargs)
        else:
            @functools.wraps(method)
            def timed(*args, **kwargs):
                with self.timing(name):
                    return method(*args, **kwargs)
        return timed


class PhaseTimer(TrainerCallback):
    """The per-step record (module doc) of one trainer: attach() makes it and hooks it in."""

    def __init__(self, trainer, path):
        self.trainer = trainer
        self.path = Path(path)
        self.tools, self.resets = Clock(), Clock()
        self._begin()

    def _begin(self):
        self.tools.clear()
        self.resets.clear()
        self._start = time.perf_counter()
        self._generating = 0.0  # seconds inside _generate
        self._env_in_generate = 0.0  # of which the environment's wall-clock
        self.counts = defaultdict(int)

    # --- the hooks ---

    def environment(self, env):
        """Time `env`'s reset and tools on this instance: TRL's tools are the public methods of its class but reset
        and get_reward, which it looks up on the instance (getattr) for every batch."""
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction):
            if name == "reset":
                setattr(env, name, self.resets.timed(env.reset, name))
            elif not name.startswith("_") and name != "get_reward":
                setattr(env, name, self.tools.timed(getattr(env, name), name))
        return env

    def generate(self, generate):
        @functools.wraps(generate)
        def timed(prompts):
            env_before = self.tools.wall + self.resets.wall
            start = time.perf_counter()
            out = generate(prompts)
            self._generating += time.perf_counter() - start
            self._env_in_generate += self.tools.wall + self.resets.wall - env_before
            prompt_ids, completion_ids, tool_mask, completions = out[:4]
            generated = [sum(m) for m in tool_mask] if tool_mask is not None else [len(c) for c in completion_ids]
            self.counts["episodes"] += len(prompt_ids)
            self.counts["turns"] += sum(1 for c in completions if isinstance(c, list)
                                        for m in c if m.get("role") == "assistant")
            self.counts["prompt_tokens"] += sum(len(p) for p in prompt_ids)
            self.counts["completion_tokens"] += sum(generated)
            self.counts["tool_tokens"] += sum(len(c) for c in completion_ids) - sum(generated)
            return out

        return timed

    def prepare_inputs(self, prepare):
        @functools.wraps(prepare)
        def counted(batch):
            inputs = prepare(batch)
            if self.trainer.model.training:
                self.counts["trained_tokens"] += int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
            return inputs

        return counted

    # --- the callback ---

    def on_step_begin(self, args, state, control, **kwargs):
        self._begin()

    def on_step_end(self, args, state, control, **kwargs):
        record = self.record(state.global_step)
        with open(self._file(), "a", encoding="utf-8") as f:  # one line, closed: a crash keeps the steps before
            f.write(json.dumps(record) + "\n")
        metrics = self.trainer._metrics["train"]
        for key in ("step_s", *PHASES, "grade_s", "turns", "prompt_tokens", "completion_tokens", "tool_tokens",
                    "trained_tokens"):
            metrics[f"phases/{key}"].append(float(record[key]))
        for name, t in record["tools"].items():
            metrics[f"phases/tool/{name}_s"].append(t["s"])

    def _file(self) -> Path:
        k = self.trainer.accelerator.process_index
        return self.path if k == 0 else self.path.with_name(f"{self.path.stem}-p{k}{self.path.suffix}")

    def record(self, step: int) -> dict:
        step_s = time.perf_counter() - self._start
        tools = {name: {"calls": self.tools.calls[name], "s": self.tools.seconds[name]} for name in self.tools.calls}
        env_outside = self.tools.wall + self.resets.wall - self._env_in_generate
        accelerator = self.trainer.accelerator
        return {"schema": SCHEMA, "step": step, "process": accelerator.process_index,
                "processes": accelerator.num_processes, "device": str(accelerator.device),
                "gpu": torch.cuda.get_device_name(accelerator.device) if accelerator.device.type == "cuda" else "",
                "model": str(getattr(self.trainer.model.config, "_name_or_path", "")), "step_s": step_s,
                "generate_s": self._generating - self._env_in_generate, "tools_s": self.tools.wall,
                "reset_s": self.resets.wall, "train_s": step_s - self._generating - env_outside, "tools": tools,
                "grade_s": tools.get(GRADE_TOOL, {}).get("s", 0.0),
                "submissions": tools.get(GRADE_TOOL, {}).get("calls", 0), "resets": sum(self.resets.calls.values()),
                **{k: self.counts[k] for k in ("episodes", "turns", "prompt_tokens", "completion_tokens",
                                               "tool_tokens", "trained_tokens")}}


def attach(trainer, path) -> PhaseTimer:
    """Time `trainer`'s steps into `path` (and its log): wraps its environments (those TRL made and its factories),
    its _generate and _prepare_inputs on the instance, and adds the callback. What replaces _generate_single_turn
    (a scripted sampler) runs inside the timed _generate; what wraps _generate or _generate_and_score_completions
    (TraceRecorder) chains with it, before or after."""
    timer = PhaseTimer(trainer, path)
    factories = getattr(trainer, "environment_factories", None) or {}
    for name, factory in factories.items():
        factories[name] = lambda factory=factory: timer.environment(factory())
    for pool in getattr(trainer, "_environment_pool", {}).values():
        for env in pool:
            timer.environment(env)
    trainer._generate = timer.generate(trainer._generate)
    trainer._prepare_inputs = timer.prepare_inputs(trainer._prepare_inputs)
    trainer.add_callback(timer)
    return timer


# ---------------------------------------------------------------------------------------------
# Reading a run's file, and what it says per unit of work


class PhaseFileError(ValueError):
    """A run folder or phase file that cannot be read: the message names the file and the fix."""


def read(path) -> list[dict]:
    """The records of a phase file (or of FILE in a run folder), one per step (a resumed run's repeat of a step:
    its last), in step order."""
    path = Path(path)
    if not path.exists():
        raise PhaseFileError(f"{path}: no such file or folder; give the folder of a training or collection run "
                             f"(collect.build_trainer writes {FILE} there) or the file itself")
    file = path / FILE if path.is_dir() else path
    if not file.is_file():
        found = sorted(p.name for p in path.rglob(FILE))[:1] if path.is_dir() else []
        raise PhaseFileError(f"{file}: no phase file; the run predates phase timing or is not a training run: rerun "
                             "it (python -m composer run 002a --profile pilot)"
                             + (f", or point at a folder below it that holds one ({found[0]})" if found else ""))
    by_step = {}
    for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if record.get("schema") != SCHEMA:
                raise ValueError(f"schema {record.get('schema')!r}, expected {SCHEMA}")
            by_step[record["step"]] = record
        except (ValueError, KeyError, AttributeError) as e:
            raise PhaseFileError(f"{file}:{lineno}: not a phase record ({e}); delete the line or rerun the run") \
                from None
    if not by_step:
        raise PhaseFileError(f"{file}: empty: the run ended before its first optimizer step; rerun it until at "
                             "least one step finishes")
    return [by_step[s] for s in sorted(by_step)]


def per_unit(records: list[dict]) -> dict:
    """The records' totals per unit of work: generation seconds per turn of an episode, seconds per tool call (all
    tools but submit, and each), grading seconds per submission, an episode's start, training seconds per trained
    token. A figure the records cannot give (no submission in them, ...) is None."""
    total = defaultdict(float)
    tools = defaultdict(lambda: [0, 0.0])
    for r in records:
        for key in ("generate_s", "train_s", "reset_s", "grade_s", "submissions", "resets", "episodes", "turns",
                    "trained_tokens"):
            total[key] += r[key]
        for name, t in r["tools"].items():
            tools[name][0] += t["calls"]
            tools[name][1] += t["s"]
    calls = sum(c for name, (c, _) in tools.items() if name != GRADE_TOOL)
    seconds = sum(s for name, (_, s) in tools.items() if name != GRADE_TOOL)

    def ratio(a, b):
        return a / b if b else None

    return {"steps": len(records), "device": records[0]["device"], "gpu": records[0].get("gpu"),
            "model": records[0]["model"],
            "processes": records[0]["processes"], "generate_s_per_turn": ratio(total["generate_s"], total["turns"]),
            "tool_s_per_call": ratio(seconds, calls),
            "tool_s_by_name": {n: {"calls": c, "s_per_call": s / c} for n, (c, s) in sorted(tools.items())
                               if n != GRADE_TOOL and c},
            "grade_s_per_submission": ratio(total["grade_s"], total["submissions"]),
            "start_s_per_episode": ratio(total["reset_s"], total["resets"]),
            "train_s_per_token": ratio(total["train_s"], total["trained_tokens"]),
            "turns_per_episode": ratio(total["turns"], total["episodes"]),
            "tool_calls_per_turn": ratio(calls + tools[GRADE_TOOL][0], total["turns"])}


def scaled(unit: dict, model: compute.Model, setup: compute.Setup, *, steps: int, rollouts_per_step: int,
           tokens_per_rollout: float, turns: float, concurrent_tools: bool = True) -> dict:
    """compute.gpu_hours with the measured figures of `unit` in place of the assumptions, scaled as compute.py
    scales them (compute.environment_s): `turns` turns an episode, one tool call a turn, then a start and a grading,
    the step's episodes GRADERS at a time (concurrent_tools, the code's default) or each training process's share
    one after another (concurrent_tools=False, TRL's loop); generation is the measured seconds per turn of an
    episode times the process's episode-turns; training the measured seconds per token times the process's share of
    the step's tokens. A figure `unit` lacks keeps the assumption (the keys of `assumed`). Returns the phases of a
    step, its hours and GPU-hours like gpu_hours, with `assumed` (gpu_hours' own) and `replaced` (what was
    measured)."""
    assumed = compute.gpu_hours(model, setup, steps=steps, rollouts_per_step=rollouts_per_step,
                                tokens_per_rollout=tokens_per_rollout, turns=turns, concurrent_tools=concurrent_tools)
    per_process = math.ceil(rollouts_per_step / setup.training_gpus)
    n = max(1, round(turns))
    tool_s, grade_s, start_s = (unit[k] for k in ("tool_s_per_call", "grade_s_per_submission",
                                                   "start_s_per_episode"))
    replaced = {k: v for k, v in (("generate_s_per_turn", unit["generate_s_per_turn"]), ("tool_s_per_call", tool_s),
                                  ("grade_s_per_submission", grade_s), ("start_s_per_episode", start_s),
                                  ("train_s_per_token", unit["train_s_per_token"])) if v is not None}
    generate = (unit["generate_s_per_turn"] * per_process * n if "generate_s_per_turn" in replaced
                else assumed["generate_s"])
    env = compute.environment_s(rollouts_per_step, setup.training_gpus, turns, concurrent_tools=concurrent_tools,
                                **{k: v for k, v in (("tool_s", tool_s), ("start_s", start_s), ("grading_s", grade_s))
                                   if v is not None})
    tools, grade = env["tools_s"], env["grade_s"]
    train = (unit["train_s_per_token"] * rollouts_per_step * tokens_per_rollout / setup.training_gpus
             if "train_s_per_token" in replaced else assumed["train_s"])
    step_s = generate + tools + grade + train
    hours = steps * step_s / 3600
    return {"generate_s": generate, "tools_s": tools, "grade_s": grade, "train_s": train, "step_s": step_s,
            "hours": hours, "gpu_hours": hours * setup.gpus, "episodes_per_process": per_process,
            "replaced": replaced, "assumed": assumed}
