"""Frozen teacher LLMs asked for a next-action distribution at one step of an agent trace.

    from composer import stand_ins, teachers
    specs = [teachers.TeacherSpec(**d) for d in teachers.DEFAULT_TEACHERS]   # Opus 4.7, GPT-5, DeepSeek V4 Pro
    with stand_ins.offline_teachers(specs, time_scale=0.1) as local:        # the simulated stand-ins, or
        ...                                                                 # the specs as they are (live: OpenRouter)
    store = teachers.Store("runs/x/replay.sqlite", cap_usd=20.0)             # resumable cache + ledger + budget guard
    teacher = teachers.Teacher(spec, store, slots=asyncio.Semaphore(32))
    queries = await teacher.answer(step_record, context="full")   # every answer it gives at one step of a trace
    query = await teacher.ask(messages, trace_id=..., step=..., sample=0, student_action=..., context="full")
    # canonical actions and parsing answers: composer.actions

Most callers use composer.replay, which fans out over traces, steps and teachers and writes the records.

A spec's `kind` says how the teacher is asked. This module's Teacher is the "reviewer": shown the trace as a
reviewer and asked a question (below). composer.policy_teachers' PolicyTeacher, a subclass, is the "policy": a
checkpoint prompted as the student is. Both send through Teacher.send: one client, the same cache, ledger and
budget guard (replay.BACKENDS maps a kind to its class).

A spec (params) names the model slug, the base URL, the NAME of the environment variable holding the key (the
key itself never leaves the process: not in params, the cache, records, logs or reports), the OpenRouter
provider pin, sampling and the elicitation mode:

  topk      one call; the teacher lists up to k candidate commands with probabilities as JSON (a JSON schema
            response_format is sent when structured_output; providers that lack it drop it and the parser copes);
            probabilities are renormalized over canonical actions. A malformed answer is a parse failure.
  samples   k calls, one command each (OpenRouter ignores `n`); the distribution is the counts of canonical actions.
  logprobs  k calls with token logprobs; each distinct completion contributes its sequence probability
            exp(sum of token logprobs) to its canonical action, the rest of the mass goes to OTHER. OpenRouter is
            told to require the parameter, so a model without logprobs is refused rather than silently answered.

The spec's action_space says what the traced agent acts with: "bash" (mini-swe-agent's traces: one command a turn,
the questions above) or "tools" (the student's own traces, 002a's and the pilot's: the teacher is shown CodingEnv's
tools and the turns as tool(arguments), and asked for tool calls, {"tool", "arguments", "probability"} candidates or
one {"tool", "arguments"} object), so that a pair's actions are ones the student can take.

Calls go through the openai SDK's AsyncOpenAI and its own retries (408/409/429 honouring Retry-After, 5xx,
timeouts); nothing here retries again. The request body is OpenRouter's dialect (provider routing, usage
accounting, session_id), which the local stand-in server also accepts; a provider's own API would refuse it.

Costs: `usage.cost` when the response carries it, else computed from the token counts with genai-prices' OpenRouter
table; each record says which. The Store is one sqlite file: answered calls keyed by teacher, model, canonical
request body and sample index (a policy's: teacher, revision and body; a rerun re-pays nothing), and a ledger with a
row per HTTP attempt, written at its worst-case price before the attempt is sent and settled from the provider's
accounting after. An error response costs nothing; an attempt abandoned by the client (timeout, dropped connection)
or answered with an unreadable body stays at its worst case, since the provider may have billed it. The budget guard
refuses an attempt when the ledger plus its worst case would pass the cap, so the cap holds even across kills and
resumes. """

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx
import openai
from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer.actions import ParseError, canonical_action, parse_call, parse_command, parse_topk, parse_topk_calls
from composer.prices import computed_cost, guard_prices
from composer.providers import Prices

OPENROUTER = "https://openrouter.ai/api/v1"
OTHER = "<other>"  # the mass a logprobs distribution leaves to actions it did not see
SCHEMA_VERSION = "1.0"
# The three teachers of spike 001, live and offline alike (the notebook's `teachers` parameter repeats them; a test
# checks). expected_output_tokens feed the dry-run projection only: guesses until a live run measures them (GPT-5
# spends most of its own on reasoning).
DEFAULT_TEACHERS = [
    {"name": "opus", "model": "anthropic/claude-opus-4.7", "provider": ["anthropic"], "cache_control": True,
     "expected_output_tokens": 300},
    {"name": "gpt5", "model": "openai/gpt-5", "provider": ["openai"], "reasoning_effort": "low",
     "max_tokens": 4096, "expected_output_tokens": 1000},
    {"name": "deepseek", "model": "deepseek/deepseek-v4-pro", "provider": ["deepseek"],
     "expected_output_tokens": 400},
]
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
STOPS = ("budget", "payment_required")  # error kinds after which a replay sends nothing more
PLACEHOLDER_KEY = "sk-local-unused"  # the local server checks no key


