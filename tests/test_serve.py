"""composer.serve through the real openai SDK: protocol shape, sampling controls, tools, usage, simulated providers.

    .venv/bin/pytest tests/test_serve.py

The tiny model is random, so generated text is checked for structure, never content; exact content comes from
the echo backend (the completion is the last user message). Each injected fault is observed with the SDK's own
retries off, except where the test is about those retries.
"""

import asyncio
import json
import logging
import re
import shutil
import time

import openai
import pytest
import torch

from composer.models import load_model
from composer.providers import PROFILES_FILE, Profile, load_profiles
from composer.serve import BYTE_LEVEL, Server, parse_tool_calls, serve

KEY = "sk-local-unused"
HELLO = [{"role": "user", "content": "Fix the failing test in tests/test_queue.py."}]
TOOLS = [{"type": "function", "function": {"name": "run_tests", "description": "Run the test suite.",
                                           "parameters": {"type": "object", "properties": {}}}}]
TOOL_TEXT = 'Let me run them.<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>'


@pytest.fixture(scope="module")
def gen(tiny):
    with serve(models={"student": tiny}, seed=0) as server:
        yield server


@pytest.fixture(scope="module")
def echo(tiny):
    with serve(models={"echo": tiny}, backend="echo") as server:
        yield server


def client(server, **kwargs):
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, **kwargs)


def prompt_length(tokenizer, messages, tools=None):
    return len(tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"])


def stream_text(chunks, index=0):
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == index)


# ---------------------------------------------------------------------------------------------------------
# Protocol on the tiny model


def test_start_and_stop(tiny):
    start = time.monotonic()
    with serve(models={"student": tiny}) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        thread = server._thread
    assert not thread.is_alive()  # stopped: the server's thread ended
    assert time.monotonic() - start < 60  # a hang guard only (about a second; a benchmark's business, not a test's)


def test_models_endpoint(gen):
    assert [m.id for m in client(gen).models.list()] == ["student"]


def test_completion_structure_and_usage(gen, tokenizer):
    raw = client(gen).chat.completions.with_raw_response.create(model="student", messages=HELLO, max_tokens=6)
    r = raw.parse()
    assert "x-composer-simulated" not in raw.headers and not hasattr(r, "provider")  # a local model: not simulated
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "student"
    [choice] = r.choices
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length") and choice.logprobs is None
    assert r.usage.prompt_tokens == prompt_length(tokenizer, HELLO)
    assert 1 <= r.usage.completion_tokens <= 6
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_stream_matches_non_stream_for_a_seed(gen):
    c = client(gen)
    args = dict(model="student", messages=HELLO, max_tokens=12, temperature=1.0, seed=7)
    whole = c.chat.completions.create(**args)
    chunks = list(c.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.object == "chat.completion.chunk" and ch.id == chunks[0].id for ch in chunks)
    assert stream_text(chunks) == whole.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_async_client(gen):
    async def main():
        c = openai.AsyncOpenAI(base_url=gen.base_url, api_key=KEY, max_retries=0)
        r = await c.chat.completions.create(model="student", messages=HELLO, max_tokens=5)
        stream = await c.chat.completions.create(model="student", messages=HELLO, max_tokens=5, stream=True)
        chunks = [chunk async for chunk in stream]
        await c.close()
        return r, chunks

    r, chunks = asyncio.run(main())
    assert r.choices[0].message.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_seed_reproducible(gen):
    c = client(gen)

    def sample(seed):
        r = c.chat.completions.create(model="student", messages=HELLO, max_tokens=16, temperature=1.0, seed=seed,
                                      logprobs=True)
        return r.choices[0].message.content, [t.logprob for t in r.choices[0].logprobs.content]

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_n_choices(gen):
    c = client(gen)
    r = c.chat.completions.create(model="student", messages=HELLO, max_tokens=8, n=3, logprobs=True)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == sum(len(ch.logprobs.content) for ch in r.choices)
    greedy = c.chat.completions.create(model="student", messages=HELLO, max_tokens=8, n=3, temperature=0)
    assert len({ch.message.content for ch in greedy.choices}) == 1 and len(greedy.choices) == 3


