"""Agent traces on disk: one validated JSON object per step, in JSONL files that survive crashes.

Usage::

    from composer import traces

    with traces.TraceWriter("runs/x/traces.jsonl") as w:     # appends; after a crash it resumes
        w.write(traces.StepRecord(schema_version=traces.SCHEMA_VERSION, trace_id="t0", step=0, ...))
    w.repaired                                               # None, or "file:line: what was repaired"

    records = list(traces.read_traces(path))                 # a bad line raises TraceError("file:line: why")
    reader = traces.read_traces(path, on_error="collect")    # or keep the good lines...
    good = list(reader); reader.problems                     # ...and list the bad ones
    by_trace = traces.group_traces(records)                  # {trace_id: [step 0, 1, ...]}, contiguity checked

    real = traces.import_real_traces()                       # the 23 shipped mini-swe-agent trajectories
    records = traces.load_traces("runs/x/traces.jsonl")        # any source: "real", a run folder, a .traj.json,
    records.skipped, records.sha256                          # a JSONL; what was left out and a content hash
    one = traces.import_mini_swe_agent(Path("x.traj.json"), resolved=True)
    traces.export_json_schema()                              # regenerates composer/schemas/trace.schema.json

Every spike passes traces as these files: 002a/002b collect them, 001 replays each step to
teachers, 003 mines DPO pairs from them. Each step is self-contained: `state.messages` is the
whole chat the policy saw, so any step can be replayed on its own. That makes files grow with
the square of the trace length; the 23 real traces (1843 steps) take 154 MB as JSONL, which is
fine at this scale (see `TraceWriter` for why we keep it that way).

The pydantic models are the authority on the format; the exported JSON Schema describes the
same fields for readers outside Python, but cannot express two rules the models enforce:
numbers must be finite, and the per-token arrays of an action must have equal lengths.
"""

import hashlib
import json
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from composer.paths import ROOT

SCHEMA_VERSION = "1.0"
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "trace.schema.json"
MINI_SWE_AGENT_RUN = "mini-swe-agent-deepseek-chat-lite-dev"  # the shipped run under real_traces_dir()
# mini-swe-agent exit statuses meaning "stopped by a step/cost/time/context limit" rather than
# "submitted" or "crashed": the trace is cut short, not finished (gym's `truncated`).
LIMIT_EXIT_STATUSES = frozenset({"LimitsExceeded", "TimeExceeded", "TimeoutExpired", "ContextWindowExceeded"})


def real_traces_dir() -> Path:
    """`data/real-traces` in the repository: the shipped real traces (MIT; provenance in its README.md)."""
    return ROOT / "data" / "real-traces"


class TraceError(ValueError):
    """A trace file or record that breaks the format; str() starts with `file:line:` when known."""

    def __init__(self, reason: str, path=None, lineno: int | None = None):
        self.reason, self.path, self.lineno = reason, path, lineno
        where = f"{path}:{lineno}: " if lineno is not None else f"{path}: " if path is not None else ""
        super().__init__(where + reason)


# ---------------------------------------------------------------------------------------------
# The record

# strict: a "3" where an int belongs is schema drift in some exporter, not something to coerce.
# ser_json_inf_nan="constants": a NaN that slips into a model after validation is written as NaN
# and then rejected by the re-validation in TraceWriter.write, instead of turning into a null.
_CONFIG = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, ser_json_inf_nan="constants")
_Finite = Annotated[float, Field(allow_inf_nan=False)]  # JSON has no NaN/inf


class ToolCall(BaseModel):
    """A parsed tool call (the OpenAI `function` object with its arguments decoded)."""

    model_config = _CONFIG
    name: str
    arguments: dict
    """The decoded JSON arguments, e.g. {"command": "ls"} for mini-swe-agent's bash tool."""
    id: str | None = None
    """The call id that the answering tool message names in `tool_call_id`."""


class Action(BaseModel):
    """What the policy emitted at step t."""

    model_config = _CONFIG
    text: str
    """The raw completion. Sources that keep tool calls only as structured data get them rendered
    after the content as Qwen3/Hermes `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`,
    the text our Qwen3 students emit."""
    tool_call: ToolCall | None = None
    token_ids: list[int] | None = None
    """Sampled token ids, when the substrate exposes them."""
    logprobs: list[_Finite] | None = None
    """Sampling log-probability of each token in token_ids."""
    mask: list[int] | None = None
    """Per-token loss mask aligned with token_ids (1 = trained on)."""

    @model_validator(mode="after")
    def _per_token_arrays_align(self):
        # They come from one sampler call; unequal lengths mean an exporter dropped or padded tokens.
        lengths = {k: len(v) for k in ("token_ids", "logprobs", "mask") if (v := getattr(self, k)) is not None}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"per-token arrays differ in length: {lengths}")
        return self


