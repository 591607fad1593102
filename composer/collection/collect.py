"""Trace collection: record every rollout of TRL GRPOTrainer training steps as trace JSONL, and check traces.

    from composer.collection import collect

    # 002a: real GRPO steps of a student on the embedded environment, every rollout recorded
    result = collect.collect_trl(student_path, probes.rewarded(4, seed=0)[0], "runs/002a-trace-collection-trl",
                                 steps=1, prompts_per_step=2, generations=2)
    result.trace_path, result.written, result.skipped, result.repairs, result.recorder_s, result.wall_s

    # the substrate-neutral checks (002a and 002b) are composer.collection.trace_checks'

Resuming:

  prepare_resume(path) -> Resume           repairs a torn tail, drops a partially written rollout (its lines
                                           are rewritten away atomically), returns the complete rollout ids

What the TRL recorder writes (source "trl"; one record per assistant turn of a rollout):

  trace_id      f"s{train_step:04d}-g{group:03d}-r{member}" (+ "-p{process}" with several processes): the
                training step that generated it, the GRPO group (one prompt) and the member within it
  state         messages: the prompt TRL built (system + task, the environment's reset() text appended) and
                the rollout's turns before this one, in OpenAI format (tool-call arguments as JSON strings,
                ids call_<k>; the Qwen3 template renders them exactly as TRL's dict arguments); env:
                {"instance_id", "tools"} (the tool names TRL rendered into the system turn)
  action        text: the turn's tokens decoded verbatim (special tokens kept); tool_call: the first call TRL
                parsed (meta.tool_calls counts them); token_ids: the turn's completion tokens; mask: GRPO's loss
                mask on them (completion_mask x tool_mask, after mask_truncated_completions); logprobs: the
                sampler's, when the backend returns them (vLLM), else None (transformers' generate gives none)
  observation   the tool message(s) TRL appended after the turn (None on the final turn if nothing followed)
  reward        the final step: the reward GRPO used (weighted sum of reward_funcs); earlier steps: None
                (the environment's reward is sparse: it is given when the episode ends)
  done          the last recorded step. Turns the policy generated *after* the environment ended the episode
                (TRL's tool loop does not know it ended) are kept in the final record's meta["after_done"],
                token ids and mask included: GRPO trains on them, so they are counted, not hidden
  truncated     any of outcome["truncation"]: "completion_cut" (the last token is not EOS: cut by
                max_completion_length), "tool_result_rolled_back" (the environment executed a call whose result
                TRL dropped because it would overflow max_completion_length), "tool_loop_limit" (TRL's
                max_tool_calling_iterations stopped a rollout that still called a tool), "env_step_limit" (the
                environment's max_steps ended the episode unsubmitted)
  error         on the final step: why the environment failed (crash or timeout; the rollout is "errored");
                a tool call that merely failed (bad arguments, unknown tool) is meta["tool_error"]
  outcome       final step: reward, rewards per reward function, advantage, env_reward, submitted, resolved,
                patch, truncation, status ("ok" | "errored"), env_steps, env_steps_after_done, after_done_turns
  meta          train_step, group, member, process, seed, model, token_span (the turn's [start, end) in the
                completion ids), prompt_tokens, tool_calls, tool_error, env (the environment's own step info)

Why environment_factory rather than rollout_func: the question is whether TRL's own multi-turn loop yields
clean traces, so the rollouts must come from it: TRL renders the prompt, samples, parses tool calls, calls the
tools, builds the tool mask and rolls back overlong results. A rollout_func would replace all of that with our
own loop and test our code instead. It is the better fit only where the trainer's loop cannot express the
episode (e.g. stopping the loop when the environment says done, which environment_factory cannot do: see
meta["after_done"]). The recorder is two hooks, not a re-simulation: an environment-side log (RecordingEnv wraps
every tool call: what ran, what came back, crashes and timeouts) and a trainer-side hook around
`_generate` / `_calculate_rewards` / `_generate_and_score_completions` (attach(trainer)) that reads TRL's own
prompts, parsed turns, token ids, tool mask, loss mask, rewards and advantages for each generation batch and
joins them with the environment's log.
"""

import functools
import itertools
import json
import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from transformers import TrainerCallback

from composer import traces
from composer.env.environment import CodingEnv, EnvConfig, TRLCodingEnv, env_reward
from composer.files import write_atomic
from composer.progress import bar

SOURCE = "trl"
TRUNCATION_KINDS = ("completion_cut", "tool_result_rolled_back", "tool_loop_limit", "env_step_limit")


