"""Teachers that are policies: checkpoints prompted as the student is, at each step of its traces.

    from composer import replay, teachers
    spec = teachers.TeacherSpec(name="large", model="teacher-large", kind="policy", base_url=server.base_url,
                                revision=checkpoint.name, k=8, temperature=1.0, max_tokens=128, action_space="tools")
    result = await replay.replay(by_trace, [spec], "runs/003")      # replay.BACKENDS["policy"] is PolicyTeacher

A policy teacher is shown the chat the student saw, with the student's tools (CodingEnv's for action_space
"tools", mini-swe-agent's one bash tool for "bash"), and asked for k sampled completions in one request (n=k); each
sample's tool call becomes a canonical action, so a teacher's distribution at a step is the share of each action
among its samples. 003 offline serves the zoo's teacher checkpoints this way (composer.serve); live, any
OpenAI-compatible endpoint serving a policy will do (a vLLM server; OpenRouter's Qwen3). A PolicyTeacher is a
composer.teachers.Teacher: the same client, retries, cache, ledger and budget guard (a model no price table knows
costs $0 on loopback and is refused elsewhere). Only the asking differs:

- An endpoint that ignores n (OpenRouter does) answers with fewer choices: each missing sample i is then a request
  of its own, n=1 with seed seed+step+i, so that it is another sample; a line says so once per teacher, and
  `ignored_n(records)` names those teachers afterwards (their samples at a step carry more than one request_key).
- A request asked twice in one run (two rollouts sharing a state) is sent once, and its second asking is counted
  as cached (paid once).
- lenient: when the endpoint found no well-formed call, `lenient_tool_call` reads the one the teacher meant (small
  models repeat the opening tag or run out of tokens after the JSON).
- Each answer is stored (raw, with its usage) the moment it is read, before it is parsed, keyed by
  policy_request_key (the teacher, its spec's revision and the whole body), so a kill re-pays only the requests in
  flight and new weights behind the same name get new answers.
"""

import asyncio
import hashlib
import json
from collections import defaultdict

from composer.actions import canonical_action, canonical_tool_call
from composer.teachers import (Sent, Teacher, TeacherQuery, TeacherSpec, context_label, note_stop, provider_routing,
                               worst_case_usd)
from composer.traces import StepRecord, prompt_messages


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


def tools_of(spec: TeacherSpec) -> list[dict]:
    """The tools the traced agent had, as the policy is shown them."""
    if spec.action_space == "tools":
        from composer.env.environment import tool_schemas  # the environment's own schemas (loads transformers)

        return tool_schemas()
    return bash_tool_schema()


def policy_request_key(teacher: str, revision: str | None, body: dict) -> str:
    """A policy teacher's cache key: the teacher, its spec's revision and the whole request body."""
    return hashlib.sha256(json.dumps({"teacher": teacher, "revision": revision, "body": body},
                                     sort_keys=True).encode()).hexdigest()