class TeacherSpec(BaseModel):
    """One teacher, as params describe it. `model` doubles as the simulated provider profile's name
    (composer/providers.yaml) whose cache rules the projection uses and which the offline stand-in plays."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    base_url: str = OPENROUTER
    api_key_env: str = Field("OPENROUTER_API_KEY", pattern=r"^[A-Z_][A-Z0-9_]*$")
    provider: list[str] = []
    """OpenRouter provider.order; with fallbacks off, the call fails rather than land on another provider."""
    mode: Literal["topk", "samples", "logprobs"] = "topk"
    k: int = Field(5, ge=1, le=20)
    """Candidates asked for (topk) or calls made (samples, logprobs)."""
    temperature: float | None = None
    max_tokens: int = Field(2048, ge=1)
    """Output cap, reasoning included: also the output side of the budget guard's worst case."""
    reasoning_effort: str | None = None
    structured_output: bool = True
    cache_control: bool = False
    """Anthropic-style explicit cache breakpoints (OpenAI and DeepSeek cache prefixes automatically)."""
    expected_output_tokens: int = Field(300, ge=0)
    timeout_s: float = Field(180.0, gt=0)
    max_retries: int = Field(3, ge=0)
    max_rps: float | None = Field(None, gt=0)
    """Request starts per second to this teacher (None: only the replay's concurrency limit)."""
    action_space: Literal["bash", "tools"] = "bash"
    """What the agent acts with, and so what the teacher proposes: one bash command a turn (mini-swe-agent's
    traces), or one call of CodingEnv's tools a turn (002a's and the pilot's traces: actions 004's student takes)."""
    kind: Literal["reviewer", "policy"] = "reviewer"
    """How the teacher is asked; replay.BACKENDS maps it to the class that asks. "reviewer" (Teacher): shown the
    trace and asked a question in `mode`. "policy" (policy_teachers.PolicyTeacher): prompted as the student is,
    with its chat and its tools (action_space), for k sampled next actions in one request (mode "samples")."""
    revision: str | None = None
    """policy: the weights behind `model` (e.g. a checkpoint's folder name), in the cache key: new weights, new
    answers."""
    max_chars: int | None = Field(None, ge=1)
    """policy: each message of the prompt cut to this many characters, head and tail kept (small contexts)."""

    @model_validator(mode="before")
    @classmethod
    def _policy_samples(cls, data):
        if isinstance(data, dict) and data.get("kind") == "policy":
            return {"mode": "samples", **data}  # what a policy does; topk and logprobs are questions to a reviewer
        return data

    @model_validator(mode="after")
    def _fields_of_its_kind(self):
        if self.kind == "policy" and self.mode != "samples":
            raise ValueError(f"teacher {self.name!r}: a policy teacher samples actions (mode 'samples'), so mode "
                             f"{self.mode!r} cannot be asked of it; use kind 'reviewer' for {self.mode!r}")
        if self.kind == "reviewer" and (self.revision is not None or self.max_chars is not None):
            raise ValueError(f"teacher {self.name!r}: revision and max_chars are settings of a policy teacher "
                             "(kind 'policy'); a reviewer's prompt is cut by the replay's context='window'")
        return self


# ---------------------------------------------------------------------------------------------------------
# Prompts: the trace as the teacher sees it, and the question

TEACHER_SYSTEM = (
    "You are an expert software engineer reviewing the trajectory of a coding agent. The agent works in a shell "
    "to resolve a GitHub issue: each of its turns runs one bash command, and the next message shows the output. "
    "You will see the agent's instructions, its task and its turns so far; then you will be asked what the agent "
    "should do next."
)
AGENT_SYSTEM_HEADER = "\n\n# The agent's system prompt\n\n"
# Neither question contains a JSON object or a code fence: an endpoint that echoes the prompt back (the offline
# stand-in) must produce a parse failure, never a distribution made of our own example.
TOPK_QUESTION = (
    "What should the agent do next? Give the {k} most promising next commands (fewer if fewer make sense), each "
    "one bash command exactly as the agent would run it, with your probability that it is the best next action. "
    "Answer with a single JSON object and nothing else: its key \"candidates\" holds a list of objects with the "
    "keys \"command\" (the bash command, a string) and \"probability\" (a number from 0 to 1); the probabilities "
    "add up to 1."
)
COMMAND_QUESTION = (
    "What should the agent do next? Reply with exactly one bash code block holding the single next command the "
    "agent should run, and nothing else."
)
def _candidates_schema(fields: dict) -> dict:
    """The structured-output schema of a top-k answer: {"candidates": [{fields..., "probability": number}]}."""
    item = {"type": "object", "properties": {**fields, "probability": {"type": "number"}},
            "required": [*fields, "probability"], "additionalProperties": False}
    return {"type": "object", "properties": {"candidates": {"type": "array", "items": item}},
            "required": ["candidates"], "additionalProperties": False}


