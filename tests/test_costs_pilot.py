"""composer.costs.pilot: the student through an OpenAI-compatible API on CodingEnv, priced, measured, resumable.

    .venv/bin/pytest tests/test_costs_pilot.py

Three endpoints stand in for the live one: a scripted student (a loopback server in this process that answers each
embedded task with its expert plan, so episodes are graded and resolved, with faults it is told to inject), the
zoo's student served by `composer serve` (the real model path: tools rendered, replies parsed), and composer serve's
simulated provider faults. No test reaches beyond loopback.
"""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from composer import policies, stats, traces
from composer.costs import pilot, plan, power
from composer.actions import canonical_action
from composer.env.embedded import tasks
from composer.env.environment import EnvConfig, gold_edits
from composer.env.real import swebench
from composer.paths import ROOT

pytestmark = pytest.mark.usefixtures("module_cache")
MODEL = "qwen/qwen3-8b"  # genai-prices knows its OpenRouter price: the offline runs' dollars come from it
ENV = EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=20.0)


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0, split="test")


class Scripted:
    """A loopback OpenAI-compatible server whose student answers each embedded task with its expert plan (run_tests,
    the gold edits, submit) and, at the second turn of every episode, once with text and no tool call. `faults`:
    per request number (1, 2, ...), a status to answer instead (429, 500) or "malformed" (a 200 whose body is not
    JSON). `delay_s` holds each answer back. `hold(body)`, when given, is asked before each answer: True drops it
    unanswered. `opening`: the first call of every plan."""

    def __init__(self, records, *, faults=None, delay_s=0.0, hold=None, opening=("run_tests", {}), model=MODEL):
        self.plans = {r["problem_statement"].strip(): [opening, *(("edit", e) for e in gold_edits(r)),
                                                       ("submit", {})] for r in records}
        self.faults, self.delay_s, self.hold = dict(faults or {}), delay_s, hold
        self.requests, self.keys, self.lock, self.model = [], [], threading.Lock(), model
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                with scripted.lock:
                    scripted.keys.append(self.headers.get("authorization"))
                scripted._send(self, 200, {"object": "list", "data": [{"id": scripted.model, "object": "model",
                                                                      "supported_parameters": ["tools"]}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with scripted.lock:
                    scripted.requests.append(body)
                    scripted.keys.append(self.headers.get("authorization"))
                    number = len(scripted.requests)
                time.sleep(scripted.delay_s)
                if scripted.hold is not None and scripted.hold(body):
                    return
                fault = scripted.faults.get(number)
                if fault == "malformed":
                    data = b"{not json"
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if fault == "null-choice":
                    scripted._send(self, 200, {"id": "x", "model": scripted.model, "choices": [None]})
                    return
                if fault == "object-arguments":  # the arguments as an object, not the JSON string OpenAI sends
                    answer = scripted.answer(body)
                    call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
                    call["arguments"] = json.loads(call["arguments"])
                    scripted._send(self, 200, answer)
                    return
                if fault is not None:
                    scripted._send(self, fault, {"error": {"message": f"injected {fault}", "code": fault}},
                                   {"retry-after-ms": "10"})
                    return
                scripted._send(self, 200, scripted.answer(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _send(handler, status, payload, headers=None):
        data = json.dumps(payload).encode()
        handler.send_response(status)
        for k, v in {"content-type": "application/json", "content-length": str(len(data)), **(headers or {})}.items():
            handler.send_header(k, v)
        handler.end_headers()
        handler.wfile.write(data)

    def answer(self, body):
        messages = body["messages"]
        plan = self.plans[messages[1]["content"].split("\n\nFix the issue above")[0].strip()]
        assistants = [m for m in messages if m["role"] == "assistant"]
        done = sum(bool(m.get("tool_calls")) for m in assistants)
        if done == 1 and len(assistants) == 1:  # once an episode: text, no tool call
            message = {"role": "assistant", "content": "Let me look at the failing test first."}
        else:
            name, arguments = plan[min(done, len(plan) - 1)]
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call_{done}", "type": "function", "function": {"name": name,
                                                                         "arguments": json.dumps(arguments)}}]}
        prompt = sum(len(json.dumps(m)) for m in messages) // 4
        return {"id": "cmpl", "object": "chat.completion", "model": self.model, "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted(records):
    server = Scripted(records)
    yield server
    server.close()


def run(spec, records, out, **kwargs):
    return asyncio.run(pilot.run(spec, records, out, **{"samples": 2, "budget_usd": 1.0, "max_turns": 8,
                                                        "env_config": ENV, "concurrency": 2, **kwargs}))


# -------------------------------------------------------------------------------------------------------------
# A whole pilot on a student that solves its tasks


def test_a_pilot_grades_every_episode_and_writes_traces_001_and_003_read(scripted, records, tmp_path):
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    assert pilot.preflight(spec, records) == []
    summary = run(spec, records, tmp_path)
    assert summary["complete"] and summary["episodes"] == {"planned": 4, "complete": 4, "errored": 0, "errors": []}
    assert summary["backend"] == "offline"  # a loopback endpoint: a rehearsal, said so
    p1 = summary["pass_at_1"]
    assert (p1["estimate"], p1["tasks"], p1["tasks_solved"], p1["n"]) == (1.0, 2, 2, 4)
    assert p1["high"] == 1.0 and p1["low"] < 1.0
    assert summary["pass_at_k"]["k"] == 2 and summary["pass_at_k"]["estimate"] == 1.0
    assert summary["discordance"]["estimate"] == 0.0 and summary["task_spread"]["sd"] == 0.0
    # one malformed turn an episode: answered by the environment with an error, counted as a step
    assert summary["malformed_turns"] == 4 and summary["submitted"] == 4
    turns = [len(gold_edits(r)) + 3 for r in records]  # run_tests, the edits, submit, and the malformed turn
    assert summary["per_episode"]["turns"] == pytest.approx(sum(turns) / 2)
    assert len(scripted.requests) == 2 * sum(turns)  # every turn asked once
    # the dollars: the student's OpenRouter price of the tokens the server reported, in the ledger too
    episodes = pilot.read_episodes(tmp_path)
    assert summary["ledger"]["committed_usd"] == pytest.approx(sum(e["usd"] for e in episodes))
    assert summary["ledger"]["committed_usd"] > 0
    assert summary["phases"]["grade_s_per_submission"] > 0 and summary["phases"]["turns_per_episode"] > 0
    assert summary["provenance"]["git_sha"] and pilot.read(tmp_path) == summary
    assert summary["graded_by_scan_alone"]["tasks"] == 0  # embedded tasks: every layer grades them
    # both tasks solved: both within reach, their records written for 004's test_tasks
    assert summary["within_reach"]["task_ids"] == sorted(r["instance_id"] for r in records)
    assert swebench.load_instances(tmp_path / pilot.WITHIN_REACH_FILE) == records
    assert f"within the student's reach (2 of 2 tasks that {MODEL} solved" in pilot.reach_scope(
        tmp_path / pilot.WITHIN_REACH_FILE)

    # traces in 002a's schema, one per episode, readable by 001 and 003's loader
    loaded = traces.load_traces(tmp_path / pilot.TRACES_FILE)
    by_trace = traces.group_traces(loaded)
    assert sorted(by_trace) == sorted(f"{r['instance_id']}#{s}" for r in records for s in range(2))
    for steps in by_trace.values():
        assert steps[-1].done and steps[-1].outcome["resolved"] and steps[-1].reward == 1.0
        assert steps[0].state.messages[0] == {"role": "system", "content": policies.SYSTEM}
        actions = [canonical_action(s.action) for s in steps]
        assert actions[1] is None and actions[0] == "run_tests({})" and actions[-1] == "submit({})"
        assert steps[-1].outcome["patch"].startswith("diff --git")
        assert all(s.meta["usage"]["completion_tokens"] == 20 for s in steps)


def test_the_system_prompt_is_the_students_own():
    """The pilot frames the student as the zoo and 002a do (copied, since composer.policies loads torch)."""
    assert pilot.SYSTEM == policies.SYSTEM


def test_a_rerun_pays_for_nothing_it_has(scripted, records, tmp_path):
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    first = run(spec, records[:1], tmp_path)
    asked = len(scripted.requests)
    again = run(spec, records[:1], tmp_path)
    assert len(scripted.requests) == asked and again["pass_at_1"] == first["pass_at_1"]
    # a new episode of the same task (a third sample) is new work; the first two are not redone
    more = run(spec, records[:1], tmp_path, samples=3)
    assert more["episodes"]["complete"] == 3 and len(scripted.requests) == asked * 3 // 2


def test_the_key_is_never_written(scripted, records, tmp_path, monkeypatch):
    key = "sk-or-v1-pilot-sentinel-0123456789abcdef"
    monkeypatch.setenv("COMPOSER_PILOT_KEY", key)
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url, api_key_env="COMPOSER_PILOT_KEY")
    summary = run(spec, records[:1], tmp_path, samples=1)
    assert summary["complete"] and summary["student"]["api_key_env"] == "COMPOSER_PILOT_KEY"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if key.encode() in p.read_bytes()]
    assert key[:20] not in json.dumps(summary)