def test_logprobs_are_the_models_raw_distribution(gen, tiny, tokenizer):
    """Shape as OpenAI's, values from the untempered model: recomputed here with one forward pass."""
    r = client(gen).chat.completions.create(model="student", messages=HELLO, max_tokens=8, temperature=1.7,
                                            logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True) and entry.logprob <= tops[0] + 1e-6
    # byte-level BPE: a token's bytes spell its vocabulary entry, which gives back its id
    unicode_of = {byte: char for char, byte in BYTE_LEVEL.items()}
    ids = [tokenizer.convert_tokens_to_ids("".join(unicode_of[b] for b in e.bytes)) for e in content]
    prompt = tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]
    with torch.no_grad():
        logits = load_model(tiny)(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
    expected = torch.log_softmax(logits.float(), -1)[torch.arange(len(ids)), torch.tensor(ids)]
    assert torch.allclose(expected, torch.tensor([e.logprob for e in content]), atol=1e-4)


def test_stop_strings_on_generated_text(gen):
    """Greedy decoding twice: the second run, stopped at a piece of the first, returns what came before it."""
    c = client(gen)
    args = dict(model="student", messages=HELLO, temperature=0, max_tokens=24)
    full = c.chat.completions.create(**args).choices[0].message.content
    stop = full[8:11]
    assert len(stop) == 3
    r = c.chat.completions.create(**args, stop=[stop])
    assert r.choices[0].message.content == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    chunks = list(c.chat.completions.create(**args, stop=stop, stream=True))
    assert stream_text(chunks) == full[: full.index(stop)]


def test_concurrent_async_requests_all_complete(gen):
    async def main():
        c = openai.AsyncOpenAI(base_url=gen.base_url, api_key=KEY, max_retries=0, timeout=60)

        async def one(i):
            args = dict(model="student", messages=[{"role": "user", "content": f"task {i}"}], max_tokens=8,
                        seed=i if i % 4 == 0 else None, n=1 + i % 2)
            if i % 3 == 0:
                return [chunk async for chunk in await c.chat.completions.create(**args, stream=True)][-1]
            return await c.chat.completions.create(**args)

        results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(20))), timeout=60)
        await c.close()
        return results

    results = asyncio.run(main())
    assert len(results) == 20
    assert all(r.choices[0].finish_reason in ("stop", "length") for r in results)


def test_models_generate_in_parallel_and_each_seed_gives_what_it_gives_alone(tiny, tmp_path):
    """Two models (distinct weights) have a worker thread each, so a long generation of one does not hold the other;
    sampling draws from each job's own RNG, so seeded answers under concurrency are the sequential ones."""
    other = tmp_path / "other"
    shutil.copytree(tiny, other)
    args = dict(messages=HELLO, max_tokens=48, temperature=1.0, n=3, logprobs=True)

    def answers(responses):
        return [[(ch.message.content, [t.logprob for t in ch.logprobs.content]) for ch in r.choices] for r in responses]

    with serve(models={"a": tiny, "b": other, "a-again": tiny}, seed=0) as server:
        workers = {name: id(worker) for name, worker in server._generators.items()}
        assert workers["a"] == workers["a-again"] != workers["b"]  # one worker per copy of the weights
        c = client(server)
        alone = [c.chat.completions.create(model=m, seed=seed, **args) for m, seed in (("a", 1), ("b", 2), ("a", 3))]

        async def together():
            ac = openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60)
            responses = await asyncio.gather(*(ac.chat.completions.create(model=m, seed=seed, **args)
                                               for m, seed in (("a", 1), ("b", 2), ("a", 3))))
            await ac.close()
            return responses

        assert answers(asyncio.run(together())) == answers(alone)
    assert answers(alone)[0] != answers(alone)[2]  # the seed matters


