"""A local OpenAI-compatible chat server: HF checkpoints generating on CPU, and simulated providers.

    python -m composer serve --model student=PATH [--model NAME=PATH ...] [--profile NAME=PROFILE ...]
                             [--profiles composer/providers.yaml] [--no-generate] [--seed 0]
                             [--host 127.0.0.1] [--port 0]

    from composer.serve import serve
    with serve(models={"student": tiny_model(), "openai/gpt-5": tiny_model()}, seed=0) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-local-unused")

Offline it stands in for two real servers, so the same `openai` SDK code runs with no key and no GPU:
vLLM's OpenAI server for the student, and OpenRouter for the teachers. Endpoints: `GET /v1/models` and
`POST /v1/chat/completions` (streaming or not; tools rendered through the model's chat template and
`<tool_call>{json}</tool_call>` blocks parsed back into `tool_calls`; temperature, top_p, max_tokens /
max_completion_tokens, seed, n, logprobs / top_logprobs, stop; usage with cached and reasoning tokens).
Other request fields are accepted and ignored, as OpenRouter does with unsupported parameters.

Backends, one per server: "generate" runs HF `generate`, one worker thread per model, batching queued requests
that share sampling settings; "echo" (`--no-generate`) runs no model and answers with the last user message,
cut to max_tokens and at stop strings, counted with the model's tokenizer: it measures pure HTTP overhead,
serves simulated teachers cheaply, and makes completions (tool calls included) deterministic for tests.

A served model may carry a simulated provider profile (composer/providers.yaml; a model named like a profile
gets it): seeded latency (lognormal time to first token, then a fixed time per token), prices giving an
OpenRouter-style `usage.cost` in dollars, prompt caching (automatic prefix matching like OpenAI/DeepSeek, or
explicit `cache_control` breakpoints like Anthropic) and error injection (429 with Retry-After, 500, 402,
a 200 with a malformed body, a stall past the client's timeout). The latency and error draws depend on the
server seed, the request body and how many times that body was seen, so a rerun replays the same faults
whatever the arrival order, and a retry draws afresh. Simulated responses carry the header
`x-composer-simulated: true` and the body field `provider: "composer-simulated/<profile>"`, so a simulated
latency can never pass for a measured one.
"""

import argparse
import asyncio
import bisect
import collections
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import uvicorn
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from tokenizers import decoders
from transformers.convert_slow_tokenizer import bytes_to_unicode

from composer.generation import Generator, Job
from composer.models import load_model, load_tokenizer
from composer.providers import FAULTS, PROFILES_FILE, Errors, Profile, PromptCache, cost, load_profiles

TOOL_CALL = "<tool_call>"
TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
# Marks where a content part with cache_control ends, through the chat template; removed before tokenizing.
CACHE_MARK = "\x00composer-cache-breakpoint\x00"
BYTE_LEVEL = {char: byte for byte, char in bytes_to_unicode().items()}  # byte-level BPE's vocabulary alphabet
MALFORMED = '{"id": "gen-composer-simulated", "choices": [{"message": {"content": "trunc'


# ---------------------------------------------------------------------------------------------------------
# Requests, prompts, tool calls


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")  # tool_calls, tool_call_id, name, reasoning_content...
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=16)
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None


class BadRequest(Exception):
    def __init__(self, param: str | None, message: str):
        super().__init__(message)
        self.param = param