# -------------------------------------------------------------------------------------------------------------
# Faults: counted, retried within the cap, never a crash


def test_faults_are_retried_by_the_sdk_and_counted(records, tmp_path):
    # request 1: 429, then its retry answers; 3: 500, retried; 5: a 200 that is not JSON (maybe billed: unsettled)
    server = Scripted(records[:1], faults={1: 429, 3: 500, 5: "malformed"})
    try:
        spec = pilot.student_spec(MODEL, base_url=server.base_url, max_retries=2)
        summary = run(spec, records[:1], tmp_path, samples=1)
    finally:
        server.close()
    # the malformed body ends its episode as an error (not graded, retried by a rerun); the retries are counted
    assert summary["episodes"]["errored"] == 1 and not summary["complete"]
    assert "malformed" in summary["episodes"]["errors"][0]
    errored = json.loads(next(tmp_path.glob("episodes/*.error")).read_text())
    assert errored["faults"] == {"retried": 2, "malformed": 1} and errored["unsettled_usd"] > 0
    # a rerun finishes it from where it stopped: the answered turns come from the store
    server = Scripted(records[:1])
    try:
        spec = pilot.student_spec(MODEL, base_url=server.base_url)
        summary = run(spec, records[:1], tmp_path, samples=1)
    finally:
        server.close()
    assert summary["complete"] and summary["pass_at_1"]["estimate"] == 1.0 and summary["answers_from_store"] == 2


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "malformed", "stall", "payment_required"])
def test_each_fault_of_the_simulated_provider_ends_episodes_as_errors_not_the_run(kind, records, tmp_path):
    """composer serve's fault profiles at rate 1: every call fails after the SDK's retries; the run completes its
    bookkeeping, counts the fault, exits incomplete, and grades nothing it did not get."""
    from composer.models import tiny_model
    from composer.serve import serve

    errors = {kind: 1.0, "retry_after_s": 0.01, "stall_s": 30}
    with serve(models={MODEL: tiny_model()}, profiles={MODEL: {"errors": errors}}, backend="echo") as server:
        spec = pilot.student_spec(MODEL, base_url=server.base_url, max_retries=1, timeout_s=1.0, max_tokens=64)
        summary = run(spec, records[:1], tmp_path, samples=2)
    assert summary["episodes"]["complete"] == 0 and summary["episodes"]["errored"] == 2
    assert not summary["complete"] and summary["pass_at_1"] is None
    want = {"rate_limit": "rate_limit", "server_error": "server_error", "malformed": "malformed",
            "stall": "timeout", "payment_required": "payment_required"}[kind]
    assert all(want in e for e in summary["episodes"]["errors"])


