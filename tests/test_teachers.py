"""composer.teachers: the distribution an answer gives, prices and costs, the budget guard, the store.

    .venv/bin/pytest tests/test_teachers.py

Calls go to the local echo server (composer.serve) in this process, with simulated provider profiles written
for each test: it answers with the last user message, so a test controls the answer by the prompt it sends.
"""

import asyncio
import contextlib
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from composer import prices, stand_ins, teachers
from composer.providers import cost
from composer.serve import serve
from composer.teachers import OTHER, BudgetExceeded, Store, Teacher, TeacherSpec
from composer.actions import ParseError

GPT5_PRICES = {"input": 1.25, "output": 10.0, "cache_read": 0.125}


@pytest.fixture(scope="module")
def tokenizer():
    return stand_ins.echo_tokenizer_dir()


def spec(base_url, **overrides) -> TeacherSpec:
    return TeacherSpec(**{"name": "t", "model": "openai/gpt-5", "base_url": base_url, "api_key_env": "COMPOSER_TEST_KEY",
                          "max_retries": 1, "timeout_s": 10.0, **overrides})


def ask(teacher, text, **kwargs):
    """One call whose echoed answer is `text` (the echo backend returns the last user message)."""
    return teacher.ask([{"role": "system", "content": "s"}, {"role": "user", "content": text}], trace_id="tr", step=0,
                       **kwargs)


# -------------------------------------------------------------------------------------------------------------
# Parsing answers


@pytest.mark.parametrize("mode", ["topk", "samples", "logprobs"])
def test_the_echoed_question_is_a_parse_failure(mode):
    """Offline the stand-in echoes the question: it must never parse as a distribution."""
    s = TeacherSpec(name="t", model="openai/gpt-5", mode=mode)
    with pytest.raises(ParseError):
        teachers.distribution_of(s, teachers.question(s), [{"logprob": -0.1}])


def test_logprobs_distribution_is_the_sequence_probability():
    s = TeacherSpec(name="t", model="openai/gpt-5", mode="logprobs")
    d = teachers.distribution_of(s, "```bash\nls\n```", [{"logprob": -0.5}, {"logprob": -0.25}])
    assert d == pytest.approx({"ls": math.exp(-0.75), OTHER: 1 - math.exp(-0.75)})
    with pytest.raises(ParseError, match="logprobs"):
        teachers.distribution_of(s, "```bash\nls\n```", None)