class PolicyTeacher(Teacher):
    """A checkpoint asked as the student is (module doc); replay.StepTeacher, like its base class."""

    def __init__(self, spec: TeacherSpec, store, **kwargs):
        super().__init__(spec, store, **kwargs)
        self.tools = tools_of(spec)
        self.warned = False  # the endpoint ignored n: said once
        self.sending: dict[str, asyncio.Task] = {}

    @staticmethod
    def messages(state_messages: list[dict], spec: TeacherSpec, *, context: str = "full", window: int = 8,
                 cache: bool = True, previous: int | None = None) -> list[dict]:
        """What the policy is prompted with: the student's chat under `context`, each message cut to max_chars
        (cache and previous shape a reviewer's prompt, not this one)."""
        return clip_messages(prompt_messages(state_messages), window=window if context == "window" else None,
                             max_chars=spec.max_chars)

    async def answer(self, record: StepRecord, *, context: str = "full", window: int = 8, cache: bool = True,
                     previous: int | None = None, seed: int = 0, stop: list[str] | None = None) -> list[TeacherQuery]:
        """k sampled actions at one step: one request with n=k, and one per sample an endpoint left out. `stop`,
        the run's, as Teacher.answer's. `cache` and `previous` (a reviewer's prompt-cache layout) do not apply:
        the prompt is the student's."""
        spec, stop = self.spec, [] if stop is None else stop
        if stop:
            return []
        body = {"model": spec.model, "messages": self.messages(record.state.messages, spec, context=context,
                                                              window=window),
                "n": spec.k, "max_tokens": spec.max_tokens, "seed": seed + record.step, "tools": self.tools}
        if spec.temperature is not None:
            body["temperature"] = spec.temperature
        if spec.provider:
            body["provider"] = provider_routing(spec)
        label = context_label(context, window) + (f",chars:{spec.max_chars}" if spec.max_chars else "")
        base = dict(trace_id=record.trace_id, step=record.step, teacher=spec.name, model=spec.model, mode="samples",
                    context=label, cache=False, student_action=canonical_action(record.action))
        out = self._records(base, 0, spec.k, await self._post(body, 0))
        note_stop(stop, out)
        if out[0].error_kind is None and len(out) < spec.k and not stop:
            if not self.warned:
                self.warned = True
                print(f"endpoint {spec.name!r} ignored n (asked for {spec.k} samples, got {len(out)}): each missing "
                      "sample is a request of its own")
            missing = range(len(out), spec.k)
            answers = await asyncio.gather(*(self._post({**body, "n": 1, "seed": body["seed"] + i}, i)
                                             for i in missing))
            out += [q for i, answer in zip(missing, answers) for q in self._records(base, i, 1, answer)]
            note_stop(stop, out)
        return out

    async def _post(self, body: dict, sample: int) -> tuple[str, dict | Sent, bool]:
        """(key, answer, cached): the stored answer ({"response", "latency_s", "usage", ...}), or the request
        sent under the budget guard (a failure: what Teacher.send came back with). A request this run already sent
        is not sent again: its answer is shared, and counted as cached."""
        key = policy_request_key(self.spec.name, self.spec.revision, body)
        if key in self.sending:
            key, answer, _ = await self.sending[key]
            if isinstance(answer, Sent):
                return key, answer, False
            usage = {k: v for k, v in (answer.get("usage") or {}).items() if k not in ("cost_usd", "cost_source")}
            return key, {**answer, "usage": usage, "unsettled_usd": 0.0}, True  # its cost is on the first asker's
        self.sending[key] = asyncio.ensure_future(self._send(key, body, sample))
        return await self.sending[key]

    async def _send(self, key: str, body: dict, sample: int) -> tuple[str, dict | Sent, bool]:
        stored = self.store.answer(key)
        if stored is not None:
            return key, stored, True
        # The whole body as one message: its tool calls and tool schemas are prompt tokens too.
        whole = [{"role": "user", "content": json.dumps(body, ensure_ascii=False)}]
        sent = await self.send(body, key, worst_case_usd(self.prices, whole, self.spec.max_tokens * body["n"]))
        if sent.error_kind is not None:  # not stored: a rerun asks again
            return key, sent, False
        # What is stored is redacted as records are: an endpoint that echoes the key leaves it nowhere.
        response = json.loads(self.redacted(json.dumps(sent.data, ensure_ascii=False)))
        answer = {"response": response, "latency_s": sent.latency_s, "usage": sent.usage,
                  "attempts": sent.attempts, "unsettled_usd": sent.unsettled_usd, "simulated": sent.simulated}
        self.store.save(key, self.spec.name, self.spec.model, sample, answer)
        return key, answer, False

    def _records(self, base: dict, first: int, count: int, posted) -> list[TeacherQuery]:
        """Records of samples first.. of one request's answer (at most `count`; usage and cost on the first)."""
        key, answer, cached = posted
        if isinstance(answer, Sent):
            return [TeacherQuery(**base, sample=i, model_used=None, provider=None, distribution=None, raw_text=None,
                                 parse_error=None, latency_s=answer.latency_s, attempts=answer.attempts,
                                 unsettled_usd=answer.unsettled_usd if i == first else 0.0,
                                 error_kind=answer.error_kind, error=answer.error, request_key=key)
                    for i in range(first, first + count)]
        response = answer["response"]
        # answers stored before policy teachers were Teachers hold the response alone: its own token counts
        usage = answer.get("usage") or {name: (response.get("usage") or {}).get(name)
                                        for name in ("prompt_tokens", "completion_tokens")}
        once = {**usage, "unsettled_usd": answer.get("unsettled_usd", 0.0)}
        out = []
        for i, choice in enumerate(response["choices"][:count]):
            distribution, error, text = self._parse(choice.get("message") or {})
            out.append(TeacherQuery(**base, sample=first + i, model_used=response.get("model"),
                                    provider=response.get("provider"), distribution=distribution,
                                    raw_text=self.redacted(text), parse_error=error,
                                    latency_s=answer["latency_s"], attempts=answer.get("attempts", 1), cached=cached,
                                    simulated=answer.get("simulated", False), request_key=key,
                                    **(once if i == 0 else {})))
        return out

    @staticmethod
    def _parse(message: dict) -> tuple[dict | None, str | None, str]:
        """(distribution, parse error, the completion as text) of one choice."""
        calls = message.get("tool_calls") or []
        text = (message.get("content") or "") + "".join(
            f"<tool_call>\n{{\"name\": {json.dumps(c['function']['name'])}, \"arguments\": "
            f"{c['function']['arguments']}}}\n</tool_call>" for c in calls)
        if calls:
            try:
                arguments = json.loads(calls[0]["function"]["arguments"])
                if not isinstance(arguments, dict):
                    raise ValueError("arguments are not a JSON object")
            except ValueError as e:
                return None, f"tool call arguments: {e}", text
            return {canonical_tool_call(calls[0]["function"]["name"], arguments): 1.0}, None, text
        if (call := lenient_tool_call(text)) is not None:
            return {canonical_tool_call(*call): 1.0}, None, text
        return None, "no well-formed tool call in the completion", text


def ignored_n(records: list[TeacherQuery]) -> list[str]:
    """The policy teachers whose endpoint ignored n: k samples at a step took several requests."""
    keys = defaultdict(set)
    for q in records:
        keys[q.teacher, q.trace_id, q.step].add(q.request_key)
    return sorted({teacher for (teacher, _, _), seen in keys.items() if len(seen) > 1})