def test_the_budget_cap_stops_new_episodes_and_holds(scripted, records, tmp_path):
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    summary = run(spec, records, tmp_path, budget_usd=0.0002, concurrency=1)
    assert summary["stop_reason"] == "stopped by the budget cap ($0.0002)" and not summary["complete"]
    assert summary["ledger"]["committed_usd"] <= 0.0002


# -------------------------------------------------------------------------------------------------------------
# Before anything is sent


def test_a_missing_key_is_refused_before_anything_is_sent(network_attempts, monkeypatch, records):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(pilot.PilotError, match="set OPENROUTER_API_KEY"):
        pilot.preflight(pilot.student_spec(MODEL), records)
    assert network_attempts == []


def test_a_bad_base_url_is_named(records):
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(pilot.PilotError, match=f"--base-url http://127.0.0.1:{port}/v1: no answer"):
        pilot.preflight(pilot.student_spec(MODEL, base_url=f"http://127.0.0.1:{port}/v1"), records)


def test_a_model_the_endpoint_does_not_serve_is_named(scripted, records):
    with pytest.raises(pilot.PilotError, match="does not serve 'qwen/qwen3-14b'"):
        pilot.preflight(pilot.student_spec("qwen/qwen3-14b", base_url=scripted.base_url), records)
    assert scripted.requests == []  # no completion was asked for


def test_a_model_without_tools_is_refused(records, monkeypatch):
    server = Scripted(records)
    try:
        monkeypatch.setattr(Scripted, "_send", staticmethod(_no_tools(Scripted._send)))
        with pytest.raises(pilot.PilotError, match="does not take tools"):
            pilot.preflight(pilot.student_spec(MODEL, base_url=server.base_url), records)
    finally:
        server.close()


def _no_tools(send):
    def without(handler, status, payload, headers=None):
        if isinstance(payload, dict) and payload.get("object") == "list":
            payload = {"object": "list", "data": [{"id": MODEL, "supported_parameters": ["temperature"]}]}
        return send(handler, status, payload, headers)
    return without


@pytest.mark.parametrize("args, message", [
    (["--pool", "nowhere"], "unknown pool 'nowhere'"),
    (["--episodes", "0"], "--episodes must be >= 1"),
    (["--budget-usd", "0"], "--budget-usd must be > 0"),
    (["--samples", "0"], "--samples must be >= 1"),
])
def test_bad_arguments_exit_2_naming_them(args, message, capsys, network_attempts):
    assert pilot.main(["--student", MODEL, "--dry-run", *args]) == 2
    assert message in capsys.readouterr().err and network_attempts == []


# -------------------------------------------------------------------------------------------------------------
# The dry run


@pytest.mark.parametrize("pool, size", [("verified", 500), ("lite", 300), ("lite:test", 103), ("lite-dev", 23),
                                        ("verified:pytest", 150), ("lite:test:pytest", 33)])