TOPK_SCHEMA = _candidates_schema({"command": {"type": "string"}})


TOOLS_SYSTEM = (
    "You are an expert software engineer reviewing the trajectory of a coding agent. The agent works in a "
    "repository to resolve a GitHub issue: each of its turns calls one of these tools, and the next message shows "
    "what the tool returned:\n{tools}\nYou will see the agent's instructions, its task and its turns so far (each "
    "call written as tool(arguments)); then you will be asked what the agent should do next."
)
TOOLS_TOPK_QUESTION = (
    "What should the agent do next? Give the {k} most promising next tool calls (fewer if fewer make sense), each "
    "one call of the agent's tools, with your probability that it is the best next action. Answer with a single "
    "JSON object and nothing else: its key \"candidates\" holds a list of objects with the keys \"tool\" (the "
    "tool's name), \"arguments\" (the call's arguments: a JSON object, encoded as a string) and \"probability\" (a "
    "number from 0 to 1); the probabilities add up to 1."
)
TOOL_CALL_QUESTION = (
    "What should the agent do next? Reply with the single next tool call and nothing else: one JSON object with "
    "the keys \"tool\" (the tool's name) and \"arguments\" (an object of its arguments)."
)
TOOLS_TOPK_SCHEMA = _candidates_schema({"tool": {"type": "string"}, "arguments": {"type": "string"}})


def question(spec: TeacherSpec) -> str:
    if spec.action_space == "tools":
        return TOOLS_TOPK_QUESTION.format(k=spec.k) if spec.mode == "topk" else TOOL_CALL_QUESTION
    return TOPK_QUESTION.format(k=spec.k) if spec.mode == "topk" else COMMAND_QUESTION


@functools.cache
def tool_list() -> str:
    """CodingEnv's tools as the teacher reads them: one line each, name(parameters): what it does."""
    from composer.env.environment import tool_schemas  # the environment's own schemas (loads transformers)

    lines = []
    for schema in tool_schemas():
        f = schema["function"]
        lines.append(f"  {f['name']}({', '.join(f['parameters'].get('properties', {}))}): "
                     + f["description"].split("\n")[0])
    return "\n".join(lines)


def history(state_messages: list[dict], action_space: str = "bash") -> list[dict]:
    """The agent's chat as plain text turns: system (our framing + the agent's own), the task, then each agent
    turn with its command in a ```bash block (action_space "bash") or its call as tool(arguments) ("tools"), each
    tool output as a user message. Plain text needs no tool schema, which every provider accepts alike, and it is
    a pure function of the trace, so step t's history is byte for byte a prefix of step t+1's: what prompt caching
    needs."""
    tools = action_space == "tools"
    system = TOOLS_SYSTEM.format(tools=tool_list()) if tools else TEACHER_SYSTEM
    out = []
    for m in state_messages:
        content = m.get("content") or ""
        if m["role"] in ("system", "developer"):
            system += AGENT_SYSTEM_HEADER + content
        elif m["role"] == "assistant":
            blocks = [_tool_text(call) if tools else f"```bash\n{_call_text(call)}\n```"
                      for call in m.get("tool_calls") or []]
            out.append({"role": "assistant", "content": "\n\n".join(([content] if content else []) + blocks)})
        else:  # user and tool messages are what the agent was shown
            out.append({"role": "user", "content": content})
    return [{"role": "system", "content": system}, *out]


def _call_text(call: dict) -> str:
    raw = call["function"]["arguments"]
    try:
        arguments = json.loads(raw)
    except ValueError:
        return raw  # the agent's malformed call, shown as it was
    if isinstance(arguments, dict) and list(arguments) == ["command"]:
        return arguments["command"]
    return f"{call['function']['name']} {raw}"


def _tool_text(call: dict) -> str:
    return f"{call['function']['name']}({call['function']['arguments']})"


def note_stop(stop: list[str], records: list["TeacherQuery"]) -> None:
    """Put the first refused budget or 402 among records in the run's `stop` (once): nothing more is sent."""
    if not stop and (kinds := [q.error_kind for q in records if q.error_kind in STOPS]):
        stop.append(kinds[0])


def context_label(context: str, window: int) -> str:
    """A record's `context`: "full" or "window:K"."""
    return f"window:{window}" if context == "window" else context


