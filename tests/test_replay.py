"""composer.replay against the local server's fault injection, kill and resume, the key canary, the projection.

    .venv/bin/pytest tests/test_replay.py

Every fault kind the server injects (429 with Retry-After, 500, a malformed 200, a stall past the client's
timeout, 402) must leave each planned call answered or recorded as failed with its reason, the ledger
consistent with the records, and the budget cap unbroken.
"""

import asyncio
import json
import math
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import pytest

from composer import prices, replay, run, stand_ins, teachers
from composer.bench.replay import synthetic_traces
from composer.paths import ROOT
from composer.serve import serve
from composer.teachers import TeacherQuery, TeacherSpec
from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall

PRICES = {"input": 1.25, "output": 10.0, "cache_read": 0.125}
CANARY = "sk-or-v1-canary-" + "c0ffee" * 8


@pytest.fixture(scope="module")
def tokenizer():
    return stand_ins.echo_tokenizer_dir()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("COMPOSER_TEST_KEY", CANARY)
    return CANARY


def specs(base_url, **overrides):
    return [TeacherSpec(**{"name": "t", "model": "openai/gpt-5", "base_url": base_url, "api_key_env": "COMPOSER_TEST_KEY",
                           "max_retries": 1, "timeout_s": 5.0, **overrides})]


def simulated(tokenizer, **profile):
    return serve(models={"openai/gpt-5": tokenizer}, profiles={"openai/gpt-5": {"prices": PRICES, **profile}},
                 backend="echo", seed=0)


def ledger_rows(store_path):
    with sqlite3.connect(store_path) as db:
        return db.execute("SELECT key, status, usd, worst FROM ledger").fetchall()


def check_accounts(result, cap):
    """Records and ledger agree: each answer paid once at its usage.cost, unaccounted attempts at their worst."""
    rows = ledger_rows(result.store_path)
    settled = Counter(k for k, status, _, _ in rows if status == "settled")
    assert all(n == 1 for n in settled.values()), "an answer was paid twice"
    answered = [q for q in result.records if q.error_kind is None and not q.cached]
    assert sorted(settled) == sorted(q.request_key for q in answered)
    assert sum(usd for _, status, usd, _ in rows if status == "settled") == pytest.approx(
        sum(q.cost_usd for q in answered))
    assert sum(usd for _, status, usd, _ in rows if status in ("abandoned", "unsettled")) == pytest.approx(
        sum(q.unsettled_usd for q in result.records))
    assert all(usd == 0 for _, status, usd, _ in rows if status.startswith("http "))
    assert result.ledger["committed_usd"] <= cap + 1e-12


def test_every_fault_ends_answered_or_failed_with_its_reason(tokenizer, key, tmp_path):
    faults = {"rate_limit": 0.15, "server_error": 0.15, "malformed": 0.1, "stall": 0.1, "retry_after_s": 0.05,
              "stall_s": 1.0}
    traces = synthetic_traces(6, 4)
    with simulated(tokenizer, errors=faults) as server:
        result = asyncio.run(replay.replay(traces, specs(server.base_url, timeout_s=0.3), tmp_path, budget_usd=5.0))
    assert result.complete and len(result.records) == 24 and len(result.steps) == 24
    assert len(replay.read_queries(result.queries_path)) == 24  # nothing lost between memory and disk
    kinds = Counter(q.error_kind for q in result.records)
    assert set(kinds) <= {None, "rate_limit", "server_error", "malformed", "timeout"}, kinds
    assert kinds[None] >= 12, kinds
    for q in result.records:
        if q.error_kind is None:
            assert q.parse_error and q.distribution is None and q.cost_source == "usage.cost"  # an echoed question
        else:
            assert q.error and q.raw_text is None and q.cost_usd is None
    assert any(q.attempts > 1 and q.error_kind is None for q in result.records), "no fault was retried into an answer"
    check_accounts(result, 5.0)