def render(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
    """Prompt token ids through the chat template, and the token positions where cache_control parts end."""
    normalized = []
    for i, message in enumerate(messages):
        message = dict(message)
        if message["role"] == "developer":  # OpenAI's newer name for the system role; templates know "system"
            message["role"] = "system"
        if isinstance(message.get("content"), list):  # templates want a string: join the text parts
            texts = []
            for j, part in enumerate(message["content"]):
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise BadRequest(f"messages[{i}].content[{j}]", "only text content parts are supported")
                texts.append(part["text"] + (CACHE_MARK if part.get("cache_control") else ""))
            message["content"] = "".join(texts)
        normalized.append(message)
    try:
        text = tokenizer.apply_chat_template(normalized, tools=tools or None, add_generation_prompt=True,
                                             tokenize=False)
    except Exception as e:  # the template is the only code here, and it fails on what the client sent
        raise BadRequest("messages", f"the chat template rejected the messages: {e}") from None
    pieces = text.split(CACHE_MARK)
    if len(pieces) == 1:
        return tokenizer(text, add_special_tokens=False)["input_ids"], []
    encoded = tokenizer("".join(pieces), add_special_tokens=False, return_offsets_mapping=True)
    ends = [end for _, end in encoded["offset_mapping"]]
    marks, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        marks.append(bisect.bisect_right(ends, at))  # tokens that end at or before the breakpoint
    return encoded["input_ids"], marks


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Split Qwen3/Hermes `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks off a completion.

    Returns the text before the first block and the calls in OpenAI format. If any block is not a JSON object
    with a string name, nothing is parsed and the whole text stays content (as vLLM's hermes parser does).
    """
    blocks = TOOL_CALL_BLOCK.findall(text)
    calls = []
    for block in blocks:
        try:
            call = json.loads(block)
            name, arguments = call["name"], call.get("arguments", {})
        except (ValueError, KeyError, TypeError, AttributeError):
            return text, []
        if not isinstance(name, str):
            return text, []
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    return (text[: text.find(TOOL_CALL)], calls) if calls else (text, [])


# ---------------------------------------------------------------------------------------------------------
# Completions: tokens in, OpenAI responses and stream chunks out


class _Choice:
    """One choice's text as tokens arrive: incremental detokenization, cut at the first stop string, and held
    back while its end could still become a stop string or a tool-call block."""

    def __init__(self, index: int, tokenizer, stop: list[str], tools: bool, logprobs: bool):
        self.index, self.tokenizer, self.stop, self.tools = index, tokenizer, stop, tools
        self.hold = stop + ([TOOL_CALL] if tools else [])
        self.ids: list[int] = []
        self.logprobs: list[dict] | None = [] if logprobs else None
        self.text, self.sent, self.logprobs_sent = "", 0, 0
        self.finish_reason: str | None = None
        self.ended = False
        self.content, self.tool_calls = "", []
        self._prefix = self._read = 0  # TGI's offsets: decode a short window, not the whole text, per token

    def add(self, token: int, logprob: float | None, top: list | None) -> None:
        if self.finish_reason:  # past a stop string: generation may run a step on, the echo backend to the end
            return
        self.ids.append(token)
        if self.logprobs is not None:
            self.logprobs.append(self._logprob_entry(token, logprob, top))
        before = self.tokenizer.decode(self.ids[self._prefix:self._read], skip_special_tokens=True)
        after = self.tokenizer.decode(self.ids[self._prefix:], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):  # wait for the rest of a UTF-8 character
            self.text += after[len(before):]
            self._prefix, self._read = self._read, len(self.ids)
        self._cut_at_stop()

    def end(self, reason: str) -> None:
        if not self.finish_reason:
            self.text = self.tokenizer.decode(self.ids, skip_special_tokens=True)  # flush held-back bytes
            self._cut_at_stop()
            self.finish_reason = self.finish_reason or reason
        self.ended = True
        self.content, self.tool_calls = parse_tool_calls(self.text) if self.tools else (self.text, [])
        if self.tool_calls:
            self.finish_reason = "tool_calls"

    def _cut_at_stop(self) -> None:
        hits = [i for i in (self.text.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.text = self.text[: min(hits)]
            self.finish_reason = "stop"

    def _logprob_entry(self, token: int, logprob: float, top: list) -> dict:
        def entry(token_id, value):
            text = self.tokenizer.decode([token_id])
            return {"token": text, "logprob": value, "bytes": list(_token_bytes(self.tokenizer, token_id, text))}

        return {**entry(token, logprob), "top_logprobs": [entry(t, v) for t, v in top]}

    def take(self) -> tuple[dict, dict | None]:
        """The stream delta due now (empty when nothing may be shown yet) and its log-probs."""
        if self.ended:
            delta = {"content": self.content[self.sent:]} if len(self.content) > self.sent else {}
            if self.tool_calls:
                delta["tool_calls"] = [{"index": j, **call} for j, call in enumerate(self.tool_calls)]
            self.sent = len(self.text)
        else:
            visible = len(self.text) - max((_partial(self.text, s) for s in self.hold), default=0)
            if self.tools and TOOL_CALL in self.text:
                visible = min(visible, self.text.index(TOOL_CALL))
            delta = {"content": self.text[self.sent:visible]} if visible > self.sent else {}
            self.sent = max(self.sent, visible)
        logprobs = None
        if self.logprobs is not None and len(self.logprobs) > self.logprobs_sent and (delta or self.ended):
            logprobs = {"content": self.logprobs[self.logprobs_sent:], "refusal": None}
            self.logprobs_sent = len(self.logprobs)
            delta = delta or {"content": ""}
        return delta, logprobs

    def message(self) -> dict:
        message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
            message["content"] = self.content if self.content.strip() else None
        return message


def _token_bytes(tokenizer, token_id: int, text: str) -> bytes:
    """A token's own bytes. Under byte-level BPE (Qwen's) a token may hold part of a UTF-8 character, which its
    decoded text shows as U+FFFD; its vocabulary string maps back to the exact bytes."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if isinstance(tokenizer.backend_tokenizer.decoder, decoders.ByteLevel) and all(c in BYTE_LEVEL for c in piece):
        return bytes(BYTE_LEVEL[c] for c in piece)
    return text.encode()


def _partial(text: str, s: str) -> int:
    """Length of the longest end of text that is a proper prefix of s."""
    for k in range(min(len(s) - 1, len(text)), 0, -1):
        if text.endswith(s[:k]):
            return k
    return 0


class WorkerError(Exception):
    pass


@dataclass
class _Sim:
    """A served model's simulated provider."""

    name: str
    profile: Profile
    cache: PromptCache


@dataclass
class _Served:
    name: str
    tokenizer: object
    context: int
    sim: _Sim | None


class _Completion:
    """One chat completion request, from the tokens arriving on its queue to a body or a stream of chunks."""

    def __init__(self, served: _Served, req: ChatRequest, prompt: list[int], cached: int, written: int,
                 ttft: float):
        self.served, self.req, self.prompt, self.cached, self.written = served, req, prompt, cached, written
        stop = [req.stop] if isinstance(req.stop, str) else [s for s in req.stop or [] if s]
        tools = bool(req.tools) and req.tool_choice != "none"
        self.choices = [_Choice(k, served.tokenizer, stop, tools, req.logprobs) for k in range(req.n)]
        self.queue: asyncio.Queue = asyncio.Queue()
        self.job: Job | None = None
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        self.start, self.ttft = time.monotonic(), ttft
        latency = served.sim.profile.latency if served.sim else None
        self.per_token = latency.per_token_s if latency else 0.0
        self.extra = {"provider": f"composer-simulated/{served.sim.name}"} if served.sim else {}

    async def events(self):
        """Apply each batch of events; yield the choices it touched, not before the simulated timeline allows."""
        open_choices = set(range(len(self.choices)))
        while open_choices:
            touched = {}
            for event in await self.queue.get():
                if event[0] == "error":
                    raise WorkerError(event[1])
                choice = self.choices[event[1]]
                if event[0] == "token":
                    choice.add(*event[2:])
                    if choice.finish_reason and self.job:  # a stop string: the worker may end this row
                        self.job.finished.add(choice.index)
                else:
                    choice.end(event[2])
                    open_choices.discard(choice.index)
                touched[choice.index] = choice
            if self.ttft or self.per_token:
                tokens = max(max(len(c.ids) for c in touched.values()), 1)
                due = self.start + self.ttft + (tokens - 1) * self.per_token
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            yield list(touched.values())

    def cancel(self) -> None:
        if self.job:
            self.job.finished.update(range(self.job.n))

    def usage(self) -> dict:
        completion = sum(len(c.ids) for c in self.choices)
        prompt_details = {"cached_tokens": self.cached}
        usage = {"prompt_tokens": len(self.prompt), "completion_tokens": completion,
                 "total_tokens": len(self.prompt) + completion, "prompt_tokens_details": prompt_details,
                 "completion_tokens_details": {"reasoning_tokens": sum(map(self._reasoning_tokens, self.choices))}}
        if self.served.sim:  # OpenRouter's names: cost in dollars, cache writes next to cache reads
            prompt_details["cache_write_tokens"] = self.written
            usage["cost"] = cost(self.served.sim.profile.prices, len(self.prompt), self.cached, self.written,
                                 completion)
        return usage

    def _reasoning_tokens(self, choice: _Choice) -> int:
        end = choice.text.find("</think>")
        if not choice.text.lstrip().startswith("<think>") or end < 0:
            return 0
        return len(self.served.tokenizer(choice.text[: end + len("</think>")], add_special_tokens=False)["input_ids"])

    async def body(self) -> dict:
        try:
            async for _ in self.events():
                pass
        finally:  # also when the client went away mid-generation
            self.cancel()
        choices = [{"index": c.index, "message": c.message(), "finish_reason": c.finish_reason,
                    "logprobs": {"content": c.logprobs, "refusal": None} if c.logprobs is not None else None}
                   for c in self.choices]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.req.model,
                "choices": choices, "usage": self.usage(), **self.extra}

    async def stream(self):
        include_usage = bool(self.req.stream_options and self.req.stream_options.include_usage)

        def chunk(choice: dict | None, usage: dict | None = None) -> str:
            body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.req.model, "choices": [choice] if choice else [], **self.extra}
            if include_usage:  # as OpenAI: null on every chunk but the last
                body["usage"] = usage
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        try:
            started = False
            async for touched in self.events():
                if not started:  # not before the first token: a client timing its first chunk sees the TTFT
                    started = True
                    for c in self.choices:
                        yield chunk({"index": c.index, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None})
                for c in touched:
                    delta, logprobs = c.take()
                    if delta:
                        yield chunk({"index": c.index, "delta": delta, "logprobs": logprobs, "finish_reason": None})
                    if c.ended:
                        yield chunk({"index": c.index, "delta": {}, "logprobs": None,
                                     "finish_reason": c.finish_reason})
            if include_usage:
                yield chunk(None, self.usage())
            yield "data: [DONE]\n\n"
        except WorkerError as e:  # the openai SDK raises an APIError on an error event
            yield f"data: {json.dumps({'error': {'message': str(e), 'code': 500}})}\n\n"
        finally:
            self.cancel()


# ---------------------------------------------------------------------------------------------------------
# The server


def _error(status: int, message: str, param: str | None = None, code: str | int | None = None,
           headers: dict | None = None, **extra) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}, **extra}
    return JSONResponse(body, status_code=status, headers=headers)


def _param(loc) -> str | None:
    """A pydantic error location as OpenAI names the field: messages[0].role."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or None


class Server:
    """A running server (see serve()): `base_url`, `models`; `close()` stops it."""

    def __init__(self, models: dict[str, str | Path], profiles: dict[str, str | dict] | None = None, *,
                 profiles_file: str | Path = PROFILES_FILE, backend: Literal["generate", "echo"] = "generate",
                 seed: int = 0, host: str = "127.0.0.1", port: int = 0, plain: bool = False):
        if backend not in ("generate", "echo"):
            raise ValueError(f"backend must be 'generate' or 'echo', not {backend!r}")
        self.models = list(models)
        self.seed = seed
        self._seen: collections.Counter = collections.Counter()  # request draws per (model, body)
        sims = self._simulations(models, profiles or {}, profiles_file)
        tokenizers, weights, served_by = {}, {}, collections.defaultdict(dict)
        for name, path in models.items():  # models sharing a path share one copy in memory
            key = str(path)
            if key not in tokenizers:
                tokenizers[key] = load_tokenizer(path)
                if backend == "generate":
                    weights[key] = load_model(path).eval()
            if backend == "generate":
                served_by["all" if plain else key][name] = weights[key]
        self._served = {}
        for name, path in models.items():
            model = weights.get(str(path))
            context = model.config.max_position_embeddings if model else tokenizers[str(path)].model_max_length
            self._served[name] = _Served(name, tokenizers[str(path)], context, sims.get(name))

        # Bound here, so port 0 is resolved before uvicorn starts. proto must be IPPROTO_TCP (socket.create_server
        # leaves 0): only then does asyncio set TCP_NODELAY on accepted connections; without it every response
        # waits ~40 ms for the client's delayed ACK (Nagle's algorithm).
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             proto=socket.IPPROTO_TCP)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        self.base_url = f"http://{host}:{sock.getsockname()[1]}/v1"
        # One worker thread per copy of the weights: 003's three teachers generate at once on a machine's cores
        # (each job's tokens depend on its seed alone, see _Sample). plain: one worker for all, as before.
        self._workers = [Generator(served, seed, plain=plain) for served in served_by.values()]
        self._generators = {name: worker for worker in self._workers for name in worker.models}
        # A short graceful shutdown: a stalled request would otherwise hold close() for its whole stall.
        config = uvicorn.Config(self._app(), log_config=None, log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=1)
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name="composer-serve")
        self._thread.start()
        while not self._uvicorn.started:
            if not self._thread.is_alive():
                self.close()
                raise RuntimeError("the server failed to start (see the log above)")
            time.sleep(0.01)

    @staticmethod
    def _simulations(models, profiles, profiles_file) -> dict[str, _Sim]:
        available = load_profiles(profiles_file)
        chosen = {name: name for name in models if name in available}  # a model named like a profile gets it
        chosen.update(profiles)
        sims = {}
        for model, profile in chosen.items():
            if model not in models:
                raise ValueError(f"profile given for {model!r}, which is not served ({', '.join(models)})")
            if isinstance(profile, dict):
                name, spec = "custom", Profile.model_validate(profile)
            elif profile in available:
                name, spec = profile, available[profile]
            else:
                raise ValueError(f"no profile {profile!r} in {profiles_file}; known: {', '.join(available)}")
            sims[model] = _Sim(name, spec, PromptCache(spec.cache))
        return sims

    def close(self) -> None:
        self._uvicorn.should_exit = True
        self._thread.join()
        for worker in self._workers:
            worker.close()

    def _draw(self, model: str, body: str) -> random.Random:
        key = hashlib.sha256(f"{self.seed}\0{model}\0{body}".encode()).digest()
        attempt = self._seen[key]
        self._seen[key] += 1
        return random.Random(key + attempt.to_bytes(8, "big"))

    def _app(self) -> FastAPI:
        app = FastAPI(title="composer serve", openapi_url=None)

        @app.exception_handler(RequestValidationError)
        async def invalid(request, exc: RequestValidationError):
            errors = exc.errors()
            loc = errors[0]["loc"]
            # A union field (stop, content) fails once per member, each loc ending in the member's type name:
            # name the field by what those locs share.
            for other in (e["loc"] for e in errors[1:] if e["loc"][:2] == loc[:2]):
                loc = loc[: next((i for i, (a, b) in enumerate(zip(loc, other)) if a != b), len(loc))]
            param = None if errors[0]["type"] == "json_invalid" else _param([p for p in loc if p != "body"])
            return _error(400, f"{param}: {errors[0]['msg']}" if param else errors[0]["msg"], param)

        @app.get("/v1/models")
        async def list_models():
            return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "composer"}
                                               for name in self.models]}

        @app.post("/v1/chat/completions")
        async def chat_completions(req: ChatRequest):
            return await self._chat(req)

        return app

    async def _chat(self, req: ChatRequest):
        served = self._served.get(req.model)
        if served is None:
            return _error(404, f"The model `{req.model}` does not exist.", "model", "model_not_found")
        if req.top_logprobs is not None and not req.logprobs:
            return _error(400, "top_logprobs requires logprobs to be true", "top_logprobs")
        try:
            prompt, breakpoints = render(served.tokenizer, [m.model_dump(exclude_none=True) for m in req.messages],
                                         req.tools)
        except BadRequest as e:
            return _error(400, str(e), e.param)
        limit = req.max_completion_tokens or req.max_tokens
        room = served.context - len(prompt)
        if room <= 0 or (limit and limit > room):
            return _error(400, f"{len(prompt)} prompt tokens + {limit or 1} completion tokens exceed the model's "
                               f"context of {served.context}", "max_tokens" if limit else "messages")

        headers, cached, written, ttft = {}, 0, 0, 0.0
        if served.sim:
            headers = {"x-composer-simulated": "true"}
            profile = served.sim.profile
            rng = self._draw(req.model, req.model_dump_json())
            fault = self._fault(rng.random(), profile.errors)
            latency = profile.latency
            if latency.ttft_median_s:
                ttft = rng.lognormvariate(math.log(latency.ttft_median_s), latency.ttft_sigma)
            if fault == "stall":
                await asyncio.sleep(profile.errors.stall_s)
            elif fault:
                return self._fault_response(fault, served.sim, req.stream, headers)
            cached, written = served.sim.cache.lookup(prompt, breakpoints)

        completion = _Completion(served, req, prompt, cached, written, ttft)
        self._start(completion, served, req, prompt, room if limit is None else limit)
        if req.stream:
            return StreamingResponse(completion.stream(), media_type="text/event-stream", headers=headers)
        try:
            return JSONResponse(await completion.body(), headers=headers)
        except WorkerError as e:
            return _error(500, str(e), headers=headers)

    def _start(self, completion: _Completion, served: _Served, req: ChatRequest, prompt: list[int],
               max_tokens: int) -> None:
        if not self._generators:  # echo: the last user message, as if generated token by token
            user = [m.content for m in req.messages if m.role == "user"]
            text = user[-1] if user else ""
            if isinstance(text, list):
                text = "".join(part.get("text", "") for part in text)
            tokens = served.tokenizer(text or "", add_special_tokens=False)["input_ids"]
            for token in tokens[:max_tokens]:
                completion.queue.put_nowait([("token", k, token, 0.0, [(token, 0.0)][: req.top_logprobs or 0])
                                             for k in range(req.n)])
            reason = "length" if len(tokens) > max_tokens else "stop"
            completion.queue.put_nowait([("end", k, reason) for k in range(req.n)])
            return
        loop, queue = asyncio.get_running_loop(), completion.queue

        def emit(events):
            with contextlib.suppress(RuntimeError):  # the server's loop has closed: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, events)

        temperature = 1.0 if req.temperature is None else req.temperature  # OpenAI's defaults
        completion.job = Job(req.model, prompt, req.n, max_tokens, temperature, req.top_p or 1.0, req.seed,
                             (req.top_logprobs or 0) if req.logprobs else None, emit)
        self._generators[req.model].submit(completion.job)

    @staticmethod
    def _fault(u: float, errors: Errors) -> str | None:
        for kind in FAULTS:
            u -= getattr(errors, kind)
            if u < 0:
                return kind
        return None

    @staticmethod
    def _fault_response(fault: str, sim: _Sim, stream: bool, headers: dict) -> Response:
        provider = f"composer-simulated/{sim.name}"
        if fault == "malformed":  # a 200 whose body does not parse, as a provider cut off mid-response sends
            if stream:
                return Response(f"data: {MALFORMED}\n\n", media_type="text/event-stream", headers=headers)
            return Response(MALFORMED, media_type="application/json", headers=headers)
        if fault == "rate_limit":
            wait = sim.profile.errors.retry_after_s
            # Retry-After is whole seconds by the HTTP spec; retry-after-ms (read first by the openai SDK) is exact.
            headers = {**headers, "retry-after": str(math.ceil(wait)), "retry-after-ms": str(round(wait * 1000))}
            return _error(429, "Rate limit exceeded (simulated)", code=429, headers=headers, provider=provider)
        if fault == "payment_required":
            return _error(402, "Insufficient credits (simulated): add credits to continue; retrying will not help",
                          code=402, headers=headers, provider=provider)
        return _error(500, "Internal server error (simulated)", code=500, headers=headers, provider=provider)


@contextlib.contextmanager
def serve(models: dict[str, str | Path], profiles: dict[str, str | dict] | None = None, **kwargs):
    """Start a server on a free port in a background thread; stop it on exit.

    models: served name -> checkpoint path (or Hub name). profiles: served name -> a profile name from
    `profiles_file` or a dict of Profile fields; a model named like a profile in the file gets it anyway.
    kwargs: profiles_file, backend ("generate" or "echo"), seed, host, port (0: a free one), plain (True: HF
    generate's own prefill and cache, only to measure what the server's buy, composer.bench.teachers).
    """
    server = Server(models, profiles, **kwargs)
    try:
        yield server
    finally:
        server.close()


def _pairs(items: list[str], what: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            parser.error(f"expected {what}, got {item!r}")
        pairs[name] = value
    return pairs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer serve",
                                     description="Serve local checkpoints behind an OpenAI-compatible API.")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=PATH",
                        help="serve the checkpoint at PATH as model NAME (repeatable)")
    parser.add_argument("--profile", action="append", default=[], metavar="NAME=PROFILE",
                        help="simulate provider PROFILE for model NAME (repeatable; a model named like a profile "
                             "gets it without this)")
    parser.add_argument("--profiles", type=Path, default=PROFILES_FILE, metavar="FILE",
                        help=f"provider profiles YAML (default: {PROFILES_FILE})")
    parser.add_argument("--no-generate", action="store_true",
                        help="echo backend: answer with the last user message, run no model")
    parser.add_argument("--seed", type=int, default=0, help="seeds sampling without a request seed, and the simulation")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    args = parser.parse_args(argv)
    models = _pairs(args.model, "NAME=PATH", parser)
    profiles = _pairs(args.profile, "NAME=PROFILE", parser)
    # SIGTERM (a parent's terminate()) unwinds like Ctrl-C, so the server closes its socket and worker.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with serve(models, profiles, profiles_file=args.profiles, backend="echo" if args.no_generate else "generate",
                   seed=args.seed, host=args.host, port=args.port) as server:
            print(f"serving {', '.join(models)} at {server.base_url}", flush=True)
            threading.Event().wait()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