# ---------------------------------------------------------------------------------------------
# The environment side: a TRL environment that logs every tool call and survives crashes and hangs


@dataclass(frozen=True)
class EnvFaults:
    """Injected environment failures (tests, the reliability section): each tool call fails with probability
    `rate`, by raising (crash), by hanging for hang_s (hang: the call timeout must catch it) or either (mixed)."""

    rate: float = 0.0
    kind: str = "crash"  # crash | hang | mixed
    hang_s: float = 5.0
    seed: int = 0

    def __post_init__(self):
        if self.kind not in ("crash", "hang", "mixed"):
            raise ValueError(f"EnvFaults.kind must be crash, hang or mixed, not {self.kind!r}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"EnvFaults.rate must be within [0, 1], not {self.rate}")


class EnvCrash(RuntimeError):
    """The environment failed mid-rollout (an injected crash, a timeout, or a crash earlier in the episode)."""


_ENV_SERIAL = itertools.count()  # creation order of RecordingEnvs: seeds their fault draws deterministically


class _LoggedEnv(CodingEnv):
    """CodingEnv whose every call() goes through its owner (log, fault injection, timeout)."""

    def __init__(self, config, owner):
        super().__init__(config=config)
        self._owner = owner

    def call(self, tool, **args):
        return self._owner._call(super().call, tool, args)


class RecordingEnv(TRLCodingEnv):
    """TRLCodingEnv with the environment-side half of the recorder; use it as `environment_factory`
    (functools.partial(RecordingEnv, config, call_timeout_s=..., faults=...)).

    Every tool call is logged in `_log` (tool, args, the text returned, the step info, seconds). A tool call that
    raises (a crash) or outlives call_timeout_s (a hang) marks the episode failed (`_failure` holds the reason):
    the call raises EnvCrash, which TRL's tool loop turns into an error tool message, every later call of the
    episode raises too, and the rollout's reward is 0.0; the next reset() starts on a fresh environment. Only
    underscore names are added: TRL exposes every public method as a tool."""

    def __init__(self, config: EnvConfig | None = None, *, call_timeout_s: float | None = None,
                 faults: EnvFaults | None = None):
        super().__init__(config)
        self._config = config
        self.env = _LoggedEnv(config, self)
        self._timeout = call_timeout_s
        self._faults = faults or EnvFaults()
        self._rng = random.Random(f"{self._faults.seed}-{next(_ENV_SERIAL)}")
        self._log: list[dict] = []
        self._failure: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._instance: dict | None = None

    def reset(self, **row) -> str:
        if self._failure is not None:  # a crashed or hung environment is abandoned, not reused
            self.env = _LoggedEnv(self._config, self)
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
        self._log, self._failure = [], None
        text = super().reset(**row)
        self._instance = self.env._ep.instance
        return text

    def _call(self, run, tool, args):
        entry = {"tool": tool, "args": args, "text": None, "info": None, "exception": None, "seconds": 0.0}
        self._log.append(entry)
        start = time.perf_counter()
        try:
            if self._failure is not None:
                raise EnvCrash(f"the environment failed earlier in this episode: {self._failure}")
            fault = self._draw_fault()
            if fault == "crash":
                raise EnvCrash(f"injected crash in {tool}")
            if self._timeout is None and fault is None:
                obs = run(tool, **args)
            else:
                obs = self._with_timeout(run, tool, args, hang=fault == "hang")
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
            if self._failure is None:
                self._failure = reason
            entry.update(exception=reason, seconds=time.perf_counter() - start)
            entry["content"] = str({"error": str(e)})  # what TRL's tool loop shows the policy
            raise
        entry.update(text=obs.text, info=obs.info.model_dump(), seconds=time.perf_counter() - start)
        entry["content"] = obs.text
        return obs

    def _draw_fault(self) -> str | None:
        f = self._faults
        if f.rate <= 0 or self._rng.random() >= f.rate:
            return None
        return f.kind if f.kind != "mixed" else self._rng.choice(("crash", "hang"))

    def _with_timeout(self, run, tool, args, *, hang: bool):
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="recording-env")

        def work():
            if hang:
                time.sleep(self._faults.hang_s)
            return run(tool, **args)

        future = self._pool.submit(work)
        try:
            return future.result(timeout=self._timeout)
        except FutureTimeout:
            raise EnvCrash(f"{tool} timed out after {self._timeout:g} s") from None

    def _episode(self) -> dict:
        """What the environment knows about the episode just played."""
        ep, state = self.env._ep, self.env.state
        return {"instance_id": state.instance_id, "reward": state.reward, "submitted": state.submitted,
                "done": state.done, "truncated": state.truncated, "steps": state.step_count,
                "patch": ep.patch if ep is not None else None, "failure": self._failure, "log": list(self._log),
                "tampering": ep.tampering if ep is not None else None}