def teacher_messages(state_messages: list[dict], spec: TeacherSpec, *, context: str = "full", window: int = 8,
                     cache: bool = True, previous: int | None = None) -> list[dict]:
    """The messages sent to `spec` at one step: history under the context policy, then the question.

    context "full" keeps every turn; "window" keeps what precedes the agent's first turn (system, task) and its
    last `window` turns, with a note saying how many were left out. With cache and spec.cache_control, content
    parts carry Anthropic `cache_control` breakpoints: under "full" at the end of this step's history (written
    now, read by the next queried step) and at the end of the previous queried step's history (`previous`: the
    length of its history(), read now; Anthropic looks only 20 blocks back from a breakpoint, so sampled steps
    need that explicit one); under "window" at the end of the task, the one prefix a sliding window keeps.
    """
    turns = history(state_messages, spec.action_space)
    marks = set()
    if context == "window":
        first = next((i for i, m in enumerate(turns) if m["role"] == "assistant"), len(turns))
        starts = [i for i, m in enumerate(turns) if m["role"] == "assistant"]
        kept = starts[-window:] if window else []
        cut = kept[0] if kept else len(turns)
        dropped = len(starts) - len(kept)
        note = [{"role": "user", "content": f"[{dropped} earlier agent turns omitted]"}] if dropped else []
        turns = turns[:first] + note + turns[cut:]
        marks = {first - 1}
    elif context == "full":
        marks = {len(turns) - 1}
        if previous is not None and 0 < previous <= len(turns):
            marks.add(previous - 1)
    else:
        raise ValueError(f"context must be 'full' or 'window', not {context!r}")
    if cache and spec.cache_control:
        turns = [_mark(m) if i in marks else m for i, m in enumerate(turns)]
    return [*turns, {"role": "user", "content": question(spec)}]


def _mark(message: dict) -> dict:
    part = {"type": "text", "text": message["content"], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": [part]}


def text_of(message: dict) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def request_body(spec: TeacherSpec, messages: list[dict], *, session: str | None = None) -> dict:
    """The chat completion body (OpenRouter's dialect). OpenRouter's response caching stays off: it is opt-in
    (a header or a preset), and on it would hand k samples the same answer."""
    body = {"model": spec.model, "messages": messages, "max_tokens": spec.max_tokens,
            "usage": {"include": True}}  # OpenRouter: put usage.cost in the response
    if spec.temperature is not None:
        body["temperature"] = spec.temperature
    if spec.mode == "logprobs":
        body["logprobs"] = True
    if spec.mode == "topk" and spec.structured_output:
        schema = TOOLS_TOPK_SCHEMA if spec.action_space == "tools" else TOPK_SCHEMA
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "next_actions", "strict": True, "schema": schema}}
    if spec.provider:
        body["provider"] = provider_routing(spec)
    if spec.reasoning_effort:
        body["reasoning"] = {"effort": spec.reasoning_effort}
    if session:
        body["session_id"] = session  # groups one trace's calls (sticky routing when no provider is pinned)
    return body


def provider_routing(spec: TeacherSpec) -> dict:
    """OpenRouter's `provider` field for spec.provider: the pinned providers, and a refusal rather than another.
    Without require_parameters an endpoint lacking logprobs would answer without them, silently."""
    return {"order": spec.provider, "allow_fallbacks": False,
            **({"require_parameters": True} if spec.mode == "logprobs" else {})}