# ---------------------------------------------------------------------------------------------------------
# Echo backend: exact content, token counts, stop strings, tool calls


def test_usage_counts_equal_the_tokenizers(echo, tokenizer):
    text = "def add(a, b):\n    return a - b  # the bug"
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": text}]
    r = client(echo).chat.completions.create(model="echo", messages=messages)
    assert r.choices[0].message.content == text and r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == prompt_length(tokenizer, messages)
    assert r.usage.completion_tokens == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    short = client(echo).chat.completions.create(model="echo", messages=messages, max_completion_tokens=3)
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"


def test_stop_strings_on_echo(echo):
    c = client(echo)
    messages = [{"role": "user", "content": "alpha beta STOP gamma"}]
    r = c.chat.completions.create(model="echo", messages=messages, stop=["STOP", "zeta"])
    assert r.choices[0].message.content == "alpha beta " and r.choices[0].finish_reason == "stop"
    unstopped = c.chat.completions.create(model="echo", messages=messages)
    assert r.usage.completion_tokens < unstopped.usage.completion_tokens
    chunks = list(c.chat.completions.create(model="echo", messages=messages, stop="STOP", stream=True))
    assert stream_text(chunks) == "alpha beta "


def test_tool_calls(echo):
    c = client(echo)
    messages = [{"role": "user", "content": TOOL_TEXT}]
    r = c.chat.completions.create(model="echo", messages=messages, tools=TOOLS)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and message.content == "Let me run them."
    [call] = message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "run_tests" and json.loads(call.function.arguments) == {}

    chunks = list(c.chat.completions.create(model="echo", messages=messages, tools=TOOLS, stream=True))
    assert stream_text(chunks) == "Let me run them."  # nothing of the block leaks into content
    deltas = [call for ch in chunks if ch.choices for call in ch.choices[0].delta.tool_calls or []]
    assert [(d.index, d.function.name, d.function.arguments) for d in deltas] == [(0, "run_tests", "{}")]
    assert deltas[0].id.startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    plain = c.chat.completions.create(model="echo", messages=messages, tools=TOOLS, tool_choice="none")
    assert plain.choices[0].message.content == TOOL_TEXT and not plain.choices[0].message.tool_calls


def test_tools_are_rendered_into_the_prompt(echo, tokenizer):
    c = client(echo)
    with_tools = c.chat.completions.create(model="echo", messages=HELLO, tools=TOOLS).usage.prompt_tokens
    assert with_tools == prompt_length(tokenizer, HELLO, TOOLS) > c.chat.completions.create(
        model="echo", messages=HELLO).usage.prompt_tokens


