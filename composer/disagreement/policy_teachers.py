"""Teachers that are policies: local checkpoints sampled in the student's own format at each step of its traces.

    from composer.disagreement import policy_teachers
    queries = policy_teachers.query_policy_teachers(by_trace, teachers, k=8, ...)   # records as replay writes them

The offline stand-ins for frontier teachers (composer.zoo's models) answer in the student's tool-call format, at
the state the student saw; their answers become the same teacher query records 001's replay writes, which
composer.disagreement.pairs turns into pairs.
"""

import asyncio
import hashlib
import json
import math
import time
from collections import defaultdict
from pathlib import Path

from composer.actions import canonical_action, canonical_tool_call
from composer.files import write_atomic
from composer.disagreement.pairs import prompt_messages
from composer.teachers import TeacherQuery


def clip_messages(messages: list[dict], *, window: int | None = None, max_chars: int | None = None) -> list[dict]:
    """A shorter view of a chat for small-context teachers: what precedes the first assistant turn plus the last
    `window` assistant turns (with their answers), each content cut to max_chars (head and tail kept)."""
    out = list(messages)
    if window is not None:
        starts = [i for i, m in enumerate(out) if m["role"] == "assistant"]
        if len(starts) > window:
            first = starts[0]
            cut = starts[len(starts) - window] if window else len(out)
            out = out[:first] + out[cut:]
    if max_chars is not None:
        clipped = []
        for m in out:
            content = m.get("content")
            if isinstance(content, str) and len(content) > max_chars:
                half = max_chars // 2
                m = {**m, "content": content[:half] + "\n[…]\n" + content[-half:]}
            clipped.append(m)
        out = clipped
    return out


def lenient_tool_call(text: str) -> tuple[str, dict] | None:
    """(name, arguments) of the first tool call in a completion that a strict parser rejects for its wrapping
    only: the JSON object after the last `<tool_call>` tag preceding it (repeated opening tags are dropped),
    with or without the closing tag. The object itself must be whole: {"name": str, "arguments": object}."""
    start = text.find("<tool_call>")
    if start < 0:
        return None
    rest = text[start:]
    while rest.startswith("<tool_call>"):
        rest = rest[len("<tool_call>"):].lstrip()
    try:
        call, _ = json.JSONDecoder().raw_decode(rest)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (call["name"], arguments) if isinstance(arguments, dict) else None