def recording_env_factory(config: EnvConfig | None = None, *, call_timeout_s: float | None = 60.0,
                          faults: EnvFaults | None = None):
    """The environment_factory for GRPOTrainer: a new RecordingEnv per call."""
    return functools.partial(RecordingEnv, config, call_timeout_s=call_timeout_s, faults=faults)


# ---------------------------------------------------------------------------------------------
# The trainer side: hooks around GRPOTrainer's generation that write every rollout


def _openai(messages: list[dict]) -> list[dict]:
    """TRL's chat (tool-call arguments as dicts, tool messages named) in OpenAI format with call ids."""
    out, pending, k = [], [], 0
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", {})
                args = fn.get("arguments")
                k += 1
                calls.append({"id": f"call_{k}", "type": "function", "function": {
                    "name": fn.get("name"),
                    "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})
            m["tool_calls"] = calls
            pending = [c["id"] for c in calls]
        elif m.get("role") == "tool":
            m["tool_call_id"] = pending.pop(0) if pending else None
        out.append(m)
    return out


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s."""
    spans, start = [], None
    for i, v in enumerate(list(mask) + [0]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _json_safe(value):
    return json.loads(json.dumps(value, default=repr, ensure_ascii=False).encode("utf-8", "replace").decode("utf-8"))


def _first_call(message: dict) -> traces.ToolCall | None:
    calls = message.get("tool_calls") or []
    if not calls:
        return None
    fn = calls[0].get("function", {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    if not isinstance(args, dict) or not isinstance(fn.get("name"), str):
        return None
    return traces.ToolCall(name=fn["name"], arguments=_json_safe(args), id=calls[0].get("id"))


class TraceRecorder:
    """Writes every rollout of every generation batch of a GRPOTrainer to a trace JSONL file.

        recorder = TraceRecorder("runs/x/traces.jsonl", seed=0)     # resumes the file (prepare_resume)
        recorder.attach(trainer)                                     # GRPOTrainer or a subclass
        trainer.train(); recorder.close()

    The trainer's environment_factory should make RecordingEnv instances (their log is joined in: observations,
    rolled-back results, crashes); with another environment the records carry what TRL alone knows.
    Rollouts whose trace_id is already in the file are not written again (a resumed run regenerates the step
    it was killed in). `seconds` is the time spent recording: the overhead."""

    def __init__(self, path, *, seed: int = 0, resume: bool = True):
        self.path = Path(path)
        self.resume = prepare_resume(self.path) if resume else Resume(set(), [])
        self.writer = traces.TraceWriter(self.path, resume=resume)
        self.seed = seed
        self.written = 0
        self.skipped = 0
        self.seconds = 0.0
        self._stash: dict = {}

    def attach(self, trainer):
        generate, rewards, score = trainer._generate, trainer._calculate_rewards, \
            trainer._generate_and_score_completions

        def _generate(prompts):
            out = generate(prompts)
            self._stash["prompts"] = prompts
            self._stash["generated"] = out
            return out

        def _calculate_rewards(inputs, prompts, completions, completion_ids_list):
            out = rewards(inputs, prompts, completions, completion_ids_list)
            self._stash["rewards"] = out
            return out

        def _generate_and_score_completions(inputs):
            self._stash = {}
            output = score(inputs)
            start = time.perf_counter()
            try:
                self._record(trainer, inputs, output)
            finally:
                self.seconds += time.perf_counter() - start
            return output

        trainer._generate, trainer._calculate_rewards = _generate, _calculate_rewards
        trainer._generate_and_score_completions = _generate_and_score_completions
        self.trainer = trainer
        return self

    def close(self):
        self.writer.close()

    # --- building the records of one generation batch ---

    def _record(self, trainer, inputs, output):
        if not trainer.model.training:  # evaluation batches are not training rollouts
            return
        prompts = self._stash["prompts"]
        prompt_ids, completion_ids, tool_mask, completions, logprobs = self._stash["generated"][:5]
        rewards_all = self._stash["rewards"]
        n = len(prompts)
        proc = trainer.accelerator.process_index
        rewards = rewards_all[proc * n:(proc + 1) * n]
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        advantages = output["advantages"].tolist()
        weights = trainer.reward_weights.tolist()
        names = list(trainer.reward_func_names)
        G = trainer.num_generations
        step = trainer.state.global_step
        eos = set(trainer.eos_token_ids) | {trainer._tokenizer.pad_token_id}
        envs = trainer.environments or [None] * n
        tool_names = [t.__name__ for t in trainer.tools]  # in the order TRL rendered them
        multi = trainer.accelerator.num_processes > 1
        for i in range(n):
            group, member = i // G, i % G
            trace_id = f"s{step:04d}-g{group:03d}-r{member}" + (f"-p{proc}" if multi else "")
            if trace_id in self.resume.done_ids:
                self.skipped += 1
                continue
            per_func = rewards[i].tolist()
            total = sum(w * r for w, r in zip(weights, per_func) if r == r)  # TRL's nansum
            ids = list(completion_ids[i])
            mask = [int(x) for x in loss_mask[i][:len(ids)].tolist()]
            model_mask = list(tool_mask[i]) if tool_mask is not None else [1] * len(ids)
            records = self._rollout(
                trace_id=trace_id, prompt=prompts[i], completion=completions[i], ids=ids, mask=mask,
                model_mask=model_mask, logprobs=logprobs[i] if logprobs is not None else None,
                env=envs[i], trainer=trainer, eos=eos, tool_names=tool_names,
                meta={"train_step": step, "group": group, "member": member, "process": proc, "seed": self.seed,
                      "model": str(getattr(trainer.model.config, "_name_or_path", "")),
                      "prompt_tokens": len(prompt_ids[i])},
                reward=float(total), rewards=dict(zip(names, [None if r != r else float(r) for r in per_func])),
                advantage=float(advantages[i]), row=inputs[i])
            for record in records:
                self.writer.write(record)
            self.written += 1

    def _rollout(self, *, trace_id, prompt, completion, ids, mask, model_mask, logprobs, env, trainer, eos,
                 tool_names, meta, reward, rewards, advantage, row):
        tok = trainer._tokenizer
        episode = env._episode() if isinstance(env, RecordingEnv) else None
        instance_id = (episode or {}).get("instance_id") or row.get("instance_id")
        chat = _openai(list(prompt) + list(completion))
        n_prompt = len(prompt)
        turns = [k for k, m in enumerate(completion) if m.get("role") == "assistant"]
        spans = _runs(model_mask)
        problems = []
        if len(spans) != len(turns):
            problems.append(f"token segmentation: {len(spans)} generated spans for {len(turns)} assistant turns")
        # Join TRL's tool messages with the environment's log, in order: a message that matches the next log
        # entry came from that call; one that does not was produced by TRL itself (unknown tool, bad arguments).
        log = (episode or {}).get("log") or []
        cursor, matched = 0, {}
        for k, m in enumerate(completion):
            if m.get("role") == "tool" and cursor < len(log) and log[cursor].get("content") == m.get("content"):
                matched[k] = log[cursor]
                cursor += 1
        rolled_back = len(log) - cursor
        # Where the environment ended the episode: the turn whose tool result said done.
        done_turn = None
        for t, k in enumerate(turns):
            end = turns[t + 1] if t + 1 < len(turns) else len(completion)
            if any((matched.get(j) or {}).get("info", {}) and matched[j]["info"].get("done") for j in range(k, end)):
                done_turn = t
                break
        kept = turns if done_turn is None else turns[:done_turn + 1]
        truncation = []
        if ids and ids[-1] not in eos:
            truncation.append("completion_cut")
        if rolled_back > 0:
            truncation.append("tool_result_rolled_back")
        last = completion[turns[-1]] if turns else {}
        executed = sum(1 for m in completion if m.get("role") == "tool")
        if (done_turn is None and last.get("tool_calls") and rolled_back == 0
                and (turns[-1] + 1 >= len(completion)) and len(turns) - 1 >= trainer.max_tool_calling_iterations):
            truncation.append("tool_loop_limit")
        if episode and episode["truncated"] and not episode["submitted"]:
            truncation.append("env_step_limit")
        failure = (episode or {}).get("failure")
        records = []
        for t, k in enumerate(kept):
            final = t == len(kept) - 1
            end = turns[t + 1] if t + 1 < len(turns) else len(completion)
            observations = [completion[j] for j in range(k + 1, end) if completion[j].get("role") == "tool"]
            tool_error = None
            env_info = None
            crash = None
            for j in range(k + 1, end):
                if completion[j].get("role") != "tool":
                    continue
                entry = matched.get(j)
                if entry is None:
                    tool_error = tool_error or f"not executed by the environment: {completion[j].get('content')}"
                elif entry.get("exception"):
                    crash = crash or entry["exception"]
                elif entry.get("info"):
                    env_info = {key: entry["info"].get(key) for key in ("tool", "ok", "error", "step", "done")}
                    tool_error = tool_error or entry["info"].get("error")
            span = spans[t] if t < len(spans) else (len(ids), len(ids))
            token_ids = ids[span[0]:span[1]]
            step_meta = {**meta, "token_span": list(span), "tool_calls": len(completion[k].get("tool_calls") or []),
                         "tool_error": tool_error, "env": env_info}
            outcome = None
            error = crash
            if final:
                after = []
                for u in range(t + 1, len(turns)):
                    s = spans[u] if u < len(spans) else (len(ids), len(ids))
                    after.append({"text": tok.decode(ids[s[0]:s[1]], skip_special_tokens=False),
                                  "token_ids": ids[s[0]:s[1]], "mask": mask[s[0]:s[1]],
                                  "tool_calls": len(completion[turns[u]].get("tool_calls") or [])})
                step_meta["after_done"] = after
                error = failure or ("; ".join(problems) if problems else None) or crash
                outcome = {
                    "reward": reward, "rewards": rewards, "advantage": advantage,
                    "env_reward": (episode or {}).get("reward"), "submitted": (episode or {}).get("submitted"),
                    "resolved": (episode or {}).get("reward") == 1.0 if episode else None,
                    "patch": (episode or {}).get("patch"), "tampering": (episode or {}).get("tampering"),
                    "truncation": truncation,
                    "status": "errored" if error else "ok", "env_steps": len(log), "executed_tool_calls": executed,
                    "env_steps_after_done": _after_done(log),
                    "after_done_turns": len(after),
                }
            records.append(traces.StepRecord(
                schema_version=traces.SCHEMA_VERSION, trace_id=trace_id, step=t,
                state=traces.State(messages=_json_safe(chat[:n_prompt + k]),
                                   env={"instance_id": instance_id, "tools": tool_names}),
                action=traces.Action(
                    text=tok.decode(token_ids, skip_special_tokens=False), tool_call=_first_call(chat[n_prompt + k]),
                    token_ids=token_ids, mask=mask[span[0]:span[1]],
                    logprobs=[float(x) for x in logprobs[span[0]:span[1]]] if logprobs is not None else None),
                observation="\n".join(str(m.get("content")) for m in observations) if observations else None,
                reward=reward if final else None, done=final, truncated=final and bool(truncation),
                error=error, source=SOURCE, task_id=instance_id, outcome=outcome, meta=_json_safe(step_meta)))
        if not records:  # no assistant turn at all (an empty generation): one record says so
            records.append(traces.StepRecord(
                schema_version=traces.SCHEMA_VERSION, trace_id=trace_id, step=0,
                state=traces.State(messages=_json_safe(chat[:n_prompt]), env={"instance_id": instance_id,
                                                                              "tools": tool_names}),
                action=traces.Action(text=tok.decode(ids, skip_special_tokens=False), token_ids=ids, mask=mask),
                observation=None, reward=reward, done=True, truncated=bool(truncation),
                error=failure or "no assistant turn was generated", source=SOURCE, task_id=instance_id,
                outcome={"reward": reward, "rewards": rewards, "advantage": advantage, "truncation": truncation,
                         "status": "errored"},
                meta=_json_safe({**meta, "token_span": [0, len(ids)]})))
        return records


def _after_done(log: list[dict]) -> int:
    """Environment calls made after the call that ended the episode (answered "the episode is over")."""
    for i, entry in enumerate(log):
        if (entry.get("info") or {}).get("done"):
            return len(log) - i - 1
    return 0


# ---------------------------------------------------------------------------------------------
# Resuming a killed collection


@dataclass
class Resume:
    """What prepare_resume found: the rollouts complete in the file, and what it repaired (file:line notes)."""

    done_ids: set
    notes: list = field(default_factory=list)


def prepare_resume(path) -> Resume:
    """Make a trace file safe to append to after a crash and list its complete rollouts.

    1. A torn last line (an interrupted write) is truncated by traces.TraceWriter's repair; its note is kept.
    2. A rollout whose last record is not done (killed while its records were being written) is removed:
       the file is rewritten without its lines (to a temporary file, then renamed over), and noted.
    3. Any other bad line is left in place and reported: it is not ours to delete.
    The ids of complete rollouts are returned: a resumed run skips them, so nothing is duplicated."""
    path = Path(path)
    notes = []
    if not path.exists():
        return Resume(set(), notes)
    repaired = traces._repair_tail(path)  # what TraceWriter(resume=True) does, done here to report it
    if repaired:
        notes.append(repaired)
    lines = path.read_bytes().splitlines(keepends=True)
    by_id: dict[str, list[tuple[int, traces.StepRecord]]] = {}
    for lineno, line in enumerate(lines, 1):
        try:
            record = traces._parse_line(line)
        except ValueError as e:
            notes.append(f"{path}:{lineno}: {e} (left in place)")
            continue
        by_id.setdefault(record.trace_id, []).append((lineno, record))
    partial = {tid for tid, rows in by_id.items() if not any(r.done for _, r in rows)}
    if partial:
        drop = {lineno for tid in partial for lineno, _ in by_id[tid]}
        write_atomic(path, b"".join(line for lineno, line in enumerate(lines, 1) if lineno not in drop), sync=True)
        for tid in sorted(partial):
            rows = by_id[tid]
            notes.append(f"{path}:{rows[0][0]}: removed the partially written rollout {tid!r} "
                         f"({len(rows)} of its steps, lines {rows[0][0]}-{rows[-1][0]}); it is collected again")
    return Resume({tid for tid in by_id if tid not in partial}, notes)


# ---------------------------------------------------------------------------------------------
# One collection run


@dataclass
class Collection:
    trace_path: Path
    written: int  # rollouts written by this run
    skipped: int  # rollouts regenerated by this run but already in the file (a resumed step)
    repairs: list  # what prepare_resume repaired before the run (file:line notes)
    resumed_from: str | None  # the trainer checkpoint the run resumed from
    wall_s: float  # the whole trainer.train()
    recorder_s: float  # of which recording
    log_history: list
    instances: list


def dataset(instances: list[dict], system: str | None = None):
    """The GRPO dataset: one row per task (its SWE-bench fields) with a system + empty user prompt; TRL appends
    the environment's reset() text (the task) to the user message."""
    from datasets import Dataset

    from composer import policies
    system = policies.SYSTEM if system is None else system
    rows = [{**r, "prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}]}
            for r in instances]
    return Dataset.from_list(rows)


def split_rollouts(rollouts: int, processes: int, micro_batch: int | None = None) -> tuple[int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps) for `rollouts` per optimizer step shared out over
    `processes`, `micro_batch` rollouts per forward and backward (default: a process's whole share). TRL generates
    their product times the processes at once, so a step trains the same rollouts on any launch; at long sequences
    a micro-batch of 1 is what fits (composer.costs.plan)."""
    share, left = divmod(rollouts, processes)
    if left:
        raise ValueError(f"{rollouts} rollouts per step do not split over {processes} processes")
    micro = share if micro_batch is None else micro_batch
    if micro < 1 or share % micro:
        raise ValueError(f"per_device_train_batch_size {micro_batch} must divide the {share} rollouts each of the "
                         f"{processes} process(es) trains per step")
    return micro, share // micro


class StepBar(TrainerCallback):
    """A progress bar (composer.progress) of a trainer's optimizer steps, on its main process. transformers' own
    (disable_tqdm=False) draws through tqdm.auto, which under `python -m composer run` writes into the report."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.steps_done = bar(total=state.max_steps, desc="GRPO steps", unit="step")

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:  # global_step: a resumed run starts past 0
            self.steps_done.update(state.global_step - self.steps_done.n)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.steps_done.close()


def build_trainer(model_path, instances: list[dict], run_dir, *, steps: int = 1, prompts_per_step: int = 2,
                  generations: int = 2, max_completion_length: int = 512, max_tool_calling_iterations: int = 10,
                  env_config: EnvConfig | None = None, call_timeout_s: float | None = 60.0,
                  faults: EnvFaults | None = None, seed: int = 0, temperature: float = 1.0,
                  learning_rate: float = 1e-5, checkpoint: bool = True, recording_env: bool = True,
                  channels: dict | None = None, pairs_dataset=None, turn_cache: bool = True, report_to=(),
                  concurrent_tools: bool = True, tool_workers: int | None = None, **config):
    """A GRPOTrainer over the embedded environment (RecordingEnv): by default CPU, offline, one generation batch
    of prompts_per_step x generations rollouts per optimizer step, a checkpoint after every step (resume);
    `config` overrides any GRPOConfig field but the batch's: per_device_train_batch_size is the rollouts per forward
    and backward (see split_rollouts). recording_env=False uses the plain TRLCodingEnv (no environment-side
    log, no fault handling): the baseline of the recorder's overhead. `channels` (ComposerConfig's channel fields,
    e.g. trace_replay_weight) makes it a ComposerTrainer, with `pairs_dataset` for the trace-replay channel. Either
    generates through composer.turn_cache (each rollout's KV cache kept from one tool-calling turn to the next);
    turn_cache=False leaves TRL's own generation (the baseline of `python -m composer bench turns`). Its tool loop
    runs each turn's episodes' tool calls at once (composer.episodes, up to tool_workers threads, default
    episodes.WORKERS) with the serial loop's results; concurrent_tools=False leaves TRL's serial loop (the baseline
    of `python -m composer bench episodes`). A progress bar counts its steps (StepBar). Every step's phase times go
    to run_dir/phases.jsonl and the trainer's log (composer.costs.phases); `report_to` is TRL's (e.g. ["tensorboard"]:
    event files in run_dir/tensorboard, beside the run's outputs rather than in the trainer's folder, which 004's
    jobs delete)."""
    from transformers.integrations import TensorBoardCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from composer import vllm_engine
    from composer.costs import phases
    from composer.models import load_tokenizer
    from composer.trainer import ComposerConfig, ComposerTrainer
    from composer.turn_cache import with_turn_cache

    tokenizer = load_tokenizer(model_path)
    if "gradient_accumulation_steps" in config:
        raise ValueError("gradient_accumulation_steps is derived: set per_device_train_batch_size (rollouts per "
                         "forward and backward) and the accumulation follows from prompts_per_step x generations")
    # the launcher's process count (an accelerate state made here first leaves GRPO's distributed dataloader empty)
    micro, accumulation = split_rollouts(prompts_per_step * generations, int(os.environ.get("WORLD_SIZE", "1")),
                                         config.pop("per_device_train_batch_size", None))
    settings = dict(
        use_cpu=True, bf16=False, report_to=list(report_to), disable_tqdm=True, logging_steps=1,
        max_steps=steps, per_device_train_batch_size=micro, num_generations=generations,
        gradient_accumulation_steps=accumulation, max_completion_length=max_completion_length,
        max_tool_calling_iterations=max_tool_calling_iterations, temperature=temperature, seed=seed,
        learning_rate=learning_rate, save_strategy="steps" if checkpoint else "no", save_steps=1,
        save_total_limit=1)
    settings.update(config)  # e.g. the live profile: use_cpu=False, bf16=True, use_vllm=True, vllm_mode="colocate"
    output_dir = str(Path(run_dir) / "trainer")
    extra = {}
    if channels is None:
        args, trainer_cls = GRPOConfig(output_dir, **settings), GRPOTrainer
    else:
        # an arm's own channel field over the shared config's (004: B+ with more pairs a step than trainer_config's)
        args, trainer_cls = ComposerConfig(output_dir, **{**settings, **channels}), ComposerTrainer
        extra["pairs_dataset"] = pairs_dataset
    if turn_cache:
        trainer_cls = with_turn_cache(trainer_cls)
    if concurrent_tools:
        from composer import episodes

        trainer_cls = episodes.with_concurrent_tools(trainer_cls, tool_workers or episodes.WORKERS)
    cpu_vllm = settings.get("use_vllm") and vllm_engine.on_cpu()
    if cpu_vllm:
        if settings.get("vllm_mode", "colocate") != "colocate":
            raise ValueError("vllm_mode='server' pushes weights over NCCL, which TRL's client refuses on CPU: on a CPU "
                             "machine use vllm_mode='colocate'")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(vllm_engine.CPU_KVCACHE_GIB))
    trainer = trainer_cls(str(model_path), reward_funcs=[env_reward], args=args, train_dataset=dataset(instances),
                          processing_class=tokenizer,
                          environment_factory=recording_env_factory(env_config, call_timeout_s=call_timeout_s,
                                                                    faults=faults) if recording_env
                          else functools.partial(TRLCodingEnv, env_config), **extra)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StepBar())
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback):
            callback.logging_dir = str(Path(run_dir) / "tensorboard")
    if cpu_vllm:
        vllm_engine.colocate_on_cpu(trainer)
    phases.attach(trainer, Path(run_dir) / phases.FILE)
    return trainer


def collect_trl(model_path, instances: list[dict], run_dir, *, trace_path=None, record: bool = True,
                resume: bool = True, sampler: Callable | None = None, **kwargs) -> Collection:
    """Run GRPO training steps of `model_path` on `instances` and record every rollout to
    run_dir/traces.jsonl (or trace_path). Rerunning into the same run_dir resumes: the trainer from its last
    checkpoint (one per step), the file after prepare_resume; complete rollouts are never written twice.
    record=False runs the same training without either half of the recorder (the overhead baseline). sampler(trainer), when
    given, replaces the trainer's sampler (e.g. scripted_sampler: tests, benchmarks)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    run_dir = Path(run_dir)
    trace_path = Path(trace_path) if trace_path is not None else run_dir / "traces.jsonl"
    if not resume:  # a fresh run's phase times and TensorBoard events are its own
        from composer.costs.phases import FILE

        (run_dir / FILE).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    trainer = build_trainer(model_path, instances, run_dir, recording_env=record, **kwargs)
    if sampler is not None:
        sampler(trainer)
    recorder = TraceRecorder(trace_path, seed=kwargs.get("seed", 0), resume=resume).attach(trainer) \
        if record else None
    out = Path(trainer.args.output_dir)
    last = last_checkpoint(out) if resume else None
    start = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=last)
    finally:
        wall = time.perf_counter() - start
        if recorder is not None:
            recorder.close()
        close_environments(trainer)
    return Collection(trace_path=trace_path, written=recorder.written if recorder else 0,
                      skipped=recorder.skipped if recorder else 0,
                      repairs=recorder.resume.notes if recorder else [], resumed_from=last, wall_s=wall,
                      recorder_s=recorder.seconds if recorder else 0.0, log_history=trainer.state.log_history,
                      instances=instances)


def train_timed(trainer) -> float:
    """trainer.train(), then close its environments (whether or not it finished); the training's wall-clock s."""
    start = time.perf_counter()
    try:
        trainer.train()
    finally:
        close_environments(trainer)
    return time.perf_counter() - start


def close_environments(trainer) -> None:
    """Close the sandboxes of every environment TRL made for the trainer."""
    for env in itertools.chain.from_iterable(getattr(trainer, "_environment_pool", {}).values()):
        env.env.close()


def last_checkpoint(folder) -> str | None:
    """The newest complete trainer checkpoint in folder: transformers writes trainer_state.json last, so a
    checkpoint without a readable one was cut by a kill and is passed over (get_last_checkpoint would take it)."""
    folder = Path(folder)
    found = []
    for d in folder.glob("checkpoint-*") if folder.is_dir() else []:
        try:
            json.loads((d / "trainer_state.json").read_text())
            found.append((int(d.name.split("-")[1]), d))
        except (OSError, ValueError, IndexError):
            continue
    return str(max(found)[1]) if found else None


def expected_ids(steps: int, prompts_per_step: int, generations: int, *, first_step: int = 0) -> list[str]:
    """The trace ids a single-process collection of `steps` steps writes."""
    return [f"s{s:04d}-g{g:03d}-r{m}" for s in range(first_step, first_step + steps)
            for g in range(prompts_per_step) for m in range(generations)]


# ---------------------------------------------------------------------------------------------
# A scripted sampler (tests, benchmarks): everything else stays TRL's


def tool_call_text(name: str, **args) -> str:
    """One assistant turn as a Qwen3 student writes it: a <tool_call> block, then <|im_end|>."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call><|im_end|>'


def solve_plan(instance: dict, extra=()) -> list[str]:
    """The turns of an expert episode: run_tests, the gold edits, submit (then any `extra` turns)."""
    from composer.env.environment import gold_edits

    return [tool_call_text("run_tests"), *(tool_call_text("edit", **e) for e in gold_edits(instance)),
            tool_call_text("submit"), *extra]


def scripted_sampler(plans: dict[str, list[str]], *, delay_s: float = 0.0, otherwise: str = "Done.<|im_end|>"):
    """sampler() for collect_trl / a GRPOTrainer: turn k of a rollout on instance i is plans[i][k] (then
    `otherwise`), cut at max_completion_length like a real sampler. TRL still renders, parses, calls the tools,
    builds masks, rolls back, scores and trains; only the sampling is scripted. The rollout's instance is found by
    its problem statement in the prompt, k by the tool responses in it."""

    def install(trainer):
        tok = trainer._tokenizer
        needles = {r["instance_id"]: r["problem_statement"].strip()[:60] for r in trainer.train_dataset}

        def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            out = []
            for ids in prompt_ids:
                text = tok.decode(ids, skip_special_tokens=False)
                iid = next(i for i, needle in needles.items() if needle in text)
                plan, k = plans[iid], text.count("<tool_response>")
                turn = tok(plan[k] if k < len(plan) else otherwise, add_special_tokens=False).input_ids
                out.append(turn[:trainer.max_completion_length])
                time.sleep(delay_s)
            return out, None

        trainer._generate_single_turn = generate
        return trainer

    return install