def test_cost_from_usage_cost_and_from_genai_prices(tokenizer, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPOSER_TEST_KEY", "sk-local-test")
    question = "What next?"
    with serve(models={"openai/gpt-5": tokenizer}, profiles={"openai/gpt-5": {"prices": GPT5_PRICES}},
               backend="echo") as server:
        store = Store(tmp_path / "a.sqlite", cap_usd=1.0)
        q = asyncio.run(ask(Teacher(spec(server.base_url), store), question))
    assert q.cost_source == "usage.cost" and q.simulated
    assert q.cost_usd == pytest.approx((q.prompt_tokens * 1.25 + q.completion_tokens * 10) / 1e6)
    assert store.totals()["run"] == {"settled": {"usd": pytest.approx(q.cost_usd), "attempts": 1}}
    empty = tmp_path / "none.yaml"
    empty.write_text("{}\n")
    with serve(models={"openai/gpt-5": tokenizer}, profiles_file=empty, backend="echo") as server:  # no usage.cost
        store = Store(tmp_path / "b.sqlite", cap_usd=1.0)
        q = asyncio.run(ask(Teacher(spec(server.base_url), store), question))
    assert q.cost_source == "genai-prices" and not q.simulated
    assert q.cost_usd == pytest.approx(prices.computed_cost("openai/gpt-5", q.prompt_tokens, 0, 0, q.completion_tokens))


# -------------------------------------------------------------------------------------------------------------
# Budget guard and store


def test_store_reserve_settle_and_cap(tmp_path):
    store = Store(tmp_path / "s.sqlite", cap_usd=1.0)
    a = store.reserve("k1", 0, 0.6)
    with pytest.raises(BudgetExceeded, match="cap"):
        store.reserve("k2", 0, 0.5)  # 0.6 + 0.5 could pass $1
    store.settle(a, 0.1, "settled")
    b = store.reserve("k2", 0, 0.5)
    assert store.committed == pytest.approx(0.6)
    store.close()
    reopened = Store(tmp_path / "s.sqlite", cap_usd=1.0)  # b was in flight when that run "died"
    assert reopened.committed == pytest.approx(0.6)
    assert reopened.totals()["file"]["abandoned"] == {"usd": pytest.approx(0.5), "attempts": 1}
    assert b


def test_store_counts_calls_paid_more_than_once(tmp_path):
    store = Store(tmp_path / "s.sqlite", cap_usd=10.0)
    store.settle(store.reserve("once", 0, 0.5), 0.1, "settled")
    store.settle(store.reserve("refused", 0, 0.5), 0.0, "http 500")  # an error response bills nothing
    store.settle(store.reserve("refused", 1, 0.5), 0.2, "settled")
    store.reserve("killed", 0, 0.5)  # answered by the provider, but the run died before storing it
    store.close()
    resumed = Store(tmp_path / "s.sqlite", cap_usd=10.0)
    resumed.settle(resumed.reserve("killed", 0, 0.5), 0.1, "settled")  # sent again on resume
    totals = resumed.totals()
    assert totals["runs"] == 2
    assert totals["paid_more_than_once"] == {"calls": 1, "extra_usd_at_most": pytest.approx(0.5)}


def test_budget_refuses_before_sending_and_resume_pays_nothing(tokenizer, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPOSER_TEST_KEY", "sk-local-test")
    with serve(models={"openai/gpt-5": tokenizer}, profiles={"openai/gpt-5": {"prices": GPT5_PRICES}},
               backend="echo") as server:
        s = spec(server.base_url, max_tokens=100)
        worst = teachers.worst_case_usd(prices.guard_prices(s.model), [{"role": "system", "content": "s"},
                                                                   {"role": "user", "content": "x" * 50}], 100)
        store = Store(tmp_path / "r.sqlite", cap_usd=2.5 * worst)
        teacher = Teacher(s, store)

        async def three():
            return [await ask(teacher, "x" * 50, sample=i) for i in range(3)]

        first = asyncio.run(three())
        assert [q.error_kind for q in first] == [None, None, None]  # each settles far below its worst case
        store.cap = store.committed + 0.5 * worst  # now the next attempt's worst case does not fit
        refused = asyncio.run(ask(teacher, "x" * 50, sample=3))
        assert refused.error_kind == "budget" and refused.attempts == 0 and refused.cost_usd is None
        assert store.committed <= store.cap
        resumed = asyncio.run(three())  # the same three calls: answered from the store
    assert all(q.cached for q in resumed)
    assert [q.raw_text for q in resumed] == [q.raw_text for q in first]
    assert [q.cost_usd for q in resumed] == [q.cost_usd for q in first]
    assert [q.latency_s for q in resumed] == [q.latency_s for q in first]
    assert store.totals()["file"]["settled"]["attempts"] == 3  # each answer paid once


def test_worst_case_bounds_the_simulated_bill(tokenizer, monkeypatch, tmp_path):
    """The guard's bound holds against the tiny tokenizer's counts (byte-level BPE: a token covers >= 1 byte)."""
    monkeypatch.setenv("COMPOSER_TEST_KEY", "sk-local-test")
    text = "é✓ 字 " * 300 + "\x00\x01 ```bash``` {}" * 20
    with serve(models={"openai/gpt-5": tokenizer}, profiles={"openai/gpt-5": {"prices": GPT5_PRICES}},
               backend="echo") as server:
        s = spec(server.base_url, max_tokens=4000)
        store = Store(tmp_path / "w.sqlite", cap_usd=10.0)
        q = asyncio.run(ask(Teacher(s, store), text))
    worst = teachers.worst_case_usd(prices.guard_prices(s.model), [{"role": "system", "content": "s"},
                                                               {"role": "user", "content": text}], 4000)
    assert 0 < q.cost_usd <= worst


def test_missing_key_is_refused_for_remote_endpoints(monkeypatch, tmp_path):
    monkeypatch.delenv("COMPOSER_TEST_KEY", raising=False)
    with pytest.raises(RuntimeError, match="COMPOSER_TEST_KEY"):
        Teacher(spec("https://openrouter.ai/api/v1"), Store(tmp_path / "k.sqlite", cap_usd=1.0))
    assert teachers.api_key(spec("http://127.0.0.1:9/v1")) == teachers.PLACEHOLDER_KEY


def test_request_body_pins_the_provider_and_marks_cache_breakpoints():
    s = TeacherSpec(name="o", model="anthropic/claude-opus-4.7", provider=["anthropic"], cache_control=True,
                    mode="logprobs", reasoning_effort="low")
    state = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
             {"role": "assistant", "content": "look", "tool_calls": [
                 {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
             {"role": "tool", "content": "a.py", "tool_call_id": "c"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "d", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat a.py"}'}}]},
             {"role": "tool", "content": "print(1)", "tool_call_id": "d"}]
    messages = teachers.teacher_messages(state, s, previous=4)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user", "user"]
    assert messages[0]["content"].endswith("# The agent's system prompt\n\nsys")
    assert teachers.text_of(messages[2]) == "look\n\n```bash\nls\n```"
    marked = [i for i, m in enumerate(messages) if isinstance(m["content"], list)]
    assert marked == [3, 5]  # the previous step's history end (read now) and this step's (written now)
    body = teachers.request_body(s, messages, session="sess")
    assert body["provider"] == {"order": ["anthropic"], "allow_fallbacks": False, "require_parameters": True}
    assert body["logprobs"] is True and body["reasoning"] == {"effort": "low"} and body["session_id"] == "sess"
    window = teachers.teacher_messages(state, s, context="window", window=1)
    assert teachers.text_of(window[2]) == "[1 earlier agent turns omitted]"
    assert isinstance(window[1]["content"], list)  # the task: the one prefix a sliding window keeps
    assert teachers.request_key(s, body, 0) != teachers.request_key(s, body, 1)


def test_the_notebook_defaults_are_the_default_teachers():
    from composer import run
    from composer.paths import NOTEBOOKS

    values = {name: p.default for name, p in run.notebook_parameters(NOTEBOOKS / "001-teacher-replay-cost.ipynb").items()}
    assert values["teachers"] == teachers.DEFAULT_TEACHERS
    assert all(TeacherSpec(**d).api_key_env == "OPENROUTER_API_KEY" for d in values["teachers"])


# -------------------------------------------------------------------------------------------------------------
# Keys echoed back


KEY = "sk-or-v1-canary-" + "c0ffee" * 8
ECHOES = [lambda k: f"Incorrect API key provided: {k[:12]}…{k[-4:]}", lambda k: f"key {k[:8]}***{k[-6:]} is invalid",
          lambda k: f"No auth credentials found for {k[:15]}...", lambda k: f"bad key ({k[:5]}•••{k[-5:]})",
          lambda k: f"the whole key: {k}"]


@contextlib.contextmanager
def echoing_401(message):
    """A loopback endpoint that refuses every call with a 401 whose message echoes (part of) the caller's key."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            key = self.headers["authorization"].removeprefix("Bearer ")
            body = json.dumps({"error": {"message": message(key), "code": 401}}).encode()
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("echo", ECHOES)
def test_echoed_fragments_of_the_key_are_redacted(monkeypatch, tmp_path, echo):
    monkeypatch.setenv("COMPOSER_TEST_KEY", KEY)
    with echoing_401(echo) as base_url:
        teacher = Teacher(spec(base_url), Store(tmp_path / "s.sqlite", cap_usd=1.0))
        query = asyncio.run(ask(teacher, "x"))
    assert query.error_kind == "auth" and "[redacted]" in query.error
    line = query.model_dump_json()
    kept = [KEY[:n] for n in range(4, len(KEY) + 1) if KEY[:n] + "…" in line or KEY[:n] + "*" in line
            or KEY[:n] + "." in line or KEY[:n] + "•" in line]
    kept += [KEY[-n:] for n in range(4, len(KEY) + 1) if "…" + KEY[-n:] in line or "*" + KEY[-n:] in line
             or "•" + KEY[-n:] in line]
    assert not kept and KEY not in line, line


def test_redact_keeps_what_is_not_the_key():
    assert teachers.redact("wait... sk-other***abcd and ...", KEY) == "wait... sk-other***abcd and ..."
    assert teachers.redact("sk-or-v1-xyz***ffee", KEY) == "sk-or-v1-xyz***[redacted]"  # a suffix alone is enough
    assert teachers.redact(None, KEY) is None and teachers.redact("a key", "") == "a key"