class State(BaseModel):
    """What the policy saw before acting at step t."""

    model_config = _CONFIG
    messages: list[dict]
    """The chat visible to the policy, OpenAI format: role, content, optional tool_calls / tool_call_id."""
    env: dict = {}
    """A summary of environment state beyond the chat (substrate-specific; may be empty)."""


class StepRecord(BaseModel):
    """One step of one agent trace: one JSON object per line of a traces JSONL file."""

    model_config = _CONFIG
    schema_version: Literal["1.0"]
    trace_id: str = Field(min_length=1)
    """Identifies one rollout/episode; unique within a file."""
    step: int = Field(ge=0)
    """0, 1, ... within the trace."""
    state: State
    action: Action
    observation: str | None
    """What the environment returned after the action (None when nothing came back, e.g. the episode ended)."""
    reward: _Finite | None
    """Reward for this step (None where the substrate gives none, typically all but the last step)."""
    done: bool
    """The episode ended at this step (for whatever reason)."""
    truncated: bool
    """The episode was cut short by a limit (steps, cost, time, context) rather than finishing."""
    error: str | None = None
    """What went wrong executing this step or ending the run, if anything."""
    source: str
    """Who produced the trace: "mini-swe-agent", "composer-embedded", "trl", "verifiers", "openenv", ..."""
    task_id: str | None = None
    outcome: dict | None = None
    """Episode result, on the last step: e.g. {"resolved": true, "exit_status": "Submitted"} or a final reward."""
    meta: dict = {}
    """Substrate-specific provenance: model, training step, group, seed, cost, ..."""


def export_json_schema(path=None) -> dict:
    """Write StepRecord's JSON Schema (default: composer/schemas/trace.schema.json) and return it."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **StepRecord.model_json_schema()}
    path = Path(path) if path is not None else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return schema


def _short(value, width=60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _explain(err: ValidationError, obj) -> str:
    """One line saying why `obj` is not a StepRecord, in the terms of whoever wrote the exporter."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    if "schema_version" in obj and obj["schema_version"] != SCHEMA_VERSION:
        # Checked before the field errors: a newer record fails on many fields, the version is the news.
        return f"unsupported schema_version {obj['schema_version']!r} (this reader supports {SCHEMA_VERSION!r})"
    parts = []
    for e in err.errors(include_url=False):
        loc = ".".join(map(str, e["loc"])) or "record"
        got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {_short(e['input'])})"
        parts.append(f"{loc}: {e['msg']}{got}")
    return "; ".join(parts)


def _parse_line(line: bytes) -> StepRecord:
    """Validate one JSONL line, or raise ValueError with a one-line reason."""
    if not line.strip():
        raise ValueError("empty line")
    try:
        return StepRecord.model_validate_json(line)  # the fast path: pydantic parses and validates in one go
    except ValidationError as e:
        err = e
    try:  # only bad lines get here: parse again to say why
        obj = json.loads(line)
    except ValueError as e:
        raise ValueError(f"invalid JSON: {e}") from None
    raise ValueError(_explain(err, obj))


def _to_line(record: "StepRecord | dict") -> bytes:
    if isinstance(record, dict):
        try:
            record = StepRecord.model_validate(record)
        except ValidationError as e:
            raise ValueError(_explain(e, record)) from None
    elif not isinstance(record, StepRecord):
        raise ValueError(f"expected a StepRecord or dict, got {type(record).__name__}")
    line = record.model_dump_json().encode()
    _parse_line(line)  # validate exactly what lands on disk: a model mutated after construction is caught here
    return line


# ---------------------------------------------------------------------------------------------
# Writing and reading