def request_key(spec: TeacherSpec, body: dict, sample: int) -> str:
    """The resumable cache's key: teacher, model, canonical body (sorted keys, compact) and sample index."""
    canonical = json.dumps({"teacher": spec.name, "model": spec.model, "body": body, "sample": sample},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def distribution_of(spec: TeacherSpec, text: str, logprobs: list | None) -> dict[str, float]:
    """The distribution one answer gives: topk's renormalized candidates, a sample's single action, or a
    logprobs sample's action with its sequence probability and OTHER holding the rest."""
    tools = spec.action_space == "tools"
    if spec.mode == "topk":
        return parse_topk_calls(text, spec.k) if tools else parse_topk(text, spec.k)
    action = parse_call(text) if tools else parse_command(text)
    if spec.mode == "samples":
        return {action: 1.0}
    if not logprobs:
        raise ParseError("no token logprobs in the response")
    p = math.exp(sum(token["logprob"] for token in logprobs))
    return {action: p, OTHER: 1.0 - p}


# ---------------------------------------------------------------------------------------------------------
# The budget guard's bound


def worst_case_usd(prices: Prices, messages: list[dict], max_tokens: int) -> float:
    """An upper bound on one attempt's cost. Byte-level BPE tokens each cover at least one byte, so a prompt
    has at most its UTF-8 bytes plus a few template tokens per message (32 is generous); every prompt token is
    priced at the dearest input kind (a cache write costs more than a miss), the output at max_tokens."""
    tokens = sum(len(text_of(m).encode()) + 32 for m in messages) + 64
    dearest = max(prices.input, prices.cache_write or 0.0, prices.cache_read or 0.0)
    return (tokens * dearest + max_tokens * prices.output) / 1e6


# ---------------------------------------------------------------------------------------------------------
# The store: resumable cache, attempt ledger, budget guard


class BudgetExceeded(openai.OpenAIError):
    """The next attempt could pass the cap. An OpenAIError, so the SDK passes it through without retrying."""


class Store:
    """One sqlite file per run directory: `answers` (the resumable cache) and `ledger` (one row per attempt).

    `committed` is the ledger's sum: settled costs plus the worst case of every attempt in flight or never
    accounted for. It starts from the file, so a resumed run keeps counting against the same cap. Committed
    rows survive a killed process (WAL; synchronous=NORMAL loses nothing short of a power cut).
    """

    def __init__(self, path, cap_usd: float):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.cap = cap_usd
        self.run = uuid.uuid4().hex[:12]
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, teacher TEXT, model TEXT, "
                        "sample INTEGER, answer TEXT, created REAL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY, run TEXT, key TEXT, "
                        "attempt INTEGER, status TEXT, usd REAL, worst REAL, at REAL)")
        # A row still "sent" was in flight when an earlier run died: it may have been billed, so it keeps its worst.
        self.db.execute("UPDATE ledger SET status = 'abandoned' WHERE status = 'sent'")
        self.committed = self.db.execute("SELECT COALESCE(SUM(usd), 0) FROM ledger").fetchone()[0]

    def answer(self, key: str) -> dict | None:
        row = self.db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def save(self, key: str, teacher: str, model: str, sample: int, answer: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?)",
                        (key, teacher, model, sample, json.dumps(answer), time.time()))

    def reserve(self, key: str, attempt: int, worst: float) -> int:
        """Commit an attempt at its worst case before it is sent, or raise BudgetExceeded."""
        if self.committed + worst > self.cap + 1e-12:
            raise BudgetExceeded(f"budget cap ${self.cap:.2f} reached: ${self.committed:.4f} committed, "
                                 f"the next attempt could cost up to ${worst:.4f}")
        self.committed += worst
        return self.db.execute("INSERT INTO ledger (run, key, attempt, status, usd, worst, at) VALUES "
                               "(?, ?, ?, 'sent', ?, ?, ?)", (self.run, key, attempt, worst, worst, time.time())
                               ).lastrowid

    def settle(self, row: int, usd: float, status: str) -> None:
        (old,) = self.db.execute("SELECT usd FROM ledger WHERE id = ?", (row,)).fetchone()
        self.committed += usd - old
        self.db.execute("UPDATE ledger SET usd = ?, status = ? WHERE id = ?", (usd, status, row))

    def totals(self) -> dict:
        """Dollars and attempts by ledger status, for this run and for the whole file (every run so far); how many
        runs wrote to the file; and the calls that may have been billed more than once, with the extra dollars
        at most (everything but each call's cheapest attempt)."""
        run = self.db.execute("SELECT status, SUM(usd), COUNT(*) FROM ledger WHERE run = ? GROUP BY status",
                              (self.run,)).fetchall()
        file = self.db.execute("SELECT status, SUM(usd), COUNT(*) FROM ledger GROUP BY status").fetchall()
        # A call paid more than once: attempts of one request key that may each have been billed (an abandoned
        # attempt retried, or answered but killed before its answer was stored and re-sent on resume).
        calls, extra = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(extra), 0) FROM (SELECT key, SUM(usd) - MIN(usd) AS extra FROM ledger "
            "WHERE status IN ('settled', 'unsettled', 'abandoned') GROUP BY key HAVING COUNT(*) > 1)").fetchone()
        return {"committed_usd": self.committed, "cap_usd": self.cap,
                "run": {status: {"usd": usd, "attempts": n} for status, usd, n in run},
                "file": {status: {"usd": usd, "attempts": n} for status, usd, n in file},
                "runs": self.db.execute("SELECT COUNT(DISTINCT run) FROM ledger").fetchone()[0],
                "paid_more_than_once": {"calls": calls, "extra_usd_at_most": extra}}

    def close(self) -> None:
        self.db.close()


# ---------------------------------------------------------------------------------------------------------
# The client