def test_tool_call_parser():
    text = ('thinking done\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
            '<tool_call>{"name": "run_tests", "arguments": "{\\"k\\": \\"x\\"}"}</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == "thinking done\n"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("read_file", {"path": "a.py"}), ("run_tests", {"k": "x"})]
    assert len({c["id"] for c in calls}) == 2
    for broken in ('<tool_call>{"name": "run_tests", "arguments": {}}',  # never closed (cut by max_tokens)
                   "<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
                   "<tool_call>[1, 2]</tool_call>", "no calls at all"):
        assert parse_tool_calls(broken) == (broken, [])


# ---------------------------------------------------------------------------------------------------------
# Errors the server itself returns


def test_unknown_model_is_404(gen):
    with pytest.raises(openai.NotFoundError) as e:
        client(gen).chat.completions.create(model="gpt-404", messages=HELLO)
    assert e.value.status_code == 404
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    assert "gpt-404" in e.value.body["message"]


@pytest.mark.parametrize("args, param", [
    (dict(temperature=5), "temperature"),
    (dict(n=0), "n"),
    (dict(top_p=0), "top_p"),
    (dict(stop=["a", "b", "c", "d", "e"]), "stop"),
    (dict(top_logprobs=2), "top_logprobs"),
    (dict(max_tokens=10**6), "max_tokens"),
    (dict(messages=[]), "messages"),
    (dict(messages=[{"role": "robot", "content": "hi"}]), "messages[0].role"),
    (dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     "messages[0].content[0]"),
])
def test_bad_request_is_400_naming_the_field(gen, args, param):
    with pytest.raises(openai.BadRequestError) as e:
        client(gen).chat.completions.create(**{"model": "student", "messages": HELLO, **args})
    assert e.value.status_code == 400
    assert e.value.body["param"] == param and e.value.body["type"] == "invalid_request_error"
    assert e.value.body["message"]


# ---------------------------------------------------------------------------------------------------------
# Simulated providers


def fault_server(tiny, kind, rate=1.0, **errors):
    return serve(models={"teacher": tiny}, profiles={"teacher": {"errors": {kind: rate, **errors}}}, backend="echo")


def test_rate_limit_carries_retry_after(tiny):
    with fault_server(tiny, "rate_limit", retry_after_s=0.5) as server:
        with pytest.raises(openai.RateLimitError) as e:
            client(server).chat.completions.create(model="teacher", messages=HELLO)
    headers = e.value.response.headers
    assert headers["retry-after"] == "1" and headers["retry-after-ms"] == "500"
    assert headers["x-composer-simulated"] == "true"
    assert e.value.body["code"] == 429 and e.value.response.json()["provider"] == "composer-simulated/custom"


def test_server_error_is_500(tiny):
    with fault_server(tiny, "server_error") as server:
        with pytest.raises(openai.InternalServerError) as e:
            client(server).chat.completions.create(model="teacher", messages=HELLO)
    assert e.value.status_code == 500


def test_payment_required_is_402_and_not_retried(tiny):
    statuses = []
    hooks = {"response": [lambda response: statuses.append(response.status_code)]}
    with fault_server(tiny, "payment_required") as server:
        c = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=2,
                          http_client=openai.DefaultHttpxClient(event_hooks=hooks))
        with pytest.raises(openai.APIStatusError) as e:
            c.chat.completions.create(model="teacher", messages=HELLO)
    assert e.value.status_code == 402 and statuses == [402]


def test_malformed_body(tiny):
    with fault_server(tiny, "malformed") as server:
        c = client(server)
        with pytest.raises(json.JSONDecodeError):
            c.chat.completions.create(model="teacher", messages=HELLO)
        with pytest.raises(json.JSONDecodeError):
            list(c.chat.completions.create(model="teacher", messages=HELLO, stream=True))


def test_stall_times_the_client_out_and_does_not_hold_the_stop(tiny):
    start = time.monotonic()
    with fault_server(tiny, "stall", stall_s=600) as server:
        with pytest.raises(openai.APITimeoutError):  # the outcome: a stalled answer never came, the client gave up
            client(server, timeout=0.5).chat.completions.create(model="teacher", messages=HELLO)
    # stopping did not wait out the 600 s stall (uvicorn's graceful shutdown is cut at 1 s): a hang guard
    assert time.monotonic() - start < 120