class TraceWriter:
    """Appends validated records to a JSONL file, one line each, flushed and fsynced per record.

    A crash can therefore tear at most the line being written. Opening with resume=True (the default)
    repairs such a tail: a torn last line (invalid JSON) is truncated away, a complete last record that
    lacks its newline gets one. Either way `repaired` says what happened, with file and line, and a
    warning is issued; it is None when the file was clean. resume=False starts the file afresh.

    One writer per file. Records are self-contained (the full chat in every step) on purpose: a
    compact form whose steps reference earlier ones would make a torn or dropped line corrupt every
    later step of its trace, and every reader reassemble states; at 154 MB for 1843 real steps the
    plain form costs nothing that matters. If files get large, compress them (zstd --long sees the
    repeated prefixes) rather than change the format.
    """

    def __init__(self, path, *, resume: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = _repair_tail(self.path) if resume and self.path.exists() else None
        if self.repaired:
            warnings.warn(self.repaired, stacklevel=2)
        self._file = open(self.path, "ab" if resume else "wb")

    def write(self, record: "StepRecord | dict"):
        """Validate `record` and append it as one line; raises TraceError (nothing written) if invalid."""
        try:
            line = _to_line(record)
        except ValueError as e:
            raise TraceError(f"record not written: {e}", self.path) from None
        self._file.write(line + b"\n")  # one write, newline last: a crash leaves a line without its newline
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _repair_tail(path: Path) -> str | None:
    """Make the file end in a complete line; return what was done, or None if it already did."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        start = _last_line_start(f, size)
        f.seek(start)
        tail = f.read()
        try:
            whole = isinstance(json.loads(tail), dict)
        except ValueError:  # includes invalid UTF-8 (zeros or garbage left by a crash)
            whole = False
        if whole and tail.endswith(b"\n"):
            return None
        lineno = _count_newlines(f, start) + 1
        if whole:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            message = f"{path}:{lineno}: the last record had no trailing newline; appended one (nothing lost)"
        else:
            f.truncate(start)
            message = (f"{path}:{lineno}: truncated a torn last line ({len(tail)} bytes, not valid JSON) "
                       "left by an interrupted write")
        f.flush()
        os.fsync(f.fileno())
        return message


def _last_line_start(f, size: int, chunk: int = 1 << 16) -> int:
    """Offset of the last line's first byte (a trailing newline belongs to the last line)."""
    end = size - 1
    while end > 0:
        begin = max(0, end - chunk)
        f.seek(begin)
        i = f.read(end - begin).rfind(b"\n")
        if i >= 0:
            return begin + i + 1
        end = begin
    return 0


def _count_newlines(f, end: int, chunk: int = 1 << 20) -> int:
    f.seek(0)
    count, pos = 0, 0
    while pos < end:
        block = f.read(min(chunk, end - pos))
        count += block.count(b"\n")
        pos += len(block)
    return count


class TraceReader:
    """Iterates over the validated StepRecords of one JSONL file, in file order.

    on_error="raise" raises TraceError("file:line: reason") at the first bad line; "collect" skips
    bad lines and appends their TraceErrors to `problems` (complete once iteration has finished).
    """

    def __init__(self, path, *, on_error: Literal["raise", "collect"] = "raise"):
        if on_error not in ("raise", "collect"):
            raise ValueError(f"on_error must be 'raise' or 'collect', not {on_error!r}")
        self.path, self.on_error = Path(path), on_error
        if not self.path.is_file():
            raise FileNotFoundError(f"no trace file at {self.path}")
        self.problems: list[TraceError] = []
        self._records = self._read()

    def __iter__(self):
        return self

    def __next__(self) -> StepRecord:
        return next(self._records)

    def _read(self) -> Iterator[StepRecord]:
        with open(self.path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    yield _parse_line(line)
                except ValueError as e:
                    reason = str(e)
                    if not line.endswith(b"\n"):  # only the last line can lack it
                        reason = (f"torn last line (no trailing newline; {reason}): a write was interrupted; "
                                  "TraceWriter(resume=True) truncates it")
                    problem = TraceError(reason, self.path, lineno)
                    if self.on_error == "raise":
                        raise problem from None
                    self.problems.append(problem)


def read_traces(path, *, on_error: Literal["raise", "collect"] = "raise") -> TraceReader:
    """Validated records of a JSONL trace file; see TraceReader for on_error and `.problems`."""
    return TraceReader(path, on_error=on_error)


def import_jsonl(path) -> list[StepRecord]:
    """All records of one of our own JSONL trace files (raises TraceError on the first bad line)."""
    return list(read_traces(path))


class TraceGroups(dict):
    """{trace_id: [StepRecord sorted by step]}, plus `problems`: the traces that group_traces dropped."""

    def __init__(self):
        super().__init__()
        self.problems: list[TraceError] = []


def group_traces(records: Iterable[StepRecord], *, on_error: Literal["raise", "collect"] = "raise") -> TraceGroups:
    """Group records by trace_id, sort each trace by step, and check it: steps are exactly 0..n-1 and
    only the last may be done. A broken trace raises TraceError, or with on_error="collect" is left out
    and listed in the result's `problems`."""
    if on_error not in ("raise", "collect"):
        raise ValueError(f"on_error must be 'raise' or 'collect', not {on_error!r}")
    by_id: dict[str, list[StepRecord]] = {}
    for record in records:
        by_id.setdefault(record.trace_id, []).append(record)
    groups = TraceGroups()
    for trace_id, steps in by_id.items():
        steps.sort(key=lambda r: r.step)
        reason = _trace_problem(steps)
        if reason is None:
            groups[trace_id] = steps
        elif on_error == "raise":
            raise TraceError(f"trace {trace_id!r}: {reason}")
        else:
            groups.problems.append(TraceError(f"trace {trace_id!r}: {reason}"))
    return groups


def _trace_problem(steps: list[StepRecord]) -> str | None:
    ids = [r.step for r in steps]
    if ids != list(range(len(ids))):
        missing = sorted(set(range(len(ids))) - set(ids))
        duplicated = sorted(i for i, n in Counter(ids).items() if n > 1)
        return f"steps are not 0..{len(ids) - 1}: missing {_short(missing)}, duplicated {_short(duplicated)}"
    early = [r.step for r in steps[:-1] if r.done]
    if early:
        return f"done at step {early[0]} but the trace continues to step {ids[-1]}"
    return None


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The state's chat in a form datasets stores and chat templates read: roles, string content, tool calls
    with their arguments as JSON strings, tool_call_id / name where present."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        msg = {"role": m["role"], "content": content or ""}
        if m.get("tool_calls"):
            msg["tool_calls"] = [{"id": c.get("id") or "", "type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"] if isinstance(c["function"]["arguments"], str)
                else json.dumps(c["function"]["arguments"], ensure_ascii=False)}} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def preview(record: StepRecord, *, chars: int = 160, tokens: int = 24) -> dict:
    """A record as a report shows it: long messages cut to `chars` characters and per-token arrays to `tokens`
    entries, each cut saying how much was left out (a rollout's token ids would otherwise fill pages)."""
    out = json.loads(record.model_dump_json())
    for m in out["state"]["messages"]:
        if isinstance(m.get("content"), str) and len(m["content"]) > chars:
            m["content"] = m["content"][:chars] + f" ... [{len(m['content']) - chars} more characters]"
    for key in ("token_ids", "mask", "logprobs"):
        values = out["action"].get(key)
        if values and len(values) > tokens:
            out["action"][key] = values[:tokens] + [f"... [{len(values) - tokens} more]"]
    return out


# ---------------------------------------------------------------------------------------------
# Importers


def import_mini_swe_agent(path: Path, *, resolved: bool | None = None) -> list[StepRecord]:
    """One mini-swe-agent `.traj.json` (trajectory_format mini-swe-agent-1.1) -> one record per assistant turn.

    The file holds `messages`: system, user (task), then assistant turns each answered by tool
    messages (`<returncode>`/`<output>`) or a user message (format errors, timeouts), and a final
    `exit` message (the scaffold's bookkeeping: exit status and submitted patch, never shown to the
    model). Step t: state = the OpenAI-format chat before the t-th assistant message; action = that
    message (content + its one tool call); observation = the messages answering it; error = the
    exception the command raised, if any. The last step is done, truncated if the run hit a limit,
    and carries outcome {"resolved", "exit_status", "submission"} and reward float(resolved) when
    `resolved` (from the SWE-bench harness, not in the file) is given.
    """
    path = Path(path)
    try:
        traj = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise TraceError(f"not a JSON trajectory ({e})" if path.stat().st_size else "an empty file", path) from None
    if not isinstance(traj, dict) or traj.get("trajectory_format") != "mini-swe-agent-1.1":
        found = traj.get("trajectory_format") if isinstance(traj, dict) else type(traj).__name__
        raise TraceError(f"unsupported trajectory_format {found!r} (this importer reads 'mini-swe-agent-1.1')", path)
    try:
        return _mini_swe_records(traj, path, resolved)
    except (KeyError, TypeError, IndexError) as e:
        raise TraceError(f"a mini-swe-agent-1.1 field is missing or malformed ({type(e).__name__}: {e})", path) from None


def _mini_swe_records(traj: dict, path: Path, resolved: bool | None) -> list[StepRecord]:
    info = traj["info"]
    task_id = traj.get("instance_id") or path.name.removesuffix(".traj.json")
    exit_status = info["exit_status"]
    chat = [m for m in traj["messages"] if m["role"] != "exit"]
    turns = [i for i, m in enumerate(chat) if m["role"] == "assistant"]
    if not turns:
        raise TraceError("no assistant turns", path)
    visible = [_openai_message(m) for m in chat]
    run_meta = {
        "model": info["config"]["model"]["model_name"],
        "instance_cost": info["model_stats"]["instance_cost"],
        "api_calls": info["model_stats"]["api_calls"],
        "mini_version": info.get("mini_version"),
    }
    records = []
    for t, i in enumerate(turns):
        last = t == len(turns) - 1
        reply = chat[i]
        answers = chat[i + 1 : len(chat) if last else turns[t + 1]]
        errors = [m["extra"]["exception_info"] for m in answers if (m.get("extra") or {}).get("exception_info")]
        if last and exit_status != "Submitted" and exit_status not in LIMIT_EXIT_STATUSES:
            errors.append(f"the run ended with exit status {exit_status}")
        extra = reply.get("extra") or {}
        records.append(StepRecord(
            schema_version=SCHEMA_VERSION,
            trace_id=task_id,
            step=t,
            state=State(messages=visible[:i]),
            action=_mini_swe_action(reply, path, t),
            observation="\n".join(m["content"] for m in answers) if answers else None,
            reward=float(resolved) if last and resolved is not None else None,
            done=last,
            truncated=last and exit_status in LIMIT_EXIT_STATUSES,
            error="\n".join(errors) or None,
            source="mini-swe-agent",
            task_id=task_id,
            outcome={"resolved": resolved, "exit_status": exit_status, "submission": info.get("submission")}
            if last else None,
            # cost and usage of this very call: what 001 compares teacher replay costs against
            meta={**run_meta, "cost": extra.get("cost"), "usage": (extra.get("response") or {}).get("usage")},
        ))
    return records


def _openai_message(m: dict) -> dict:
    """Keep what a chat API accepts; drop mini-swe-agent's `extra` (raw responses, timestamps) and nulls."""
    out = {"role": m["role"], "content": m["content"]}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
            for c in m["tool_calls"]
        ]
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def _mini_swe_action(reply: dict, path: Path, step: int) -> Action:
    calls = reply.get("tool_calls") or []
    actions = (reply.get("extra") or {}).get("actions") or []
    if len(calls) > 1 or len(actions) > 1:
        n = max(len(calls), len(actions))
        raise TraceError(f"assistant turn {step} has {n} tool calls; a StepRecord holds one action", path)
    text = reply.get("content") or ""
    if calls:
        name, raw = calls[0]["function"]["name"], calls[0]["function"]["arguments"]
        text += ("\n" if text else "") + f'<tool_call>\n{{"name": "{name}", "arguments": {raw}}}\n</tool_call>'
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = None
        # Malformed arguments were a format error for the scaffold too: no tool call, the text keeps them.
        tool_call = None
        if isinstance(arguments, dict):
            tool_call = ToolCall(name=name, arguments=arguments, id=calls[0].get("id"))
    elif actions:  # text-based configs: the command is in a ```bash block that mini-swe-agent parsed into actions
        command, call_id = actions[0]["command"], actions[0].get("tool_call_id")
        tool_call = ToolCall(name="bash", arguments={"command": command}, id=call_id)
    else:
        tool_call = None
    return Action(text=text, tool_call=tool_call)