class TeacherQuery(BaseModel):
    """One call to one teacher at one step: one JSON object per line of teacher_queries.jsonl."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal["1.0"] = SCHEMA_VERSION
    trace_id: str
    step: int
    teacher: str
    model: str
    """The slug asked for."""
    model_used: str | None
    """The model the response names (OpenRouter may name a dated snapshot)."""
    provider: str | None
    """The provider that served it, as the response says ("composer-simulated/..." offline)."""
    mode: str
    sample: int
    context: str
    """"full" or "window:K"."""
    cache: bool
    """Whether the prompt was laid out for provider caching (breakpoints, session)."""
    student_action: str | None
    """The trace's own action at this step, canonical."""
    distribution: dict[str, float] | None
    raw_text: str | None
    parse_error: str | None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    """What this answer cost (once, whenever it was first paid)."""
    cost_source: Literal["usage.cost", "genai-prices"] | None = None
    unsettled_usd: float = 0.0
    """Worst-case dollars of this call's attempts that no accounting settled (abandoned, unreadable)."""
    latency_s: float | None = None
    """Wall-clock of the call, SDK retries and their waits included (from the first run for a cached answer)."""
    attempts: int = 0
    error_kind: str | None = None
    error: str | None = None
    cached: bool = False
    """Answered from the store: nothing was sent (or paid) in this run."""
    simulated: bool = False
    """The answer came from the local stand-in server (header x-composer-simulated)."""
    request_key: str


class _Call:
    """The attempts of one logical call, as the httpx hooks see them (found through a context variable)."""

    def __init__(self, key: str, worst: float):
        self.key, self.worst = key, worst
        self.open: list[int] = []  # ledger rows still at their worst case
        self.attempts = 0


@dataclasses.dataclass
class Sent:
    """What one logical call came back with (Teacher.send): the response body, or the error; `usage`: the
    TeacherQuery usage fields (prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens,
    reasoning_tokens, cost_usd, cost_source) of an answer."""

    data: dict | None = None
    error_kind: str | None = None
    error: str | None = None
    usage: dict = dataclasses.field(default_factory=dict)
    unsettled_usd: float = 0.0
    latency_s: float = 0.0
    attempts: int = 0
    simulated: bool = False


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("composer_teacher_call", default=None)


class RateLimiter:
    """At most `rate` starts per second, evenly spaced, shared by every task that awaits it."""

    def __init__(self, rate: float | None):
        self.interval = 1.0 / rate if rate else 0.0
        self.next = 0.0

    async def wait(self) -> None:
        if not self.interval:
            return
        now = time.monotonic()
        at = max(now, self.next)
        self.next = at + self.interval
        if at > now:
            await asyncio.sleep(at - now)


def api_key(spec: TeacherSpec) -> str:
    """The key from the spec's variable. The OpenRouter key goes to OpenRouter only (a spec pointed at a local
    server keeps the default variable): on loopback an endpoint without a key of its own gets a placeholder."""
    key = os.environ.get(spec.api_key_env)
    elsewhere = spec.api_key_env == "OPENROUTER_API_KEY" and spec.base_url.rstrip("/") != OPENROUTER
    if key and not elsewhere:
        return key
    if urlsplit(spec.base_url).hostname in LOOPBACK:
        return PLACEHOLDER_KEY
    if elsewhere:
        raise RuntimeError(f"teacher {spec.name!r}: OPENROUTER_API_KEY is sent to OpenRouter only; name the "
                           f"variable holding the key for {spec.base_url} in api_key_env")
    raise RuntimeError(f"teacher {spec.name!r}: set {spec.api_key_env} in the environment (the key for "
                       f"{spec.base_url}); params only ever name the variable")


# What providers put in place of the hidden middle of a key they echo: an ellipsis, dots, or a run of asterisks.
_MASKED = re.compile(r"([A-Za-z0-9_-]*)(\.{3,}|…|\*{3,}|•{3,})([A-Za-z0-9_-]*)")


def redact(text: str | None, key: str) -> str | None:
    """`text` with the key and any echoed fragment of it replaced: the whole key anywhere, and a prefix or suffix of
    at least 4 characters next to a mask (a 401 may say "Incorrect API key provided: sk-or-v1-abc1…wxyz")."""
    if not text or not key:
        return text

    def fragments(m: re.Match) -> str:
        before, mask, after = m.groups()
        before = "[redacted]" if len(before) >= 4 and key.startswith(before) else before
        after = "[redacted]" if len(after) >= 4 and key.endswith(after) else after
        return before + mask + after

    return _MASKED.sub(fragments, text.replace(key, "[redacted]"))