def test_sdk_retries_honour_retry_after(tiny, caplog):
    """429s at rate 0.5: the SDK (max_retries=2) gets through, waiting what Retry-After says (its own backoff
    would wait at least 0.375 s). The waits are read from the SDK's own log line, not timed: a loaded machine
    stretches the gaps between requests, not what the SDK chose to wait."""
    caplog.set_level(logging.INFO, logger="openai")
    log = []
    hooks = {"response": [lambda response: log.append((time.monotonic(), response.status_code))]}
    with fault_server(tiny, "rate_limit", rate=0.5, retry_after_s=0.05) as server:
        c = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=2,
                          http_client=openai.DefaultHttpxClient(event_hooks=hooks))
        for i in range(10):
            log.clear()
            try:
                c.chat.completions.create(model="teacher", messages=[{"role": "user", "content": f"step {i}"}])
            except openai.RateLimitError:
                assert [status for _, status in log] == [429] * 3  # only after every retry was spent
                continue
            if log[0][1] == 429:
                break
        else:
            pytest.fail("no request succeeded after a 429 in 10 tries")
    assert [status for _, status in log][-1] == 200 and set(s for _, s in log[:-1]) == {429}
    waits = [float(w) for w in re.findall(r"Retrying request to \S+ in ([\d.]+) seconds", caplog.text)]
    assert waits and all(w == pytest.approx(0.05) for w in waits), waits  # Retry-After's, never its own backoff


def test_faults_are_seeded_by_request(tiny):
    def statuses(seed):
        profile = {"errors": {"rate_limit": 0.5, "retry_after_s": 0}}
        with serve(models={"teacher": tiny}, profiles={"teacher": profile}, backend="echo", seed=seed) as server:
            c = client(server)
            out = []
            for _ in range(12):
                try:
                    c.chat.completions.create(model="teacher", messages=HELLO)
                    out.append(200)
                except openai.RateLimitError:
                    out.append(429)
            return out

    first = statuses(0)
    assert first == statuses(0) and first != statuses(1)
    assert set(first) == {200, 429}


def test_simulated_latency(tiny):
    profile = {"latency": {"ttft_median_s": 0.3, "per_token_s": 0.02}}
    messages = [{"role": "user", "content": "one two three four five six"}]
    with serve(models={"teacher": tiny}, profiles={"teacher": profile}, backend="echo") as server:
        c = client(server)
        start = time.monotonic()
        r = c.chat.completions.create(model="teacher", messages=messages)
        elapsed = time.monotonic() - start
        assert elapsed >= 0.3 + (r.usage.completion_tokens - 1) * 0.02
        start = time.monotonic()
        stream = c.chat.completions.create(model="teacher", messages=messages, stream=True)
        arrivals = [(time.monotonic() - start, chunk) for chunk in stream]
        assert all(chunk.provider == "composer-simulated/custom" for _, chunk in arrivals)
        assert arrivals[0][0] >= 0.3  # the very first chunk (the role) waits for the first token
        assert arrivals[-1][0] >= 0.3 + (r.usage.completion_tokens - 1) * 0.02


CONTEXT = " ".join(f"def helper_{i}(x): return x + {i}" for i in range(40))  # a long shared prefix


def ask(c, question, cache_control=False):
    system = {"type": "text", "text": CONTEXT}
    if cache_control:
        system["cache_control"] = {"type": "ephemeral"}
    return c.chat.completions.create(model="teacher", messages=[
        {"role": "system", "content": [system]}, {"role": "user", "content": question}]).usage


def test_automatic_prompt_caching(tiny):
    prices = {"input": 1.0, "output": 2.0, "cache_read": 0.1}
    profile = {"prices": prices, "cache": {"mode": "automatic", "block": 16, "min_tokens": 32}}
    with serve(models={"teacher": tiny}, profiles={"teacher": profile}, backend="echo") as server:
        c = client(server)
        first, second = ask(c, "Which helper adds 7?"), ask(c, "Which helper adds 9?")
    assert first.prompt_tokens > 300 and first.prompt_tokens_details.cached_tokens == 0
    cached = second.prompt_tokens_details.cached_tokens
    assert cached > 300 and cached % 16 == 0 and cached < second.prompt_tokens
    assert first.cost == pytest.approx((first.prompt_tokens * 1.0 + first.completion_tokens * 2.0) / 1e6)
    assert second.cost == pytest.approx(((second.prompt_tokens - cached) * 1.0 + cached * 0.1
                                         + second.completion_tokens * 2.0) / 1e6)
    assert second.cost < first.cost