class Imported(list):
    """StepRecords from a traces source, with what was left out (`skipped`: {file, or file:line: reason}), the
    sha256 of every file read in order (`sha256`: which traces a report used), and whether outcomes come from a
    SWE-bench harness report (`outcomes_known`)."""

    def __init__(self, records=(), *, skipped=None, sha256: str = "", outcomes_known: bool = True):
        super().__init__(records)
        self.skipped: dict[str, str] = skipped or {}
        self.sha256, self.outcomes_known = sha256, outcomes_known


def _sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def import_real_traces(directory=None) -> Imported:
    """A mini-swe-agent run folder (default: the shipped one, real_traces_dir()/MINI_SWE_AGENT_RUN): every
    `.traj.json` in it or one level down (mini-swe-agent's own layout is <run>/<id>/<id>.traj.json), in file-name
    order, one trace each, with `resolved` from the folder's SWE-bench harness report (swebench-eval-report.json)
    when it has one, else unknown (None). A file that cannot be imported, or whose exit status disagrees with the
    run's exit_statuses_*.yaml, is skipped and named in `skipped`; a folder with nothing importable raises."""
    directory = Path(directory) if directory is not None else real_traces_dir() / MINI_SWE_AGENT_RUN
    if not directory.is_dir():
        raise FileNotFoundError(f"real traces not found at {directory}: no such folder (the repository ships them in "
                                f"data/real-traces/{MINI_SWE_AGENT_RUN}; pass another run's folder)")
    files = sorted([*directory.glob("*.traj.json"), *directory.glob("*/*.traj.json")], key=lambda p: p.name)
    report_path = directory / "swebench-eval-report.json"
    resolved_ids = unresolved_ids = set()
    if report_path.exists():
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
            resolved_ids, unresolved_ids = set(report["resolved_ids"]), set(report["unresolved_ids"])
        except (ValueError, KeyError, TypeError) as e:
            raise TraceError(f"not a SWE-bench harness report ({type(e).__name__}: {e})", report_path) from None
    statuses = _exit_statuses(directory)
    out = Imported(sha256=_sha256(files + ([report_path] if report_path.exists() else [])),
                   outcomes_known=report_path.exists())
    for path in files:
        task_id = path.name.removesuffix(".traj.json")
        resolved = True if task_id in resolved_ids else False if task_id in unresolved_ids else None
        try:
            steps = import_mini_swe_agent(path, resolved=resolved)
            own = steps[-1].outcome["exit_status"]
            if statuses.get(task_id, own) != own:
                raise TraceError(f"exit status {own!r}, but the run's exit_statuses yaml says {statuses[task_id]!r}",
                                 path)
        except TraceError as e:
            out.skipped[str(path)] = e.reason
            continue
        out += steps
    if not out:
        why = "; ".join(f"{Path(f).name}: {reason}" for f, reason in out.skipped.items()) or "no .traj.json files"
        raise TraceError(f"no trace could be imported ({why})", directory)
    return out