@pytest.mark.parametrize("fault, kind, status", [
    ({"rate_limit": 1.0, "retry_after_s": 0.3}, "rate_limit", "http 429"),
    ({"server_error": 1.0}, "server_error", "http 500"),
    ({"malformed": 1.0}, "malformed", "unsettled"),
    ({"stall": 1.0, "stall_s": 1.0}, "timeout", "abandoned"),
])
def test_each_fault_alone(tokenizer, key, tmp_path, fault, kind, status):
    with simulated(tokenizer, errors=fault) as server:
        result = asyncio.run(replay.replay(synthetic_traces(1, 2), specs(server.base_url, timeout_s=0.3), tmp_path,
                                           budget_usd=5.0))
    assert result.complete and [q.error_kind for q in result.records] == [kind, kind]
    rows = ledger_rows(result.store_path)
    assert {s for _, s, _, _ in rows} == {status}
    retried = kind != "malformed"  # the SDK retries 429, 5xx and timeouts, not a 200 it could not read
    assert [q.attempts for q in result.records] == [2 if retried else 1] * 2
    if kind == "rate_limit":
        assert all(q.latency_s >= 0.3 for q in result.records)  # Retry-After honoured
    if status in ("unsettled", "abandoned"):  # maybe billed: counted at the worst case until accounted for
        assert all(q.unsettled_usd > 0 for q in result.records)
    check_accounts(result, 5.0)


def test_payment_required_stops_the_run(tokenizer, key, tmp_path):
    with simulated(tokenizer, errors={"payment_required": 1.0}) as server:
        result = asyncio.run(replay.replay(synthetic_traces(1, 5), specs(server.base_url), tmp_path, budget_usd=5.0))
    assert not result.complete and result.stop_reason == "payment_required"
    assert [q.error_kind for q in result.records] == ["payment_required"]  # no further step was sent
    assert [r[1] for r in ledger_rows(result.store_path)] == ["http 402"]  # 402 is not retried


def test_concurrency_zero_is_refused_not_a_hang(key, tmp_path):
    # Zero slots: every call would wait forever for one (the timeout turns that hang into a failure).
    run = replay.replay(synthetic_traces(1, 2), specs("http://127.0.0.1:9/v1"), tmp_path, concurrency=0)
    with pytest.raises(ValueError, match="concurrency must be >= 1, got 0"):
        asyncio.run(asyncio.wait_for(run, timeout=10))


def test_budget_cap_stops_cleanly_and_is_never_exceeded(tokenizer, key, tmp_path):
    traces = synthetic_traces(2, 6)
    with simulated(tokenizer) as server:
        s = specs(server.base_url, max_tokens=200)
        worst = teachers.worst_case_usd(prices.guard_prices(s[0].model), teachers.teacher_messages(
            traces["synthetic-0"][5].state.messages, s[0]), 200)
        cap = 3 * worst  # a few calls fit, the whole plan (12 calls) does not
        result = asyncio.run(replay.replay(traces, s, tmp_path, budget_usd=cap, concurrency=2))
    assert not result.complete and result.stop_reason == "budget"
    refused = [q for q in result.records if q.error_kind == "budget"]
    assert refused and all(q.attempts == 0 for q in refused)
    assert sum(q.cost_usd or 0 for q in result.records) <= cap
    check_accounts(result, cap)