def test_explicit_prompt_caching_needs_cache_control(tiny):
    prices = {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.25}
    profile = {"prices": prices, "cache": {"mode": "explicit", "min_tokens": 32}}
    with serve(models={"teacher": tiny}, profiles={"teacher": profile}, backend="echo") as server:
        c = client(server)
        unmarked = [ask(c, "Which helper adds 7?"), ask(c, "Which helper adds 9?")]
        write, read = ask(c, "Which helper adds 7?", True), ask(c, "Which helper adds 9?", True)
    assert all(u.prompt_tokens_details.cached_tokens == 0 == u.prompt_tokens_details.cache_write_tokens
               for u in unmarked)
    written = write.prompt_tokens_details.cache_write_tokens
    assert written > 300 and write.prompt_tokens_details.cached_tokens == 0
    assert write.cost > unmarked[0].cost  # a cache write costs more than plain input
    assert read.prompt_tokens_details.cached_tokens == written and read.cost < unmarked[1].cost


def test_named_profiles():
    profiles = load_profiles()
    assert {"zero", "anthropic/claude-opus-4.7", "openai/gpt-5", "deepseek/deepseek-v4-pro"} <= set(profiles)
    assert profiles["zero"] == Profile()  # no latency, free, no errors
    for name in ("anthropic/claude-opus-4.7", "openai/gpt-5", "deepseek/deepseek-v4-pro"):
        p = profiles[name]
        assert p.prices.input > 0 and p.prices.output > p.prices.input and p.prices.cache_read < p.prices.input
        assert p.latency.ttft_median_s > 0 and p.errors.payment_required == 0 == p.errors.stall
    assert profiles["anthropic/claude-opus-4.7"].cache.mode == "explicit"
    assert profiles["openai/gpt-5"].cache.mode == profiles["deepseek/deepseek-v4-pro"].cache.mode == "automatic"
    sims = Server._simulations({"openai/gpt-5": "p", "student": "p"}, {"student": "zero"}, PROFILES_FILE)
    assert {model: sim.name for model, sim in sims.items()} == {"openai/gpt-5": "openai/gpt-5", "student": "zero"}


def test_bad_profiles_are_refused(tiny, tmp_path):
    with pytest.raises(ValueError, match="no profile"):
        serve(models={"t": tiny}, profiles={"t": "nope"}, backend="echo").__enter__()
    with pytest.raises(ValueError, match="not served"):
        serve(models={"t": tiny}, profiles={"other": "zero"}, backend="echo").__enter__()
    typo = tmp_path / "providers.yaml"
    typo.write_text("fast:\n  latency: {ttft_median: 1}\n")
    with pytest.raises(ValueError, match="fast"):
        load_profiles(typo)


def test_cli_rejects_a_malformed_model_argument(capsys):
    from composer.serve import main

    with pytest.raises(SystemExit) as e:
        main(["--model", "no-path-here"])
    assert e.value.code == 2 and "NAME=PATH" in capsys.readouterr().err


def test_verifiers_client(echo, monkeypatch):
    """PRIME-RL's environment layer (verifiers v1) talks to the server through its own eval client."""
    from verifiers.v1.clients.eval import EvalClient
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.dialects.chat import ChatDialect
    from verifiers.v1.types import SamplingConfig

    monkeypatch.setenv("COMPOSER_LOCAL_KEY", "sk-local-unused")
    verifiers_client = EvalClient(EvalClientConfig(base_url=echo.base_url, api_key_var="COMPOSER_LOCAL_KEY"))
    body = {"model": "echo", "messages": [{"role": "user", "content": "run the tests"}]}
    response = asyncio.run(verifiers_client.get_response(ChatDialect(), body, SamplingConfig(max_tokens=8)))
    assert response.model == "echo"
    assert response.message.content == "run the tests"  # the echo backend returns the last user message
    assert response.usage.completion_tokens > 0
