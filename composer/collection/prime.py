"""Spike 002b: collect rollouts with verifiers (PRIME-RL's environment layer) and convert its v1 traces.

    python -m composer.collection.prime collect --records tasks.jsonl --run-dir runs/x --base-url URL --model m -n 1
    python -m composer.collection.prime convert runs/x/verifiers/traces.jsonl runs/x/traces.jsonl
    python -m composer.collection.prime tasks --profile report --split train -n 25 > tasks.jsonl  # a taskset's records

    from composer.collection import prime
    from composer.serve import serve

    with serve(models={"student": student_path}) as server:
        result = prime.collect(records, "runs/002b-trace-collection-prime-rl", base_url=server.base_url,
                               model="student", n_rollouts=1, concurrency=2)
    result.verifiers_path, result.new, result.resumed, result.total, result.errored, result.wall_s
    records = prime.convert_file(result.verifiers_path, result.trace_path)   # our schema, composer.traces
    prime.verifiers_rollouts_per_s(n_rollouts=8)      # the benchmark key of `python -m composer bench rollouts`

What runs: the taskset of composer.env.taskset in verifiers' SingleAgentEnv, in process (the same path as
`vf-eval`, whose runner this mirrors: `env.serving()`, then `env.run_slot` per planned rollout under a
semaphore), each rollout's harness program in the subprocess runtime, every model call relayed by verifiers'
interception server to our OpenAI-compatible server (composer.serve) through its EvalClient. Nothing is
pushed anywhere: vf-eval's platform upload is simply never called.

Files (runs/<slug>/): verifiers/traces.jsonl, verifiers' own format (one Episode per line, appended as each
rollout finishes, what PRIME-RL's orchestrator also consumes); verifiers/config.json (what produced it);
traces.jsonl, the same rollouts in our schema (composer.traces), rebuilt from the former by convert_file.

Reliability:
- A rollout whose environment crashes or hangs is recorded, not retried: verifiers captures the failure on
  its trace (TaskError from CodingTask.finalize; the agent's rollout timeout), the episode is written with
  ok=false, the collection goes on, and the converter puts the reason in the final record's `error`
  (outcome["status"] = "errored"), which trace_checks.check_traces counts.
- A prompt that outgrows the model's context: the server's 400 reaches verifiers as a ProviderError, which
  fails the rollout (it is not a truncation there); recorded and counted like the above. When it happens
  before the first turn the rollout still gets one record (empty action, the error).
- Killed mid-run (kill -9): rerunning the same command resumes. verifiers' resume planner
  (cli.eval.resume.load) drops a torn last line, keeps every whole episode -- errored ones included, they
  are results -- and plans only the missing rollouts per task (matched by the task's content hash), so no
  rollout is lost or duplicated. A rerun with other records or settings is refused (the saved config differs).

The converter (from_verifiers): one StepRecord per model turn (sampled assistant node) of the trace's final
branch. state.messages is the chat before it (OpenAI format); action.text the content plus each tool call
rendered as Qwen3 `<tool_call>` JSON, action.tool_call the first call; token_ids / logprobs / mask the
sampled tokens when the client recorded them (PRIME-RL's TrainClient does; an EvalClient relay, as offline,
records none); observation the tool messages answering the turn; the final record carries reward (the
trace's weighted reward), done, truncated, error and outcome; meta the call's usage, finish reason and the
environment's own step log entry.

Results (2026-11-30, the shared 2-core VM at load average 4-7 from other jobs; smoke zoo student):
- 16 rollouts (4 train tasks x 4, concurrency 4, max_tokens 1024): all recorded, complete, no collection
  truncation, no schema problems, 16/16 rewards equal to re-grading; 0.041 rollouts/s, 393 s. Per rollout
  (medians): 73 s in the model (HF generate on CPU), 6.4 s harness (the chat program's start and tool calls).
  The smoke student never emits a tool call, so every rollout is one turn: the numbers describe the substrate.
- verifiers_rollouts_per_s(8): 0.25 rollouts/s (4 sandboxed test runs each, echo backend, no model time).
- Failure modes seen: a hung tool call is a verifiers *stop* (is_timeout, ok=true), not an error; a prompt past
  the model's context fails the rollout as a ProviderError (not a truncation); an errored rollout is never
  scored (its reward stays null); an overlong completion ends the chat loop (no tool call), named completion_cut.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from composer import traces
from composer.collection import trace_checks
from composer.env import taskset  # registers the verifiers taskset id "composer-coding"
from composer.progress import bar

SOURCE = "verifiers"
VERIFIERS_VERSION = "0.4.0"  # pinned: the v1 trace format and the plugin/loader behaviour this module relies on
KEY_VAR = "COMPOSER_LOCAL_KEY"  # the env var verifiers reads the API key from (the local server ignores it)
LIMIT_STOPS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed")


# ---------------------------------------------------------------------------------------------
# Collection


@dataclass
class Collection:
    run_dir: Path
    verifiers_path: Path  # verifiers' traces.jsonl
    trace_path: Path  # ours, written by convert_file
    new: int  # rollouts run by this call
    resumed: int  # rollouts kept from an earlier, interrupted call
    total: int
    errored: int  # episodes with ok=false (all of them, resumed ones included)
    wall_s: float  # this call, from env construction to the last rollout written
    rollouts_per_s: float  # new / (wall of the rollouts themselves, serving start included)
    errors: dict = field(default_factory=dict)  # reason -> count


def _settings(records, n_rollouts, model, max_tokens, temperature, seed, max_turns, rollout_timeout_s, tools):
    return {"verifiers": VERIFIERS_VERSION, "taskset": taskset.TASKSET_ID, "model": model, "n_rollouts": n_rollouts,
            "instances": [r["instance_id"] for r in records], "max_tokens": max_tokens, "temperature": temperature,
            "seed": seed, "max_turns": max_turns, "rollout_timeout_s": rollout_timeout_s, "tools": tools}


def collect(records: list[dict], run_dir, *, base_url: str, model: str, n_rollouts: int = 1, concurrency: int = 2,
            max_tokens: int = 160, temperature: float = 1.0, seed: int | None = None, max_turns: int | None = 20,
            rollout_timeout_s: float | None = 300.0, tools: dict | None = None, resume: bool = True,
            convert: bool = True) -> Collection:
    """Run n_rollouts rollouts of every record against the model at base_url; see the module docstring.

    tools: composer.env.taskset.CodingToolsetConfig fields (max_steps, test_timeout_s, crash_at, ...).
    resume=False starts afresh (the run's verifiers/ folder is removed first)."""
    import verifiers.v1 as vf
    from verifiers.v1.cli.eval import resume as vf_resume
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.utils.eval import plan_rollouts
    from verifiers.v1.utils.trace_store import append_episode

    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    out = run_dir / "verifiers"
    tools = dict(tools or {})
    settings = _settings(records, n_rollouts, model, max_tokens, temperature, seed, max_turns, rollout_timeout_s,
                         tools)
    config_path = out / "config.json"
    if not resume and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    if config_path.exists():
        saved = json.loads(config_path.read_text())
        if saved != settings:
            changed = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
            raise ValueError(f"{out} holds a collection with other settings ({', '.join(changed)}): resuming would "
                             "mix incomparable rollouts; pass resume=False or another run_dir")
    else:
        config_path.write_text(json.dumps(settings, indent=2) + "\n")

    os.environ.setdefault(KEY_VAR, "sk-local-unused")
    env = taskset.load_env(taskset.taskset_config(records, **tools), max_turns=max_turns, rollout_timeout_s=rollout_timeout_s)
    tasks = list(env.taskset)
    # Every parseable episode is a result (errored ones too): only missing rollouts are owed.
    plan = vf_resume.load(out, tasks, n_rollouts, lambda episode: True) if resume else plan_rollouts(tasks, n_rollouts)
    resumed = sum(len(kept) for _, kept, _ in plan)
    sampling = {"max_tokens": max_tokens, "temperature": temperature, **({"seed": seed} if seed is not None else {})}
    ctx = ModelContext(model=model, client=vf.EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR),
                       sampling=vf.SamplingConfig(**sampling))
    lock = asyncio.Lock()

    async def run() -> float:
        semaphore = asyncio.Semaphore(concurrency)

        async def on_complete(episode):
            await append_episode(out, episode, lock)
            rollouts_done.update()

        start = time.perf_counter()
        async with env.serving():
            slots = [slot for task, _, owed in plan if owed for slot in env.slots(task, owed)]
            await asyncio.gather(*(env.run_slot(slot, ctx, semaphore, on_complete) for slot in slots))
        return time.perf_counter() - start

    owed = sum(n for _, _, n in plan)
    with bar(total=owed, desc="verifiers rollouts", unit="rollout") as rollouts_done:
        rollout_s = _run_sync(run) if owed else 0.0
    episodes = read_verifiers(out / "traces.jsonl")
    errors = Counter(_episode_error(e).split(":")[0] for e in episodes if not _episode_ok(e))
    result = Collection(run_dir=run_dir, verifiers_path=out / "traces.jsonl", trace_path=run_dir / "traces.jsonl",
                        new=owed, resumed=resumed, total=len(episodes), errored=sum(errors.values()),
                        wall_s=time.perf_counter() - t0, rollouts_per_s=owed / rollout_s if rollout_s else 0.0,
                        errors=dict(errors))
    if convert:
        convert_file(result.verifiers_path, result.trace_path)
    return result