class Teacher:
    """One spec's AsyncOpenAI client, with the store's cache, ledger and budget guard around every attempt (send),
    asking as a reviewer (answer, ask); replay.StepTeacher. Subclasses ask another way through the same send."""

    def __init__(self, spec: TeacherSpec, store: Store, *, slots: asyncio.Semaphore | None = None,
                 prices: Prices | None = None):
        self.spec, self.store = spec, store
        self.slots = slots or asyncio.Semaphore(64)
        self.limiter = RateLimiter(spec.max_rps)
        self.prices = prices or endpoint_prices(spec)  # the budget guard's
        self._key = api_key(spec)  # kept only here and in the client: redacted from anything recorded
        hooks = {"request": [self._on_request], "response": [self._on_response]}
        self.client = openai.AsyncOpenAI(base_url=spec.base_url, api_key=self._key, max_retries=spec.max_retries,
                                         timeout=spec.timeout_s,
                                         http_client=openai.DefaultAsyncHttpxClient(event_hooks=hooks))

    async def _on_request(self, request) -> None:
        call = _CALL.get()
        if call is None:
            return
        call.open.append(self.store.reserve(call.key, call.attempts, call.worst))  # raises BudgetExceeded
        call.attempts += 1

    async def _on_response(self, response) -> None:
        call = _CALL.get()
        if call is not None and response.status_code != 200:
            # An error response generated nothing, and providers bill none (a 200's row waits for its usage).
            self.store.settle(call.open.pop(), 0.0, f"http {response.status_code}")

    def redacted(self, text: str | None) -> str | None:
        return redact(text, self._key)

    messages = staticmethod(teacher_messages)  # what this kind of teacher is shown (replay.project prices it)

    async def answer(self, record, *, context: str = "full", window: int = 8, cache: bool = True,
                     previous: int | None = None, seed: int = 0, stop: list[str] | None = None) -> list[TeacherQuery]:
        """Every answer this teacher gives at one step of a trace (replay.StepTeacher): the question under
        `context`, asked once (topk) or k times, the first alone so that the others read the prompt it cached.
        `stop`, the run's: a refused budget or a 402 is noted there, and nothing more is sent once it holds one.
        `previous`: the length of the last queried step's history (its cache breakpoint); `seed` is unused
        (providers' sampling is not seeded)."""
        stop = [] if stop is None else stop
        messages = teacher_messages(record.state.messages, self.spec, context=context, window=window, cache=cache,
                                    previous=previous)
        kwargs = dict(trace_id=record.trace_id, step=record.step, student_action=canonical_action(record.action),
                      context=context_label(context, window), cache=cache,
                      session=f"composer-replay-{record.trace_id}" if cache else None)
        out: list[TeacherQuery] = []
        for batch in [[0], range(1, 1 if self.spec.mode == "topk" else self.spec.k)]:
            if stop:
                break
            answers = await asyncio.gather(*(self.ask(messages, sample=i, **kwargs) for i in batch))
            note_stop(stop, answers)
            out += answers
        return out

    async def ask(self, messages: list[dict], *, trace_id: str, step: int, sample: int = 0,
                  student_action: str | None = None, context: str = "full", cache: bool = True,
                  session: str | None = None) -> TeacherQuery:
        """One call (or its stored answer) -> a TeacherQuery. Never raises for what the endpoint does: errors,
        timeouts, a refused budget and unparseable answers all come back as records saying so."""
        spec = self.spec
        body = request_body(spec, messages, session=session)
        key = request_key(spec, body, sample)
        base = dict(trace_id=trace_id, step=step, teacher=spec.name, model=spec.model, mode=spec.mode,
                    sample=sample, context=context, cache=cache, student_action=student_action, request_key=key)
        stored = self.store.answer(key)
        if stored is not None:
            return TeacherQuery(**base, **stored, cached=True)
        sent = await self.send(body, key, worst_case_usd(self.prices, messages, spec.max_tokens))
        record = self._record(base, sent)
        if record.error_kind is None:
            self.store.save(key, spec.name, spec.model, sample, record.model_dump(
                exclude=set(base) | {"cached"}))
        return record

    async def send(self, body: dict, key: str, worst: float) -> "Sent":
        """One logical call of `body` (the SDK's retries inside it) under the store's ledger and budget guard,
        its cost settled: what came back, or the failure, classified. No cache lookup (callers keep their own)."""
        await self.limiter.wait()
        async with self.slots:
            call = _Call(key, worst)
            token = _CALL.set(call)
            start = time.perf_counter()
            data, headers, failure = None, {}, None
            try:
                # The client's own request path (retries, timeouts, error types) with the body as built: the typed
                # chat.completions.create would re-walk every message through its TypedDicts, which on long
                # histories costs more CPU than everything else here together.
                response = await self.client.post("/chat/completions", body=body, cast_to=httpx.Response)
                headers = response.headers
                data = response.json()
            except Exception as e:  # classified below; anything else is a bug and re-raised
                failure = e
            finally:
                _CALL.reset(token)
            latency = time.perf_counter() - start
        return self._settle(call, data, headers, failure, latency)

    def _settle(self, call: _Call, data, headers, failure, latency: float) -> "Sent":
        spec = self.spec
        sent = Sent(latency_s=latency, simulated=headers.get("x-composer-simulated") == "true")
        if failure is not None:
            sent.error_kind, message = classify(failure)
        elif not isinstance(data, dict) or "error" in data or not data.get("choices"):
            # OpenRouter can answer 200 with an error object when the provider fails after routing.
            sent.error_kind, message = "provider_error", json.dumps(data)[:500]
        if sent.error_kind is not None:
            if sent.error_kind == "malformed" and call.open:  # a 200 whose body we could not read: maybe billed
                self.store.settle(call.open.pop(), call.worst, "unsettled")
                sent.unsettled_usd = call.worst
            sent.unsettled_usd += self._abandon(call)
            sent.error, sent.attempts = self.redacted(message), call.attempts
            return sent
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        sent.data = data
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        counts = sent.usage = {"prompt_tokens": usage.get("prompt_tokens"),
                               "cached_tokens": details.get("cached_tokens") or 0,
                               "cache_write_tokens": details.get("cache_write_tokens") or 0,
                               "completion_tokens": usage.get("completion_tokens"), "reasoning_tokens": reasoning}
        cost, source = usage.get("cost"), "usage.cost"
        if not isinstance(cost, (int, float)) or isinstance(cost, bool):
            cost, source = None, None
            with contextlib.suppress(Exception):  # an unknown model or missing counts: stays unsettled
                cost = computed_cost(data.get("model") or spec.model, counts["prompt_tokens"], counts["cached_tokens"],
                                     counts["cache_write_tokens"], counts["completion_tokens"])
                source = "genai-prices"
        if cost is not None:
            self.store.settle(call.open.pop(), float(cost), "settled")
            counts.update(cost_usd=float(cost), cost_source=source)
        else:  # no usage.cost and no table price: the answer stays at its worst case
            self.store.settle(call.open.pop(), call.worst, "unsettled")
            sent.unsettled_usd = call.worst
        sent.unsettled_usd += self._abandon(call)
        sent.attempts = call.attempts
        return sent

    def _record(self, base: dict, sent: "Sent") -> TeacherQuery:
        common = dict(unsettled_usd=sent.unsettled_usd, latency_s=sent.latency_s, attempts=sent.attempts,
                      simulated=sent.simulated)
        if sent.error_kind is not None:
            return TeacherQuery(**base, model_used=None, provider=None, distribution=None, raw_text=None,
                                parse_error=None, error_kind=sent.error_kind, error=sent.error, **common)
        data = sent.data
        choice = data["choices"][0]
        text = (choice.get("message") or {}).get("content") or ""
        logprobs = (choice.get("logprobs") or {}).get("content")
        distribution = parse_error = None
        try:
            distribution = distribution_of(self.spec, text, logprobs)
        except ParseError as e:
            parse_error = str(e)
        return TeacherQuery(**base, model_used=data.get("model"), provider=data.get("provider"),
                            distribution=distribution, raw_text=self.redacted(text), parse_error=parse_error,
                            **sent.usage, **common)

    def _abandon(self, call: _Call) -> float:
        """Attempts left open got no answer we could read (timeouts, dropped connections): the provider may
        have billed them, so they stay at their worst case."""
        for row in call.open:
            self.store.settle(row, call.worst, "abandoned")
        unsettled = call.worst * len(call.open)
        call.open.clear()
        return unsettled

    async def close(self) -> None:
        await self.client.close()