def bash_tool_schema() -> list[dict]:
    """mini-swe-agent's one tool, for replaying its traces to policy teachers."""
    return [{"type": "function", "function": {
        "name": "bash", "description": "Run a bash command in the repository.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


async def query_policy_teachers(by_trace: dict, endpoints: dict[str, dict], out_path, *, k: int = 4,
                                steps: dict[str, list[int]] | None = None, tools: list[dict] | None = None,
                                temperature: float = 1.0, max_tokens: int = 128, window: int | None = None,
                                max_chars: int | None = None, seed: int = 0, concurrency: int = 4,
                                timeout_s: float = 120.0, lenient: bool = True, resume: bool = True
                                ) -> list[TeacherQuery]:
    """Ask each teacher endpoint ({name: {"base_url", "model"}}, OpenAI-compatible, e.g. composer.serve
    serving zoo checkpoints) for k sampled next actions at every step, with the state's chat and `tools`
    exactly as the student is prompted, and parse each sample's tool call into a canonical action: elicitation
    mode "samples", one TeacherQuery per sample (a sample without a well-formed tool call is a parse failure),
    written to out_path as JSONL, the format replay.read_queries and replay.step_distributions read. `steps`:
    {trace_id: step indices} to query (None, or a trace missing from it: every step). lenient: when the server
    found no well-formed call, `lenient_tool_call` reads the teacher's intended one (small models repeat the
    opening tag or run out of tokens after the JSON).

    Requests: one per step and teacher with n=k (our server honours n). An endpoint that ignores n (OpenRouter
    does) answers it with fewer choices: each missing sample i is then a request of its own, n=1 with seed
    seed+step+i so that it is another sample; a line says so once per endpoint, and `ignored_n(records)` names
    those endpoints afterwards (their samples at a step carry more than one request_key).

    A request asked twice in one run (two rollouts sharing a state) is sent once.

    Resume: the cache is composer.teachers' Store in out_path's folder (replay.sqlite, the name 001's replay
    gives its own; the two never share a key), keyed by request (policy_request_key: teacher, the endpoint's
    optional "revision" (e.g. a checkpoint path), and the whole body). Each answer is stored the moment it is
    read, before it is parsed, so a kill re-pays only the requests in flight; a rerun answers stored requests
    from the store (records cached=True, nothing sent) and sends the rest. resume=False sends every request
    again (and stores the new answers).
    out_path is written afresh each run, every sample once: each step's records are appended as soon as its
    teachers have answered (a killed run shows what it had), and the file is rewritten in trace/step order at
    the end; a progress bar counts steps. Errors are records (error_kind) and are not stored: a rerun asks again."""
    import httpx
    import openai

    from composer.lock import run_lock
    from composer.progress import bar
    from composer.replay import STORE_FILE
    from composer.teachers import PLACEHOLDER_KEY, Store, classify, redact

    if concurrency < 1:  # a semaphore of 0 would wait forever
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    context = "full" if window is None and max_chars is None else f"window:{window}" + (
        f",chars:{max_chars}" if max_chars else "")
    with run_lock(out_path.parent):  # a second run on this store would ask for the same samples again
        clients = {name: openai.AsyncOpenAI(base_url=e["base_url"], api_key=e.get("api_key", PLACEHOLDER_KEY),
                                            timeout=timeout_s, max_retries=1) for name, e in endpoints.items()}
        slots = asyncio.Semaphore(concurrency)
        store = Store(out_path.parent / STORE_FILE, cap_usd=math.inf)  # the cache only: no budget guard here
        records: list[TeacherQuery] = []
        ignoring: set[str] = set()
        out_path.write_text("", encoding="utf-8")
        todo = {tid: range(len(s)) if (steps or {}).get(tid) is None else [t for t in steps[tid] if t < len(s)]
                for tid, s in by_trace.items()}
        meter = bar(total=sum(map(len, todo.values())), desc="teacher queries", unit="step")

        sending: dict[str, asyncio.Task] = {}

        async def post(name: str, body: dict, sample: int):
            """One request, or its stored answer: (key, response or None, latency, cached, (error kind, message)).
            A request already sent in this run (rollouts of one task share their first states, so their steps ask
            the same thing) is not sent again: its answer is shared, and counted as cached (paid once)."""
            key = policy_request_key(name, endpoints[name].get("revision"), body)
            if key in sending:
                key, response, latency, _, failure = await sending[key]
                return key, response, latency, response is not None, failure
            sending[key] = asyncio.ensure_future(send(name, key, body, sample))
            return await sending[key]

        async def send(name: str, key: str, body: dict, sample: int):
            stored = store.answer(key) if resume else None
            if stored is not None:
                return key, stored["response"], stored["latency_s"], True, None
            async with slots:
                start = time.perf_counter()
                try:
                    raw = await clients[name].post("/chat/completions", body=body, cast_to=httpx.Response)
                    response, failure = raw.json(), None
                except Exception as e:  # classified like teachers.Teacher does; anything unknown re-raises there
                    response, failure = None, e
                latency = time.perf_counter() - start
            if failure is not None:
                kind, message = classify(failure)
                return key, None, latency, False, (kind, redact(message, clients[name].api_key))
            if not isinstance(response, dict) or "error" in response or not response.get("choices"):
                # OpenRouter can answer 200 with an error object when the provider fails after routing.
                return key, None, latency, False, ("provider_error", json.dumps(response)[:500])
            store.save(key, name, body["model"], sample, {"response": response, "latency_s": latency})
            return key, response, latency, False, None

        def sample_records(base: dict, first: int, count: int, answer) -> list[TeacherQuery]:
            """Records of samples first.. of one request's answer (at most `count`; usage on the first of them)."""
            key, response, latency, cached, failure = answer
            if failure is not None:
                kind, message = failure
                return [TeacherQuery(**base, sample=i, model_used=None, provider=None, distribution=None, raw_text=None,
                                     parse_error=None, latency_s=latency, attempts=1, error_kind=kind, error=message,
                                     request_key=key) for i in range(first, first + count)]
            usage = response.get("usage") or {}
            out = []
            for i, choice in enumerate(response["choices"][:count]):
                message = choice.get("message") or {}
                calls = message.get("tool_calls") or []
                text = (message.get("content") or "") + "".join(
                    f"<tool_call>\n{{\"name\": {json.dumps(c['function']['name'])}, \"arguments\": "
                    f"{c['function']['arguments']}}}\n</tool_call>" for c in calls)
                distribution, error = None, None
                if calls:
                    try:
                        arguments = json.loads(calls[0]["function"]["arguments"])
                        if not isinstance(arguments, dict):
                            raise ValueError("arguments are not a JSON object")
                        distribution = {canonical_tool_call(calls[0]["function"]["name"], arguments): 1.0}
                    except ValueError as e:
                        error = f"tool call arguments: {e}"
                elif lenient and (call := lenient_tool_call(text)) is not None:
                    distribution = {canonical_tool_call(*call): 1.0}
                else:
                    error = "no well-formed tool call in the completion"
                out.append(TeacherQuery(**base, sample=first + i, model_used=response.get("model"),
                                        provider="composer-local", distribution=distribution, raw_text=text,
                                        parse_error=error, prompt_tokens=usage.get("prompt_tokens") if i == 0 else None,
                                        completion_tokens=usage.get("completion_tokens") if i == 0 else None,
                                        latency_s=latency, attempts=1, cached=cached, request_key=key))
            return out

        async def ask(name: str, record) -> list[TeacherQuery]:
            messages = clip_messages(prompt_messages(record.state.messages), window=window, max_chars=max_chars)
            body = {"model": endpoints[name]["model"], "messages": messages, "n": k, "temperature": temperature,
                    "max_tokens": max_tokens, "seed": seed + record.step}
            if tools:
                body["tools"] = tools
            base = dict(trace_id=record.trace_id, step=record.step, teacher=name, model=endpoints[name]["model"],
                        mode="samples", context=context, cache=False, student_action=canonical_action(record.action))
            out = sample_records(base, 0, k, await post(name, body, 0))
            got = len(out)
            if out[0].error_kind is None and got < k:
                if name not in ignoring:
                    ignoring.add(name)
                    print(f"endpoint {name!r} ignored n (asked for {k} samples, got {got}): each missing sample is a "
                          "request of its own")
                missing = range(got, k)
                answers = await asyncio.gather(*(post(name, {**body, "n": 1, "seed": body["seed"] + i}, i)
                                                 for i in missing))
                out += [q for i, answer in zip(missing, answers) for q in sample_records(base, i, 1, answer)]
            return out

        async def run_trace(trace_id: str, steps_of_trace):
            for t in todo[trace_id]:
                batch = [q for group in await asyncio.gather(*(ask(name, steps_of_trace[t]) for name in endpoints))
                         for q in group]
                records.extend(batch)
                with open(out_path, "a", encoding="utf-8") as f:
                    f.writelines(q.model_dump_json() + "\n" for q in batch)
                meter.update()

        try:
            await asyncio.gather(*(run_trace(tid, s) for tid, s in by_trace.items()))
        finally:
            meter.close()
            store.close()
            for c in clients.values():
                await c.close()
        records.sort(key=lambda q: (list(by_trace).index(q.trace_id), q.step, q.teacher, q.sample))
        write_atomic(out_path, "".join(q.model_dump_json() + "\n" for q in records))
        return records


def policy_request_key(teacher: str, revision: str | None, body: dict) -> str:
    """query_policy_teachers' cache key: the teacher, its endpoint's revision and the whole request body."""
    return hashlib.sha256(json.dumps({"teacher": teacher, "revision": revision, "body": body},
                                     sort_keys=True).encode()).hexdigest()


def ignored_n(records: list[TeacherQuery]) -> list[str]:
    """The teachers whose endpoint ignored n in query_policy_teachers: k samples at a step took several requests."""
    keys = defaultdict(set)
    for q in records:
        keys[q.teacher, q.trace_id, q.step].add(q.request_key)
    return sorted({teacher for (teacher, _, _), seen in keys.items() if len(seen) > 1})