def _run_sync(factory):
    """asyncio.run(factory()), in a worker thread when this thread already runs an event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="composer-prime") as pool:
        return pool.submit(asyncio.run, factory()).result()


# ---------------------------------------------------------------------------------------------
# verifiers v1 traces.jsonl: reading


def read_verifiers(path) -> list:
    """The episodes of a verifiers v1 traces.jsonl, validated strictly against verifiers' own WireEpisode
    model; a bad line raises traces.TraceError("file:line: why"): invalid JSON, a wrong type, a missing field,
    an episode without traces, or a trace schema version other than verifiers.v1.TRACE_VERSION."""
    from pydantic import ValidationError
    from verifiers.v1.episode import WireEpisode
    from verifiers.v1.trace import TRACE_VERSION

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no verifiers trace file at {path}")
    episodes = []
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                raise traces.TraceError("empty line", path, lineno)
            try:
                row = json.loads(line)
            except ValueError as e:
                torn = "" if line.endswith(b"\n") else " (torn last line: the writer was interrupted)"
                raise traces.TraceError(f"invalid JSON{torn}: {e}", path, lineno) from None
            if not isinstance(row, dict):
                raise traces.TraceError(f"expected a JSON object (an episode), got {type(row).__name__}", path, lineno)
            if not row.get("traces"):
                raise traces.TraceError("missing field: traces (an episode holds at least one trace)", path, lineno)
            versions = {t.get("version") if isinstance(t, dict) else None for t in row["traces"]}
            if versions != {TRACE_VERSION}:
                shown = sorted(map(repr, versions))
                raise traces.TraceError(f"unsupported trace version {', '.join(shown)} (this reader supports "
                                        f"{TRACE_VERSION}, verifiers {VERIFIERS_VERSION})", path, lineno)
            try:
                episodes.append(WireEpisode.model_validate_json(line, strict=True))
            except ValidationError as e:
                raise traces.TraceError(_explain(e), path, lineno) from None
    return episodes


def _explain(err) -> str:
    parts = []
    for e in err.errors(include_url=False)[:5]:
        loc = ".".join(map(str, e["loc"])) or "episode"
        got = "" if e["type"] == "missing" else f" (got {traces._short(e['input'])})"
        parts.append(f"{'missing field' if e['type'] == 'missing' else 'wrong type'}: {loc}: {e['msg']}{got}")
    more = len(err.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _episode_ok(episode) -> bool:
    """verifiers counts a stage deadline as a stop, not an error (ok stays true, is_timeout is set): here a
    timed-out rollout is errored, like a crashed one."""
    return episode.ok and not episode.is_timeout and all(t.ok and not t.is_timeout for t in episode.traces)


def _episode_error(episode) -> str:
    errs = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
    reasons = [f"{e.type}: {e.message}" for e in errs]
    reasons += [f"Timeout: {t.stop_condition} (a stage deadline expired mid-rollout)"
                for t in episode.traces if t.is_timeout]
    if reasons:
        return "; ".join(reasons)
    return "the episode did not complete" if not episode.ok else ""


# ---------------------------------------------------------------------------------------------
# Conversion to composer.traces


def _openai(message) -> dict:
    """A verifiers v1 message as an OpenAI chat message dict (tool-call arguments stay JSON strings)."""
    from verifiers.v1.types import content_text

    out = {"role": message.role, "content": message.content if isinstance(message.content, str) or
           message.content is None else content_text(message.content)}
    if message.role == "assistant":
        if message.content is None:
            out["content"] = ""
        if message.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        if message.name:
            out["name"] = message.name
    return out


def _action(node) -> traces.Action:
    message = node.message
    text = message.content or ""
    tool_call = None
    for i, call in enumerate(message.tool_calls or []):
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = None
        rendered = call.arguments if arguments is None else json.dumps(arguments, ensure_ascii=False)
        block = f'<tool_call>\n{{"name": "{call.name}", "arguments": {rendered}}}\n</tool_call>'
        text += ("\n" if text else "") + block
        if i == 0 and isinstance(arguments, dict):
            tool_call = traces.ToolCall(name=call.name, arguments=arguments, id=call.id)
    ids = logprobs = mask = None
    if node.token_ids:  # the sampled tokens only (a node's delta also holds the generation-prompt scaffold)
        sampled = [t for t, m in zip(node.token_ids, node.mask) if m]
        ids, mask = sampled, [1] * len(sampled)
        logprobs = list(node.logprobs) if len(node.logprobs) == len(sampled) else None
    return traces.Action(text=text, tool_call=tool_call, token_ids=ids, logprobs=logprobs, mask=mask)


def truncation_kinds(trace, env: dict) -> list[str]:
    """Why a verifiers rollout was cut short: the environment's step limit, a framework limit (max_turns, token
    limits), or the last model call cut at max_tokens (finish_reason "length")."""
    kinds = []
    if env.get("truncated"):
        kinds.append("env_step_limit")
    if trace.stop_condition in LIMIT_STOPS:
        kinds.append(trace.stop_condition)
    last = next((c for c in reversed(trace.calls) if c.error is None), None)
    if last is not None and last.finish_reason == "length":
        kinds.append("completion_cut")
    return kinds


def from_verifiers(episodes) -> list[traces.StepRecord]:
    """Our StepRecords for verifiers v1 episodes (WireEpisode, as read_verifiers returns); see the module
    docstring. A rollout that failed before its first model turn still gets one record (empty action, the
    error), so every rollout is accounted for."""
    records = []
    for episode in episodes:
        for trace in episode.traces:
            records += _trace_records(episode, trace)
    return records


def _trace_records(episode, trace) -> list[traces.StepRecord]:
    env = dict(trace.info.get("coding_env") or {})
    log = env.pop("log", []) or []
    instance = trace.task.data.model_extra.get("instance") or {}
    task_id = instance.get("instance_id") or trace.task.data.id
    branch = trace.branches[-1] if trace.branches else None
    nodes = branch.nodes if branch else []
    calls = {c.node: c for c in trace.calls if c.node is not None}
    node_ids = {id(n): i for i, n in enumerate(trace.nodes)}
    turns = [i for i, n in enumerate(nodes) if n.sampled and n.message.role == "assistant"]
    errored = not _episode_ok(episode)
    error = _episode_error(episode) if errored else None
    kinds = truncation_kinds(trace, env)
    rewards = {k: (None if r is None else r.score * r.weight) for k, r in trace.rewards.items()}
    scored = bool(rewards) and all(v is not None for v in rewards.values())
    outcome = {"status": "errored" if errored else "ok", "reward": trace.reward if scored else None,
               "rewards": rewards, "env_reward": env.get("reward"), "submitted": env.get("submitted", False),
               "resolved": env.get("reward") == 1.0, "patch": env.get("patch"), "truncation": kinds,
               "stop_condition": trace.stop_condition, "env_steps": env.get("steps", 0),
               "is_timeout": trace.is_timeout or episode.is_timeout, "turns": len(turns),
               "episode_id": episode.id}
    meta_base = {"model": trace.agent.config.model, "episode_id": episode.id, "task_key": trace.task.key,
                 "harness": getattr(trace.agent.config.harness, "id", None), "verifiers": trace.verifiers.version}
    out, used = [], 0
    common = dict(schema_version=traces.SCHEMA_VERSION, trace_id=trace.id, source=SOURCE, task_id=task_id)
    if not turns:  # failed before any model turn: one record so the rollout is not silently missing
        return [traces.StepRecord(**common, step=0, state=traces.State(
            messages=[_openai(n.message) for n in nodes] or _prompt(trace.task.data), env={"instance_id": task_id}),
            action=traces.Action(text=""), observation=None, reward=outcome["reward"], done=True,
            truncated=bool(kinds), error=error or "no model turn", outcome=outcome,
            meta={**meta_base, "no_turn": True, "usage": None, "finish_reason": None, "tool_calls": 0,
                  "tool_error": None, "env": None})]
    for t, i in enumerate(turns):
        last = t == len(turns) - 1
        node = nodes[i]
        answers = [n for n in nodes[i + 1: turns[t + 1] if not last else len(nodes)] if n.message.role == "tool"]
        n_calls = len(node.message.tool_calls or [])
        steps = log[used: used + n_calls]  # the environment ran one step per tool call, in order
        used += n_calls
        call = calls.get(node_ids.get(id(node)))
        records_meta = {**meta_base, "no_turn": False,
                        "usage": call.usage.model_dump() if call and call.usage else None,
                        "finish_reason": call.finish_reason if call else None, "tool_calls": n_calls,
                        "tool_error": next((s["error"] for s in steps if s.get("error")), None),
                        "env": steps[0] if steps else None}
        out.append(traces.StepRecord(
            **common, step=t,
            state=traces.State(messages=[_openai(n.message) for n in nodes[:i]], env={"instance_id": task_id}),
            action=_action(node),
            observation="\n".join(_openai(n.message)["content"] for n in answers) if answers else None,
            reward=outcome["reward"] if last else None, done=last, truncated=last and bool(kinds),
            error=error if last else None, outcome=outcome if last else None, meta=records_meta))
    return out


def _prompt(data) -> list[dict]:
    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    return messages + ([{"role": "user", "content": data.prompt}] if isinstance(data.prompt, str) else [])


def convert_file(src, dst) -> list[traces.StepRecord]:
    """Convert a verifiers traces.jsonl into our JSONL at dst (rewritten whole: it is derived data)."""
    records = from_verifiers(read_verifiers(src))
    dst = Path(dst)
    tmp = dst.with_suffix(".jsonl.tmp")
    with traces.TraceWriter(tmp, resume=False) as writer:
        for record in records:
            writer.write(record)
    tmp.replace(dst)
    return records


def check(records: list[traces.StepRecord], *, expected_rollouts: int | None = None, problems=()) -> dict:
    """The substrate-neutral checks (composer.collection.trace_checks, 002a's too)."""
    return trace_checks.check_traces(records, expected_rollouts=expected_rollouts, problems=problems)


# ---------------------------------------------------------------------------------------------
# Head to head: one substrate's export, measured the same way for both (002b's notebook)

COLLECTION_TRUNCATION = ("completion_cut", "tool_result_rolled_back", "tool_loop_limit", *LIMIT_STOPS)


def export_profile(records: list[traces.StepRecord], problems=(), *, expected_rollouts: int | None = None) -> dict:
    """What a trace file offers, measured from its records: the checks (check()), which per-token fields the
    actions carry, how visible truncation is, failure modes seen. Substrate-neutral: 002a's file and ours alike."""
    report = check(records, expected_rollouts=expected_rollouts, problems=problems)
    groups = traces.group_traces(records, on_error="collect")
    finals = [s[-1] for s in groups.values()]
    n_actions = max(len(records), 1)
    share = lambda f: sum(1 for r in records if f(r.action)) / n_actions  # noqa: E731
    truncated = [f for f in finals if f.truncated]
    kinds = Counter(k for f in finals for k in ((f.outcome or {}).get("truncation") or []))
    comp = report["completeness"]
    incomplete = comp["incomplete"] if isinstance(comp["incomplete"], dict) else dict.fromkeys(comp["incomplete"], "")
    errored_ids = set(report["errored"].get("ids", []))
    return {
        "rollouts": report["rollouts"], "steps": report["steps"],
        "complete": comp["complete"], "incomplete": len(incomplete) + len(comp.get("missing", [])),
        "incomplete_not_errored": len(set(incomplete) - errored_ids),
        "token_ids": share(lambda a: bool(a.token_ids)), "logprobs": share(lambda a: bool(a.logprobs)),
        "mask": share(lambda a: a.mask is not None and len(a.mask) > 0),
        "truncated": len(truncated), "truncation_kinds": dict(kinds),
        "truncated_with_kind": sum(1 for f in truncated if (f.outcome or {}).get("truncation")),
        "collection_truncated": sum(1 for f in finals if set((f.outcome or {}).get("truncation") or [])
                                    & set(COLLECTION_TRUNCATION)),
        "schema_problems": len(report["schema"]["invalid_lines"]) + len(report["schema"]["drift"]),
        "drift": report["schema"]["drift"], "errored": report["errored"]["rollouts"],
        "errored_reasons": report["errored"]["reasons"], "tasks": sorted({f.task_id for f in finals if f.task_id}),
        "sources": sorted({r.source for r in records}), "checks": report,
    }


def pick_substrate(profiles: dict[str, dict], loc: dict[str, int | None]) -> tuple[str | None, list[str]]:
    """The verdict rule of the head-to-head (written before the numbers): a substrate's export scores one point
    for each of (1) every rollout complete apart from errored ones, (2) no schema problems, (3) token ids and
    a loss mask on every action, (4) logprobs on every action, (5) every truncated rollout says why (a named
    kind); the higher score wins; a tie goes to fewer adapter lines, then to none (None: no verdict)."""
    if len(profiles) < 2:
        return None, ["only one substrate measured: no comparison"]
    scores, reasons = {}, []
    for name, p in profiles.items():
        points = {"complete": p["incomplete_not_errored"] == 0 and p["rollouts"] > 0,
                  "no schema problems": p["schema_problems"] == 0,
                  "token ids + mask": p["token_ids"] == 1.0 and p["mask"] == 1.0,
                  "logprobs": p["logprobs"] == 1.0,
                  "truncation named": p["truncated_with_kind"] == p["truncated"]}
        scores[name] = sum(points.values())
        reasons.append(f"{name}: {scores[name]}/5 ({', '.join(k for k, v in points.items() if v) or 'none'})")
    best = max(scores.values())
    leaders = [n for n, v in scores.items() if v == best]
    if len(leaders) > 1:
        known = {n: loc.get(n) for n in leaders if loc.get(n) is not None}
        fewest = min(known.values()) if known else None
        leaders = [n for n in known if known[n] == fewest] if known else leaders
        reasons.append(f"tie at {best}/5, broken by adapter lines: "
                       + ", ".join(f"{n} {loc.get(n)}" for n in scores if n in known or n in leaders))
    return (leaders[0] if len(leaders) == 1 else None), reasons


def code_lines(path, *, only=(), exclude=()) -> int:
    """Lines of code in a Python file (or in its top-level definitions named in `only`, less those in
    `exclude`): no blank lines, comments or docstrings. How the adapters' sizes are measured."""
    import ast
    import io
    import tokenize

    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    doc_lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENDMARKER):
            code.update(range(tok.start[0], tok.end[0] + 1))
    code -= doc_lines

    def span(names):
        lines = set()
        for node in tree.body:
            name = getattr(node, "name", None)
            if name in names:
                first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                lines.update(range(first, node.end_lineno + 1))
        return lines

    if only:
        code &= span(set(only))
    if exclude:
        code -= span(set(exclude))
    return len(code)