# The fast tier kills once, at a point drawn with the run's seed; the slow tier three times over.
@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_resume_after_kills_at_random_points_never_repays_a_stored_answer(tokenizer, key, tmp_path, kills, test_seed):
    traces = synthetic_traces(3, 10)  # 30 calls, 3 in flight: kills after 1-3 new answers each leave most to do
    script = """
import asyncio, sys
from composer import replay
from composer.bench.replay import synthetic_traces
from composer.teachers import TeacherSpec
spec = TeacherSpec(name="t", model="openai/gpt-5", base_url=sys.argv[1], api_key_env="COMPOSER_TEST_KEY")
asyncio.run(replay.replay(synthetic_traces(3, 10), [spec], sys.argv[2], budget_usd=5.0))
"""
    queries, store = tmp_path / replay.QUERIES_FILE, tmp_path / replay.STORE_FILE

    def stored() -> int:
        try:
            with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:  # WAL: readable while the run writes
                return db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet, or its tables not yet
            return 0

    rng = random.Random(test_seed)
    with simulated(tokenizer, latency={"ttft_median_s": 0.3}) as server:
        for _ in range(kills):  # each run killed after 1-3 new answers, with a random delay on top
            target = stored() + rng.randint(1, 3)
            proc = subprocess.Popen([sys.executable, "-c", script, server.base_url, str(tmp_path)], cwd=ROOT,
                                    stderr=subprocess.DEVNULL)
            deadline = time.time() + 300  # a hang guard: the poll ends at the target
            while time.time() < deadline and proc.poll() is None and stored() < target:
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.1))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        lines = queries.read_text(encoding="utf-8").splitlines(keepends=True)
        before = [TeacherQuery.model_validate_json(line) for line in lines if line.endswith("\n")]  # a kill may tear one
        assert stored() < 30, "the last kill came mid-run"
        result = asyncio.run(replay.replay(traces, specs(server.base_url), tmp_path, budget_usd=5.0))
    assert result.complete and len(result.records) == 30 and result.ledger["runs"] == kills + 1
    assert {q.request_key for q in before if q.error_kind is None} <= {q.request_key for q in result.records if q.cached}
    with sqlite3.connect(result.store_path) as db:
        stored = db.execute("SELECT key, created FROM answers").fetchall()
        sent = db.execute("SELECT run, key, at FROM ledger ORDER BY id").fetchall()
    for run_id in dict.fromkeys(r for r, _, _ in sent):  # each run, in order: nothing it sent was stored before it
        began = min(at for r, _, at in sent if r == run_id)
        assert not {k for r, k, _ in sent if r == run_id} & {k for k, created in stored if created < began}
    rows = ledger_rows(result.store_path)
    settled = Counter(k for k, status, _, _ in rows if status == "settled")
    assert sorted(settled) == sorted(q.request_key for q in result.records) and set(settled.values()) == {1}
    # attempts in flight at a kill may have been billed: they stay at their worst case, and the report says so
    abandoned = {k for k, status, _, _ in rows if status == "abandoned"}
    assert all(usd == worst for _, status, usd, worst in rows if status == "abandoned")
    assert result.ledger["paid_more_than_once"]["calls"] == len(abandoned)
    assert (replay.resume_note(result.ledger) or "").startswith(
        f"resumed: the store holds {kills + 1} runs; {len(abandoned)} calls")


def test_api_key_is_written_nowhere(tokenizer, key, tmp_path):
    with simulated(tokenizer, errors={"rate_limit": 0.3, "server_error": 0.3, "retry_after_s": 0.01}) as server:
        asyncio.run(replay.replay(synthetic_traces(2, 3), specs(server.base_url), tmp_path / "run", budget_usd=5.0))
    reports = tmp_path / "reports"
    teachers_param = [{**d, "api_key_env": "COMPOSER_TEST_KEY"} for d in teachers.DEFAULT_TEACHERS]
    code = run.run("001", reports_dir=reports, overrides={"teachers": teachers_param, "max_traces": 1,
                                                          "steps_per_trace": 1, "time_scale": 0.05,
                                                          "run_dir": str(tmp_path / "notebook-run")})
    assert code == 0
    results = json.loads((reports / "001-teacher-replay-cost.json").read_text())
    assert results["metrics"]["replay"]["calls"] == 3  # the notebook did call its teachers, with the key
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"replay.sqlite", "teacher_queries.jsonl", "executed.ipynb", "001-teacher-replay-cost.html",
            "001-teacher-replay-cost.json"} <= names
    leaked = [str(p) for p in files if CANARY.encode() in p.read_bytes()]
    assert not leaked, f"the API key was written to {leaked}"