def test_the_dry_run_prices_offline_with_no_key(pool, size, network_attempts, monkeypatch, capsys):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    assert len(pilot.pool_ids(pool)) == size
    assert pilot.main(["--student", MODEL, "--pool", pool, "--episodes", "50", "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    samples = pilot._live_group_size()
    assert out["samples"] == samples == 8 and out["tasks"] == 7 and out["episodes"] == 56
    assert len(out["task_ids"]) == 7 and set(out["task_ids"]) <= set(pilot.pool_ids(pool))
    assert 0 < out["usd"]["mean"] <= out["usd"]["longest"] and out["container_hours"] > 0
    assert network_attempts == []


def test_the_price_is_the_tokens_of_the_real_trajectories_at_the_students_price():
    spec = pilot.student_spec(MODEL)
    p = pilot.price(spec, tasks=3, samples=4, max_turns=30)
    w = pilot.trajectory_workload(30)
    per = (w["prompt_tokens"]["mean"] * 0.035 + w["completion_tokens"]["mean"] * 0.138) / 1e6  # $/M on OpenRouter
    assert p["usd_per_episode"]["mean"] == pytest.approx(per) and p["usd"]["mean"] == pytest.approx(12 * per)
    assert w["turns"]["max"] <= 30 and w["episodes"] == 23
    assert pilot.trajectory_workload(10)["prompt_tokens"]["mean"] < w["prompt_tokens"]["mean"]
    with pytest.raises(pilot.PilotError, match="no OpenRouter price"):
        pilot.price(pilot.student_spec("nobody/no-model"), tasks=1, samples=1)


# -------------------------------------------------------------------------------------------------------------
# The measures


def test_within_reach_leaves_out_tasks_004_refuses(scripted, records, tmp_path):
    """A task graded by the scan alone (its tests under django's runner) counts in pass@1, but the within-reach file
    is 004's test_tasks, and 004 refuses such a task: it is left out, and the summary counts it."""
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    run(spec, records, tmp_path)
    relabelled = [{**records[0], "repo": "django/django", "version": "3.0"},
                  {**records[1], "repo": "marshmallow-code/marshmallow", "version": "3.0"}]
    summary = pilot.summarize(tmp_path, relabelled, 2, spec=spec, ledger={}, pool="test", seed=0,
                              started=time.time(), stop=[], max_turns=8)
    assert summary["pass_at_1"]["tasks"] == 2 and summary["graded_by_scan_alone"]["tasks"] == 1
    assert summary["within_reach"]["task_ids"] == [records[1]["instance_id"]]
    assert [r["instance_id"] for r in swebench.load_instances(tmp_path / pilot.WITHIN_REACH_FILE)] == [
        records[1]["instance_id"]]


def test_the_pilot_opts_in_to_grading_tasks_the_scan_alone_grades(scripted, records, tmp_path):
    """Its student is frozen (nothing is trained to forge), so the pilot measures the base rate on every task: it
    opts in where CodingEnv refuses by default. A record of django's (no image here) gets past the refusal to the
    missing image; with the environment's default it stops at the refusal."""
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    django = [{**records[0], "repo": "django/django", "version": "3.0"}]
    summary = run(spec, django, tmp_path / "pilot", env_config=None, samples=1)
    errors = summary["episodes"]["errors"]
    assert errors and not any("refusing to grade" in e for e in errors), errors
    strict = run(spec, django, tmp_path / "strict", env_config=EnvConfig(max_steps=8), samples=1)
    assert any("refusing to grade" in e for e in strict["episodes"]["errors"])


def test_a_pools_pytest_tasks_are_the_plans():
    """pool + ":pytest": the tasks 004 grades, the plan's pools (power.named_pools), so the base rate a pilot measures
    is the one of the pool a design uses; a bad name is told the ones there are."""
    from composer.costs import power

    for pool in ("verified:pytest", "lite:test:pytest", "lite:pytest"):
        ids = pilot.pool_ids(pool)
        assert len(ids) == power.named_pools()[pool][0] and set(ids) < set(pilot.pool_ids(pool.removesuffix(":pytest")))
    assert pilot.pool_ids("lite:test:pytest") == swebench.LITE_SOURCES["lite:test:pytest"]()
    with pytest.raises(pilot.PilotError, match="unknown pool 'verfied:pytest': one of verified, .* also with :pytest"):
        pilot.pool_ids("verfied:pytest")


def test_within_reach_by_hand():
    """The tasks solved at least once in every one of their runs, and the pass@1 on them (3 of 4 runs)."""
    reach = pilot.within_reach({"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [1.0, 1.0], "d": [1.0]}, 2)
    assert (reach["task_ids"], reach["tasks"], reach["of"], reach["pass_at_1"]) == (["a", "c"], 2, 3, 0.75)
    assert pilot.within_reach({"b": [0.0, 0.0]}, 2)["pass_at_1"] is None


def test_measures_by_hand():
    """Task a: 2 of 4, task b: 0 of 4, task c: 4 of 4."""
    m = pilot.measures({"a": [1, 0, 1, 0], "b": [0] * 4, "c": [1] * 4}, 4)
    assert m["pass_at_1"]["estimate"] == 0.5 and m["pass_at_1"]["tasks_solved"] == 2
    assert m["pass_at_k"]["estimate"] == pytest.approx(2 / 3) and m["pass_at_k"]["n"] == 3
    # discordance: 2 c (n - c) / (n (n - 1)) = 2*2*2/12 = 2/3 for a, 0 for b and c
    assert m["discordance"]["estimate"] == pytest.approx((2 / 3) / 3)
    # spread: rates .5, 0, 1 (var 0.25) less the binomial noise mean of c(n-c)/(n^2 (n-1)) = (4/48)/3
    assert m["task_spread"]["sd"] == pytest.approx((0.25 - (4 / 48) / 3) ** 0.5)
    assert pilot.measures({}, 4)["pass_at_1"] is None


@pytest.mark.parametrize("model, mean, tasks, samples", [
    ("beta", 0.1, 40, 8), ("beta", 0.05, 100, 4), ("beta", 0.2, 20, 4), ("beta", 0.3, 50, 2),
    ("two-point", 0.1, 60, 8), ("two-point", 0.18, 100, 4),
])
def test_the_clustered_interval_holds_its_coverage(model, mean, tasks, samples):
    """Two generative models of tasks: pass rates from a Beta with concentration 3, or a share of tasks the student
    can solve (at rate 0.5) and the rest it cannot. The plain Wilson interval over runs covers 67-90 % here (measured
    2026-12-06; this interval 0.935-0.958)."""
    import numpy as np

    rng = np.random.default_rng(0)
    hits = 0
    reps = 1500
    for _ in range(reps):
        if model == "beta":
            p = rng.beta(mean * 3, (1 - mean) * 3, size=tasks)
        else:
            p = np.where(rng.random(tasks) < 2 * mean, 0.5, 0.0)
        ci = stats.clustered_wilson_interval(rng.binomial(samples, p), [samples] * tasks)
        hits += ci.low <= mean <= ci.high
    assert hits / reps >= 0.93, hits / reps


def test_the_clustered_interval_by_hand():
    # no spread between tasks (ICC floored at 0): the plain Wilson interval
    same = stats.clustered_wilson_interval([1, 1, 1, 1], [2, 2, 2, 2])
    assert (same.low, same.high) == pytest.approx(tuple(_t_wilson(0.5, 8, 3)))
    # all or nothing per task (ICC 1): worth one run a task
    split = stats.clustered_wilson_interval([2, 2, 0, 0], [2, 2, 2, 2])
    assert split.method == "wilson, design effect 2" and (split.low, split.high) == pytest.approx(_t_wilson(0.5, 4, 3))
    with pytest.raises(ValueError):
        stats.clustered_wilson_interval([3], [2])


def _t_wilson(p, n, df):
    import math

    import scipy.stats

    z = scipy.stats.t.ppf(0.975, df)
    d = 1 + z * z / n
    center, half = (p + z * z / (2 * n)) / d, z / d * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return center - half, center + half


# -------------------------------------------------------------------------------------------------------------
# The zoo's student through composer serve; kill -9 and resume; plan --from-pilot


def test_the_zoos_student_through_composer_serve(records, tmp_path):
    """The model path: tools rendered by the server's chat template, replies parsed into tool calls (or counted as
    malformed), every turn a trace step. The smoke zoo's student solves nothing; its episodes run to the step limit."""
    from composer import zoo
    from composer.serve import serve

    student = zoo.zoo("smoke")["student"]
    with serve(models={MODEL: student}, seed=0) as server:
        spec = pilot.student_spec(MODEL, base_url=server.base_url, temperature=0.0, max_tokens=32)
        summary = run(spec, records[:1], tmp_path, samples=1, max_turns=3, env_config=EnvConfig(max_steps=3))
    assert summary["complete"] and summary["backend"] == "offline"
    steps = traces.group_traces(traces.load_traces(tmp_path / pilot.TRACES_FILE))[f"{records[0]['instance_id']}#0"]
    assert len(steps) == summary["per_episode"]["turns"] == 3 and steps[-1].truncated and steps[-1].reward == 0.0
    assert summary["per_episode"]["prompt_tokens"] > 0 and summary["pass_at_1"]["estimate"] == 0.0


def test_a_pilot_on_the_real_instance_in_its_container(real_record, tmp_path):
    """marshmallow-1343 in its instance image (podman): the scripted student views the file, makes the gold edit
    and submits; the harness's eval script grades it in a fresh container."""
    server = Scripted([real_record], opening=("view", {"path": "src/marshmallow/schema.py", "start": 870, "end": 900}))
    try:
        spec = pilot.student_spec(MODEL, base_url=server.base_url)
        assert pilot.preflight(spec, [real_record]) == []
        summary = run(spec, [real_record], tmp_path, samples=1, env_config=EnvConfig(max_steps=8))
    finally:
        server.close()
    assert summary["complete"] and summary["pass_at_1"]["estimate"] == 1.0
    (steps,) = traces.group_traces(traces.load_traces(tmp_path / pilot.TRACES_FILE)).values()
    assert "src/marshmallow/schema.py" in steps[0].state.messages[1]["content"]
    assert steps[-1].outcome["resolved"] and "except (KeyError, TypeError)" in steps[-1].outcome["patch"]
    assert summary["phases"]["grade_s_per_submission"] > 0 and summary["phases"]["start_s_per_episode"] > 0


def test_a_real_instance_without_its_image_is_refused_before_anything_is_sent(scripted, monkeypatch):
    from composer.env.real import container

    record = json.loads((ROOT / "data/swebench-lite/marshmallow-code__marshmallow-1343.json").read_text())
    monkeypatch.setattr(container, "problems", lambda r=None: ["no image swebench/sweb.eval.x (build it: "
                                                               "scripts/swebench-image/build.sh)"])
    with pytest.raises(pilot.PilotError, match="1 of 1 real instances cannot run here.*build"):
        pilot.preflight(pilot.student_spec(MODEL, base_url=scripted.base_url), [record])
    assert scripted.requests == []


def test_kill_9_mid_run_then_rerun_loses_no_episode_and_pays_no_answer_twice(records, tmp_path):
    """The pilot is killed (SIGKILL, from the server, before it answers) at the first request that comes once an
    episode is written, from an episode with answered turns: one episode done, one under way with turns in the
    store and a call in flight."""
    out = tmp_path / "pilot"
    proc = None

    def kill(body):
        if proc is None or not any(m["role"] == "assistant" for m in body["messages"]) or \
                not list((out / pilot.EPISODES_DIR).glob("*.json")):
            return False
        os.kill(proc.pid, signal.SIGKILL)
        return True

    server = Scripted(records, delay_s=0.05, hold=kill)
    command = [sys.executable, "-m", "composer", "pilot", "--student", MODEL, "--base-url", server.base_url,
               "--pool", "embedded", "--episodes", "4", "--samples", "2", "--max-turns", "8", "--concurrency", "2",
               "--out", str(out)]
    env = {**os.environ, "COMPOSER_PROGRESS": ""}
    try:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.wait(timeout=600) == -signal.SIGKILL, proc.stderr.read().decode()  # timeout: a hang guard
        done_at_kill = len(list((out / pilot.EPISODES_DIR).glob("*.json")))
        assert 1 <= done_at_kill < 4
        server.hold = None
        rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stderr
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        server.close()
    summary = pilot.read(out)
    assert summary["complete"] and summary["pass_at_1"]["estimate"] == 1.0 and summary["answers_from_store"] > 0
    with sqlite3.connect(out / pilot.STORE_FILE) as db:
        twice = db.execute("SELECT COUNT(*) FROM (SELECT key FROM ledger WHERE status = 'settled' GROUP BY key "
                           "HAVING COUNT(*) > 1)").fetchone()[0]
        rows = dict(db.execute("SELECT status, COUNT(*) FROM ledger GROUP BY status").fetchall())
        answers = db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    assert twice == 0  # no answer that reached the store was paid for again
    # every request the server saw is a ledger row: settled (stored) or abandoned (in flight at the kill, at most
    # one an episode in flight: the one the server held, and perhaps the other episode's, whose row can be written
    # before its request reaches the server); each answered turn was stored once
    abandoned = rows.get("abandoned", 0)
    assert rows["settled"] + 1 <= len(server.requests) <= rows["settled"] + abandoned and abandoned <= 2
    assert rows["settled"] == answers == sum(e["turns"] for e in pilot.read_episodes(out))


def test_plan_from_pilot_prints_measured_beside_assumed(scripted, records, tmp_path, capsys):
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    summary = run(spec, records, tmp_path)
    assert plan.main(["--from-pilot", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["backend"] == "offline" and "rehearsal" in out
    # the rehearsal's student solves every task: at a base rate of 1 two runs cannot differ, nothing to plan from
    assert result["base_pass_at_1"]["estimate"] == 1.0 and result["measured"] == {}
    assert "two runs cannot differ there" in result["unused"]["pass_at_1"]
    live = yaml.safe_load((ROOT / "params/live" / f"{plan.LIVE_004}.yaml").read_text())
    d = power.design(live, base_rate=power.BASE_RATES[live["student"]][0])  # the live header's design and mde
    assert result["mde"]["measured"] == result["mde"]["assumed"] == d["mde"]
    assert set(result["replaced"]) == {"tool_s_per_call", "grade_s_per_submission", "start_s_per_episode"}
    assert result["turns"]["measured"] == summary["phases"]["turns_per_episode"]
    assert "| discordance (two runs of a task disagree) | 0.000 | 0.22 | assumed |" in out
    assert "| generation, s a turn |" in out and "assumed: an API's latency is not a GPU's" in out
    assert "above the 95% ceiling: the plan refuses it" in out and "--base-rate Qwen/Qwen3-8B=1.000" not in out
    assert "| base pass@1 | 1.000 [" in out and "| 0.036 (published: SWE-bench Verified, no thinking" in out
    assert result["within_reach"]["tasks"] == 2
    assert next(line for line in out.splitlines() if line.startswith("within reach: 2 of 2 tasks")).endswith(
        "Qwen3-8B: base rate 100.0% > the 95% ceiling (too little room above it to show a 2-point effect)")
    # a student that can move: its base rate and discordance replace the assumed ones in the live design's mde
    moving = tmp_path / "moving"
    moving.mkdir()
    (moving / pilot.WITHIN_REACH_FILE).write_text((tmp_path / pilot.WITHIN_REACH_FILE).read_text())
    (moving / pilot.SUMMARY_FILE).write_text(json.dumps({
        **summary, "pass_at_1": {**summary["pass_at_1"], "estimate": 0.3, "low": 0.2, "high": 0.4},
        "discordance": {**(summary["discordance"] or {}), "estimate": 0.35},
        "within_reach": {**summary["within_reach"], "pass_at_1": 0.6}}))
    assert plan.main(["--from-pilot", str(moving)]) == 0
    out = capsys.readouterr().out
    moved = json.loads(out.strip().splitlines()[-1])
    assert moved["measured"] == {"pass_at_1": 0.3, "discordance": 0.35} and moved["unused"] == {}
    at = power.Assumptions(discordance=0.35, pass_at_1=0.3)
    assert moved["mde"]["measured"] == power.mde(d["seeds"], d["tasks"], d["samples"], at) != moved["mde"]["assumed"]
    assert "--student Qwen/Qwen3-8B --base-rate Qwen/Qwen3-8B=0.300" in out
    # the tasks within reach: the command it prints for designs on them runs
    command = next(line for line in out.splitlines() if line.startswith("within reach: 2 of 2 tasks"))
    assert f"004's test_tasks={moving / pilot.WITHIN_REACH_FILE}" in command
    assert plan.main(command.split("python -m composer plan ")[1].split()) == 0
    assert f"x 2 tasks ({moving / pilot.WITHIN_REACH_FILE})" in capsys.readouterr().out
    # a student surely below the floor is told it would be refused
    low = tmp_path / "low"
    low.mkdir()
    (low / pilot.SUMMARY_FILE).write_text(json.dumps({**summary, "pass_at_1": {**summary["pass_at_1"], "estimate": 0.01,
                                                                              "low": 0.002, "high": 0.03}}))
    assert plan.main(["--from-pilot", str(low)]) == 0
    assert "below the 5% floor: the plan refuses it" in capsys.readouterr().out
    assert plan.main(["--from-pilot", str(tmp_path / "nowhere")]) == 2
    assert "not a pilot summary" in capsys.readouterr().err


# -------------------------------------------------------------------------------------------------------------
# 003 from the pilot's traces: teachers asked in the student's tool space, pairs of actions it can take


class ToolTeacher(Scripted):
    """A teacher endpoint that answers the tool-space top-k question with the expert's next call (90 %) and
    list_files (10 %): the step is the count of the agent's well-formed calls in the history it is shown."""

    def answer(self, body):
        messages = body["messages"]
        assert "calls one of these tools" in messages[0]["content"] and "run_tests(test_ids)" in messages[0]["content"]
        task = messages[1]["content"].split("\n\nFix the issue above")[0].strip()
        plan = self.plans[task]
        done = sum(m["role"] == "assistant" and m["content"].split("(")[0] in dict(plan) for m in messages)
        name, arguments = plan[min(done, len(plan) - 1)]
        text = json.dumps({"candidates": [
            {"tool": name, "arguments": json.dumps(arguments), "probability": 0.9},
            {"tool": "list_files", "arguments": "{}", "probability": 0.1}]})
        return {"id": "t", "object": "chat.completion", "model": body["model"], "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}}


def test_003_mines_pairs_the_student_can_take_from_the_pilots_traces(scripted, records, tmp_path):
    from composer import replay
    from composer.disagreement import pairs
    from composer.env.environment import TOOLS
    from composer.teachers import TeacherSpec

    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    run(spec, records[:1], tmp_path / "pilot", samples=2)
    by_trace = traces.group_traces(traces.load_traces(tmp_path / "pilot" / pilot.TRACES_FILE))
    teacher = ToolTeacher(records[:1])
    try:
        specs = [TeacherSpec(name=n, model=m, base_url=teacher.base_url, action_space="tools", k=2)
                 for n, m in (("gpt5", "openai/gpt-5"), ("deepseek", "deepseek/deepseek-v4-pro"),
                              ("opus", "anthropic/claude-opus-4.7"))]
        result = asyncio.run(replay.replay(by_trace, specs, tmp_path / "003", budget_usd=1.0))
    finally:
        teacher.close()
    assert result.complete and all(q.distribution for q in result.records)
    ex = pairs.extract(by_trace, result.records, pairs.PairParams())
    # the teachers agree with the student at every step but the one where it wrote no call: one pair a trace (the
    # two traces' pairs are one when their test outputs match to the character, timings included: kept once)
    assert len(ex.rows) + ex.problems.get("duplicates_removed", 0) == 2 and ex.rows
    assert {r["rule"] for r in ex.rows} == {"majority_over_malformed"}
    for row in ex.rows:
        name, arguments = pairs.parse_canonical(row["chosen_action"])
        assert name in TOOLS and (name, arguments) == ("edit", gold_edits(records[0])[0])  # the expert's next call
        assert "<tool_call>" in row["chosen"]  # rendered as the student's own completions are


def test_tool_space_questions_never_parse_from_an_echo_and_answers_parse_to_the_students_actions():
    from composer import teachers
    from composer.actions import ParseError, canonical_tool_call

    for mode in ("topk", "samples", "logprobs"):
        s = teachers.TeacherSpec(name="t", model="openai/gpt-5", mode=mode, action_space="tools")
        with pytest.raises(ParseError):  # the offline stand-in echoes the question
            teachers.distribution_of(s, teachers.question(s), [{"logprob": -0.1}])
    s = teachers.TeacherSpec(name="t", model="openai/gpt-5", action_space="tools", k=3)
    answer = json.dumps({"candidates": [{"tool": "view", "arguments": '{"path": "a.py", "start": 3}', "probability": 3},
                                        {"tool": "submit", "arguments": "{}", "probability": 1}]})
    view = canonical_tool_call("view", {"start": 3, "path": "a.py"})
    assert teachers.distribution_of(s, answer, None) == {view: 0.75, "submit({})": 0.25}
    one = teachers.TeacherSpec(name="t", model="openai/gpt-5", action_space="tools", mode="samples")
    answer = '{"tool": "view", "arguments": {"path": "a.py", "start": 3}}'
    assert teachers.distribution_of(one, answer, None) == {view: 1.0}
    for bad in ('{"candidates": [{"tool": "view", "arguments": "not json", "probability": 1}]}',
                '{"candidates": [{"arguments": "{}", "probability": 1}]}'):
        with pytest.raises(ParseError, match="candidate 0"):
            teachers.distribution_of(s, bad, None)
    # the history shows calls as tool(arguments) and the system prompt lists CodingEnv's tools
    state = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {
                 "name": "view", "arguments": '{"path": "a.py"}'}}]},
             {"role": "tool", "tool_call_id": "c", "content": "1 x = 1"}]
    messages = teachers.teacher_messages(state, s, cache=False)
    assert "search(pattern, path)" in messages[0]["content"] and messages[2]["content"] == 'view({"path": "a.py"})'
    assert messages[-1]["content"] == teachers.question(s)
    assert teachers.request_body(s, messages)["response_format"]["json_schema"]["schema"] == teachers.TOOLS_TOPK_SCHEMA
    bash = teachers.TeacherSpec(name="t", model="openai/gpt-5")
    assert "```bash\nview" in teachers.teacher_messages(state, bash, cache=False)[2]["content"]  # as before


def test_the_runbooks_dry_run_block_is_what_the_command_prints(capsys):
    """docs/live.md shows step 1's output: it must be the command's, not retyped figures."""
    assert pilot.main(["--student", MODEL, "--pool", "verified", "--episodes", "50", "--dry-run"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[:-1]  # the JSON line is not shown
    doc = (ROOT / "docs/live.md").read_text()
    assert "```\n" + "\n".join(printed) + "\n```" in doc
    readme = (ROOT / "README.md").read_text()
    assert "python -m composer pilot --student qwen/qwen3-8b --pool verified --episodes 50 --dry-run" in readme


def test_003_live_runs_from_the_pilots_traces_through_the_simulated_teachers(scripted, records, tmp_path):
    """The 003 notebook's live path on the pilot's traces, with 001's three teachers pointed at the simulated
    providers (composer serve): no GPU, no key. The stand-ins echo, so no pairs; the report says offline."""
    import composer.run
    from composer import report, stand_ins, teachers

    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    run(spec, records[:1], tmp_path / "pilot", samples=1)
    specs = [teachers.TeacherSpec(**t) for t in teachers.DEFAULT_TEACHERS]
    with stand_ins.offline_teachers(specs, time_scale=0.01) as local:
        live = [s.model_dump(include={"name", "model", "base_url", "provider", "max_tokens", "timeout_s"})
                for s in local]
        code = composer.run.run("003", reports_dir=tmp_path / "reports", overrides={
            "backend": "live", "traces_source": str(tmp_path / "pilot" / pilot.TRACES_FILE), "live_teachers": live,
            "steps_per_trace": 2, "reference_logps": False, "budget_usd": 1.0, "out_dir": str(tmp_path / "003")})
    assert code == 0
    results = report.read_results(tmp_path / "reports" / "003-dpo-pairs-from-disagreement" / "executed.ipynb")
    assert results["backend"] == "offline" and any("simulated providers" in n for n in results["notes"])
    queries = [json.loads(line) for line in (tmp_path / "003" / "teacher_queries.jsonl").read_text().splitlines()]
    assert len(queries) == 3 * 2 and all(q["simulated"] and q["parse_error"] for q in queries)
    # the echo answers with the question it was asked: the tool-space question, so the pairs would be tool calls
    assert {q["raw_text"] for q in queries} == {teachers.TOOLS_TOPK_QUESTION.format(k=5)}
    assert all(q["student_action"] is None or q["student_action"].split("(")[0] in ("run_tests", "edit", "submit")
               for q in queries)  # the student's own calls (None: its malformed turn)



# -------------------------------------------------------------------------------------------------------------
# What a review found: nothing an endpoint or an environment does crashes the run; keys stay where they belong


def test_an_answer_of_an_unexpected_shape_or_a_failing_environment_ends_one_episode_not_the_run(records, tmp_path,
                                                                                              monkeypatch):
    from composer.env import environment

    server = Scripted(records, faults={1: "null-choice", 2: "object-arguments"})
    real_reset = environment.CodingEnv.reset

    def reset(self, *args, instance=None, **kwargs):
        if instance["instance_id"] == records[1]["instance_id"]:
            raise RuntimeError("the container did not start")
        return real_reset(self, *args, instance=instance, **kwargs)

    monkeypatch.setattr(environment.CodingEnv, "reset", reset)
    try:
        spec = pilot.student_spec(MODEL, base_url=server.base_url, max_retries=0)
        summary = run(spec, records, tmp_path, samples=1, concurrency=1)
    finally:
        server.close()
    errors = sorted(summary["episodes"]["errors"])
    assert summary["episodes"]["errored"] == 2 and summary["episodes"]["complete"] == 0
    assert any("provider_error: a choice that is not a message" in e for e in errors)
    assert any("internal: RuntimeError: the container did not start" in e for e in errors)
    assert summary["faults"] == {"provider_error": 1, "internal": 1} and (tmp_path / pilot.SUMMARY_FILE).exists()
    # the object-shaped arguments (request 2, the rerun's first) are read as the call they are
    monkeypatch.setattr(environment.CodingEnv, "reset", real_reset)
    server = Scripted(records, faults={1: "object-arguments"})
    try:
        summary = run(pilot.student_spec(MODEL, base_url=server.base_url), records[:1], tmp_path, samples=1)
    finally:
        server.close()
    assert summary["complete"] and summary["pass_at_1"]["estimate"] == 1.0 and summary["malformed_turns"] == 1


def test_a_local_checkpoint_with_no_price_runs_at_0(records, tmp_path):
    server = Scripted(records[:1], model="my-checkpoint")
    try:
        spec = pilot.student_spec("my-checkpoint", base_url=server.base_url)
        summary = run(spec, records[:1], tmp_path, samples=1)
    finally:
        server.close()
    assert summary["complete"] and summary["ledger"]["committed_usd"] == 0.0


def test_a_remote_model_with_no_price_is_refused_before_anything_is_sent(records, monkeypatch, network_attempts):
    monkeypatch.setenv(pilot.STUDENT_KEY_ENV, "sk-remote")
    with pytest.raises(pilot.PilotError, match="no price known for 'my-checkpoint'"):
        pilot.preflight(pilot.student_spec("my-checkpoint", base_url="https://models.example.invalid/v1"), records)
    assert network_attempts == []


def test_an_openrouter_key_goes_only_to_openrouter(scripted, records, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-not-for-others")
    monkeypatch.delenv(pilot.STUDENT_KEY_ENV, raising=False)
    spec = pilot.student_spec(MODEL, base_url=scripted.base_url)
    assert spec.api_key_env == pilot.STUDENT_KEY_ENV and pilot.student_spec(MODEL).api_key_env == "OPENROUTER_API_KEY"
    run(spec, records[:1], tmp_path, samples=1)
    assert scripted.keys and not any("sk-or-v1" in (k or "") for k in scripted.keys)
    monkeypatch.setenv(pilot.STUDENT_KEY_ENV, "sk-local-server")
    run(spec, records[:1], tmp_path / "again", samples=1)
    assert scripted.keys[-1] == "Bearer sk-local-server"
    # named outright for another endpoint, the OpenRouter key is still not sent: not even to list its models
    named = pilot.student_spec(MODEL, base_url=scripted.base_url, api_key_env="OPENROUTER_API_KEY")
    pilot.preflight(named, records[:1])
    run(named, records[:1], tmp_path / "named", samples=1)
    assert not any("sk-or-v1" in (k or "") for k in scripted.keys)


def test_plan_says_plainly_when_no_student_above_the_floor_fits(capsys):
    assert plan.main(["--budget-usd", "5000", "--student", "Qwen/Qwen3-8B"]) == 0
    out = capsys.readouterr().out
    assert "best within $5,000: no student above the floor fits a layout: Qwen3-8B: base rate 3.6% < the 5% floor" in out