CONVERTER = ("collect", "read_verifiers", "_explain", "_episode_ok", "_episode_error", "_openai", "_action",
             "truncation_kinds", "from_verifiers", "_trace_records", "_prompt", "convert_file", "Collection",
             "_settings")


def adapter_lines() -> int:
    """Our verifiers adapter: the taskset module whole, and the collection driver and converter here."""
    return code_lines(taskset.__file__) + code_lines(__file__, only=CONVERTER)


# ---------------------------------------------------------------------------------------------
# Benchmark


def scripted_records(n: int, *, seed: int = 0, tool: str = "submit", arguments: dict | None = None) -> list[dict]:
    """n embedded tasks whose problem statement opens with a `<tool_call>` block: against the echo backend
    (which answers with the last user message, here the task) every turn makes exactly that call. What tests
    and the benchmark use to drive the substrate deterministically without a model."""
    from composer.env.defences import probes
    from composer.env.embedded import tasks

    block = json.dumps({"name": tool, "arguments": arguments or {}})
    out = []
    for r in probes.rewarded(n, seed=seed, split="test", difficulty=tasks.Difficulty(n_functions=1))[0]:
        out.append({**r, "problem_statement": f"<tool_call>{block}</tool_call>\n" + r["problem_statement"]})
    return out


def verifiers_rollouts_per_s(n_rollouts: int = 8, *, concurrency: int = 4, tool: str = "run_tests",
                             max_steps: int = 4, model_path=None, max_tokens: int = 64) -> float:
    """Rollouts per second through verifiers: serving start (tool server, interception) included, imports and the
    model server's start not. n_rollouts rollouts of scripted_records against the echo backend, each calling
    `tool` every turn until the environment's max_steps ends it (default: 4 sandboxed test runs, about the work
    of 002a's scripted episode): the substrate's own cost per rollout (harness process, interception relay, MCP
    tool server, the environment), no model time. model_path: the tokenizer served (default: the smoke zoo
    student's, whose 8192-token context holds 4 test runs; tiny_model()'s 4096 overflows at the third)."""
    from composer import zoo
    from composer.serve import serve

    records = scripted_records(n_rollouts, tool=tool)
    with tempfile.TemporaryDirectory(prefix="composer-bench-vf-") as tmp, \
            serve(models={"student": model_path or zoo.zoo("smoke")["student"]}, backend="echo") as server:
        result = collect(records, tmp, base_url=server.base_url, model="student", concurrency=concurrency,
                         max_tokens=max_tokens, convert=False, rollout_timeout_s=300, tools={"max_steps": max_steps})
    if result.errored:
        raise RuntimeError(f"{result.errored} of {result.total} benchmark rollouts errored: {result.errors}")
    return result.rollouts_per_s