def test_step_distributions_aggregate_samples_and_logprobs():
    def q(mode, sample, distribution, text):
        return TeacherQuery(trace_id="t", step=0, teacher=mode, model="m", model_used="m", provider="p", mode=mode,
                            sample=sample, context="full", cache=True, student_action="ls", distribution=distribution,
                            raw_text=text, parse_error=None, request_key=f"{mode}{sample}")

    records = [q("samples", 0, {"ls": 1.0}, "a"), q("samples", 1, {"ls": 1.0}, "b"), q("samples", 2, {"pwd": 1.0}, "c"),
               q("logprobs", 0, {"ls": 0.5, teachers.OTHER: 0.5}, "x"),
               q("logprobs", 1, {"ls": 0.5, teachers.OTHER: 0.5}, "x"),  # the same completion: counted once
               q("logprobs", 2, {"ls": 0.2, teachers.OTHER: 0.8}, "y"),
               q("logprobs", 3, {"pwd": 0.1, teachers.OTHER: 0.9}, "z")]
    d = replay.step_distributions(records)
    assert d[("t", 0, "samples")] == pytest.approx({"ls": 2 / 3, "pwd": 1 / 3})
    assert d[("t", 0, "logprobs")] == pytest.approx({"ls": 0.7, "pwd": 0.1, teachers.OTHER: 0.2})


def test_select_steps():
    assert replay.select_steps(5, "all", 0, "t") == [0, 1, 2, 3, 4]
    picked = replay.select_steps(100, 10, 0, "t")
    assert len(picked) == 10 and picked == sorted(picked) and picked == replay.select_steps(100, 10, 0, "t")
    assert picked != replay.select_steps(100, 10, 0, "u")
    assert len(replay.select_steps(9, 0.5, 0, "t")) == 5 and replay.select_steps(3, 10, 0, "t") == [0, 1, 2]
    with pytest.raises(ValueError):
        replay.select_steps(3, 0, 0, "t")


# -------------------------------------------------------------------------------------------------------------
# The projection, by hand