def load_traces(source) -> Imported:
    """The records of any traces source: "real" (the shipped run), a mini-swe-agent run folder, one `.traj.json`,
    or one of our JSONL trace files (bad lines skipped and named). Nothing usable raises TraceError naming it."""
    if source == "real":
        return import_real_traces()
    path = Path(source)
    if path.is_dir():
        return import_real_traces(path)
    if not path.is_file():
        raise FileNotFoundError(f"traces not found at {path}: expected \"real\", a mini-swe-agent run folder, a "
                                ".traj.json or a traces JSONL file")
    if path.name.endswith(".traj.json"):
        return Imported(import_mini_swe_agent(path), sha256=_sha256([path]), outcomes_known=False)
    reader = read_traces(path, on_error="collect")
    out = Imported(reader, sha256=_sha256([path]))
    out.skipped = {f"{p.path}:{p.lineno}": p.reason for p in reader.problems}
    if not out:
        raise TraceError(f"no trace records ({len(out.skipped)} unreadable lines"
                         + (f"; the first: {next(iter(out.skipped.values()))}" if out.skipped else "; the file is empty")
                         + ")", path)
    return out


def _exit_statuses(directory: Path) -> dict[str, str]:
    """{instance_id: exit status} from exit_statuses_<unix time>.yaml; a re-run writes a newer file,
    which wins for the instances it lists. (In the shipped run some ids are misspelled,
    "pylint-dev__asteroid-…"; they match no trajectory and so check nothing.)"""
    statuses = {}
    files = sorted(directory.glob("exit_statuses_*.yaml"), key=lambda p: float(p.stem.removeprefix("exit_statuses_")))
    for f in files:
        for status, ids in yaml.safe_load(f.read_text(encoding="utf-8"))["instances_by_exit_status"].items():
            statuses.update(dict.fromkeys(ids, status))
    return statuses