# ---------------------------------------------------------------------------------------------
# CLI


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer.collection.prime")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="run rollouts with verifiers against an OpenAI-compatible server (resumes)")
    c.add_argument("--records", type=Path, required=True, help="JSONL of SWE-bench-shaped task records")
    c.add_argument("--run-dir", type=Path, required=True)
    c.add_argument("--base-url", required=True)
    c.add_argument("--model", required=True)
    c.add_argument("-n", "--n-rollouts", type=int, default=1)
    c.add_argument("--concurrency", type=int, default=2)
    c.add_argument("--max-tokens", type=int, default=160)
    c.add_argument("--temperature", type=float, default=1.0)
    c.add_argument("--max-turns", type=int, default=20)
    c.add_argument("--rollout-timeout-s", type=float, default=300.0)
    c.add_argument("--tools", default="{}", help="JSON of CodingToolsetConfig fields, e.g. '{\"max_steps\": 8}'")
    t = sub.add_parser("tasks", help="print task records as JSONL (a zoo profile's split), for records_file")
    t.add_argument("--profile", default="report", help="zoo profile whose tasks to print")
    t.add_argument("--split", default="train", choices=("train", "test"))
    t.add_argument("-n", type=int, default=0, help="the first n (0: all)")
    v = sub.add_parser("convert", help="verifiers traces.jsonl -> our traces.jsonl")
    v.add_argument("src", type=Path)
    v.add_argument("dst", type=Path)
    args = parser.parse_args(argv)
    if args.command == "tasks":
        from composer import zoo

        records = zoo.split_tasks(zoo.PROFILES[args.profile], args.split)
        for record in records[: args.n or None]:
            print(json.dumps(record))
        return 0
    if args.command == "convert":
        print(f"{len(convert_file(args.src, args.dst))} records -> {args.dst}")
        return 0
    records = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
    result = collect(records, args.run_dir, base_url=args.base_url, model=args.model, n_rollouts=args.n_rollouts,
                     concurrency=args.concurrency, max_tokens=args.max_tokens, temperature=args.temperature,
                     max_turns=args.max_turns, rollout_timeout_s=args.rollout_timeout_s, tools=json.loads(args.tools))
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in vars(result).items()}))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