def hand_trace():
    """Two steps: the task is 2000 cl100k tokens (" a" is one token), the second step adds a turn whose output
    is 500 tokens."""
    task, output = "a" + " a" * 1999, "b" + " b" * 499
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": task}]
    later = chat + [{"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "content": output, "tool_call_id": "c"}]
    action = Action(text="ls", tool_call=ToolCall(name="bash", arguments={"command": "ls"}))
    return {"h": [StepRecord(schema_version=SCHEMA_VERSION, trace_id="h", step=t, state=State(messages=m), action=action,
                             observation=None, reward=None, done=t == 1, truncated=False, source="test")
                  for t, m in enumerate([chat, later])]}


def test_projection_arithmetic_by_hand():
    counter = replay.TokenCounter()

    def n(text):
        return len(counter.encoding.encode_ordinary(text))

    S = n(teachers.TEACHER_SYSTEM + teachers.AGENT_SYSTEM_HEADER + "sys")
    A = n("```bash\nls\n```")
    gpt5 = TeacherSpec(name="gpt5", model="openai/gpt-5", expected_output_tokens=100)
    opus = TeacherSpec(name="opus", model="anthropic/claude-opus-4.7", cache_control=True, expected_output_tokens=100)
    Q5, Qo = n(teachers.question(gpt5)), n(teachers.question(opus))
    table = prices.openrouter_prices("openai/gpt-5")
    assert (table.input, table.cache_read, table.output) == (1.25, 0.125, 10.0)

    def n0(q):  # each message is [start, role, content..., end]; 3 more ids prime the reply
        return (S + 3) + (2000 + 3) + (q + 3) + 3

    def n1(q):
        return (S + 3) + (2000 + 3) + (A + 3) + (500 + 3) + (q + 3) + 3

    rows = replay.project(hand_trace(), [gpt5, opus], cache=True, counter=counter)
    g0, g1, o0, o1 = rows
    assert [r["prompt_tokens"] for r in rows] == [n0(Q5), n1(Q5), n0(Qo), n1(Qo)]
    # GPT-5, automatic caching in 128-token blocks from 1024: step 1 shares system + task + the next message's start
    shared = S + 3 + 2003 + 1
    assert (g0["cached_tokens"], g1["cached_tokens"]) == (0, shared // 128 * 128)
    assert g0["usd"] == pytest.approx((n0(Q5) * 1.25 + 100 * 10) / 1e6)
    hit = shared // 128 * 128
    assert g1["usd"] == pytest.approx(((n1(Q5) - hit) * 1.25 + hit * 0.125 + 100 * 10) / 1e6)
    # Opus, explicit breakpoints: step 0 writes up to the end of its history (the task); step 1 reads that and
    # writes up to the end of its own history (the new turn), at $6.25 per million written and $0.50 read
    m0 = S + 3 + 2003
    assert (o0["cached_tokens"], o0["cache_write_tokens"]) == (0, m0)
    assert (o1["cached_tokens"], o1["cache_write_tokens"]) == (m0, A + 3 + 503)
    assert o0["usd"] == pytest.approx(((n0(Qo) - m0) * 5 + m0 * 6.25 + 100 * 25) / 1e6)
    assert o1["usd"] == pytest.approx(((n1(Qo) - m0 - (A + 506)) * 5 + m0 * 0.5 + (A + 506) * 6.25 + 100 * 25) / 1e6)
    naive = replay.project(hand_trace(), [gpt5, opus], cache=False, counter=counter)
    assert [r["cached_tokens"] + r["cache_write_tokens"] for r in naive] == [0, 0, 0, 0]
    assert naive[3]["usd"] == pytest.approx((n1(Qo) * 5 + 100 * 25) / 1e6)
    assert replay.per_trace_usd(rows) == {"h": pytest.approx(sum(r["usd"] for r in rows))}


def test_projection_samples_mode_reads_the_first_samples_prompt():
    s = TeacherSpec(name="g", model="openai/gpt-5", mode="samples", k=3, expected_output_tokens=10)
    rows = replay.project({"h": hand_trace()["h"][:1]}, [s], cache=True)
    assert [r["sample"] for r in rows] == [0, 1, 2] and rows[0]["cached_tokens"] == 0
    assert rows[1]["cached_tokens"] == rows[2]["cached_tokens"] == rows[0]["prompt_tokens"] // 128 * 128


def test_calibration_on_the_real_traces():
    from composer import traces

    by_trace = traces.group_traces(traces.import_real_traces())
    c = replay.calibrate_tokenizer(dict(list(by_trace.items())[:3]))
    assert c["steps"] > 100 and 1.0 < c["ratio_of_sums"] < 1.5 and math.isfinite(c["fit_slope"])


@pytest.mark.parametrize("errors", [{"server_error": 1.0}, {}])
def test_a_live_run_decides_only_on_answered_calls(tokenizer, key, tmp_path, errors):
    """Every call failing costs $0 and returns at once: without a minimum answered share that passed both gates."""
    with simulated(tokenizer, errors=errors) as server:
        teacher = {"name": "t", "model": "openai/gpt-5", "base_url": server.base_url, "api_key_env": "COMPOSER_TEST_KEY",
                   "max_retries": 0, "expected_output_tokens": 100}
        code = run.run("001", reports_dir=tmp_path, overrides={"backend": "live", "teachers": [teacher], "max_traces": 2,
                                                               "steps_per_trace": 2, "run_dir": str(tmp_path / "run")})
    assert code == 0
    results = json.loads((tmp_path / "001-teacher-replay-cost.json").read_text())
    assert results["metrics"]["replay"]["calls"] == 4
    whys = [c.get("undecided_why") for c in results["criteria"]]
    if errors:
        assert results["verdict"] == "INCONCLUSIVE"
        assert whys == ["0 of 4 replay calls answered, below the stated minimum of 90%"] * 2
        assert results["metrics"]["replay"]["error_rate_by_teacher"]["t"]["estimate"] == 1.0
    else:
        # every call answered: what is left undecided is the smoke scale of 2 traces and 4 steps, not the answers
        assert whys == ["n = 2 traces, below the stated minimum of 10: smoke scale",
                        "n = 4 steps, below the stated minimum of 20: smoke scale"]
        assert results["metrics"]["replay"]["error_rate_by_teacher"]["t"]["estimate"] == 0.0


def test_a_dry_run_is_labelled_as_one_and_not_as_unfinished(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)  # a dry run needs no key: nothing is sent
    assert run.run("001", reports_dir=tmp_path, overrides={"backend": "live", "dry_run": True}) == 0
    results = json.loads((tmp_path / "001-teacher-replay-cost.json").read_text())
    assert results["dry_run"] and results["backend"] == "live" and "replay" not in results["metrics"]
    assert not any("did not complete" in n for n in results["notes"])
    assert "dry run: nothing sent" in (tmp_path / "001-teacher-replay-cost.html").read_text()