def endpoint_prices(spec: TeacherSpec) -> Prices:
    """The budget guard's prices for spec's endpoint: its model's (composer.prices.guard_prices); $0 for a model no
    table knows on a loopback endpoint (a local server bills nothing); elsewhere LookupError (no cap could hold)."""
    try:
        return guard_prices(spec.model)
    except LookupError:
        if urlsplit(spec.base_url).hostname in LOOPBACK:
            return Prices(input=0.0, output=0.0, cache_read=0.0, cache_write=0.0)
        raise


def classify(e: Exception) -> tuple[str, str]:
    if isinstance(e, BudgetExceeded):
        return "budget", str(e)
    if isinstance(e, openai.APIStatusError):
        kinds = {402: "payment_required", 429: "rate_limit", 400: "bad_request", 401: "auth", 403: "auth",
                 404: "not_found", 408: "timeout"}
        kind = kinds.get(e.status_code, "server_error" if e.status_code >= 500 else f"http_{e.status_code}")
        return kind, f"HTTP {e.status_code}: {e.message}"[:500]
    if isinstance(e, openai.APITimeoutError):
        return "timeout", "no response within the timeout, after the SDK's retries"
    if isinstance(e, openai.APIConnectionError):
        return "connection", f"{e.message}: {e.__cause__!r}"[:500]
    if isinstance(e, ValueError):  # json.JSONDecodeError: a 200 whose body is not JSON
        return "malformed", f"unreadable response body: {e}"[:500]
    raise e
