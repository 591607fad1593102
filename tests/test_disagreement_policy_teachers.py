"""composer.disagreement.policy_teachers: asking policy models for a trace step's next action (the echo server and a
counting server on loopback), resuming from the store, and paying for a shared request once.

    .venv/bin/pytest tests/test_disagreement_policy_teachers.py
"""

import asyncio
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import pytest

from composer import replay
from composer.disagreement import pairs, policy_teachers
from composer.disagreement.policy_teachers import lenient_tool_call, query_policy_teachers
from composer.disagreement.reference_pairs import embedded_traces
from composer.paths import ROOT
from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall
from hand_records import VIEW, counting_server, sample_counts, step


def test_clip_messages():
    msgs = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": "task"}]
    for i in range(4):
        msgs += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "content": f"o{i}"}]
    out = policy_teachers.clip_messages(msgs, window=2)
    assert [m["content"] for m in out] == ["s" * 10, "task", "a2", "o2", "a3", "o3"]
    out = policy_teachers.clip_messages(msgs, max_chars=4)
    assert out[0]["content"] == "ss\n[…]\nss" and out[1]["content"] == "task"
    assert policy_teachers.clip_messages(msgs) == msgs


def test_query_policy_teachers_against_the_echo_server(tmp_path):
    """The echo backend answers with the last user message: a tool call there comes back parsed as one."""
    from composer.env.environment import tool_schemas
    from composer.models import tiny_model
    from composer.serve import serve

    call = '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>'
    good = StepRecord(schema_version=SCHEMA_VERSION, trace_id="E", step=0,
                      state=State(messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": call}]),
                      action=Action(text="x", tool_call=ToolCall(name="view", arguments={"path": "a.py"})),
                      observation=None, reward=None, done=False, truncated=False, source="test")
    bad = good.model_copy(update={"step": 1, "done": True,
                                  "state": State(messages=[{"role": "user", "content": "no call here"}])})
    doubled = good.model_copy(update={"step": 2, "state": State(messages=[
        {"role": "user", "content": "<tool_call>\n" + call}])})  # a repeated opening tag: strict parsers refuse
    with serve(models={"teacher-a": tiny_model(), "teacher-b": tiny_model()}, backend="echo") as server:
        endpoints = {"teacher-a": {"base_url": server.base_url, "model": "teacher-a"},
                     "teacher-b": {"base_url": server.base_url, "model": "teacher-b"},
                     "missing": {"base_url": server.base_url, "model": "nope"}}
        records = asyncio.run(query_policy_teachers({"E": [good, bad, doubled]}, endpoints,
                                                                    tmp_path / "q.jsonl", k=3, tools=tool_schemas(),
                                                                    max_tokens=64))
        strict = asyncio.run(query_policy_teachers({"E": [doubled]}, endpoints, tmp_path / "s.jsonl", k=1,
                                                                   tools=tool_schemas(), max_tokens=64, lenient=False))
    assert [q.distribution for q in records if q.step == 2 and q.teacher == "teacher-a"] == [{VIEW: 1.0}] * 3
    [strict_a] = [q for q in strict if q.teacher == "teacher-a"]
    assert strict_a.distribution is None and "no well-formed" in strict_a.parse_error
    records = [q for q in records if q.step < 2]
    assert len(records) == 2 * 3 * 3
    assert [q for q in replay.read_queries(tmp_path / "q.jsonl") if q.step < 2] == records
    a0 = [q for q in records if q.teacher == "teacher-a" and q.step == 0]
    assert [q.distribution for q in a0] == [{VIEW: 1.0}] * 3 and a0[0].student_action == VIEW
    assert all(q.mode == "samples" and q.raw_text.startswith("<tool_call>") for q in a0)
    a1 = [q for q in records if q.teacher == "teacher-a" and q.step == 1]
    assert all(q.distribution is None and "no well-formed tool call" in q.parse_error for q in a1)
    missing = [q for q in records if q.teacher == "missing"]
    assert all(q.error_kind == "not_found" for q in missing)
    with serve(models={"teacher-a": tiny_model()}, backend="echo") as server:
        only = asyncio.run(query_policy_teachers(
            {"E": [good, bad]}, {"teacher-a": {"base_url": server.base_url, "model": "teacher-a"}},
            tmp_path / "q2.jsonl", k=2, steps={"E": [1]}))
    assert [(q.step, q.sample) for q in only] == [(1, 0), (1, 1)]
    ex = pairs.extract({"E": [good, bad]}, records)
    assert ex.steps[0]["status"] == "student is the majority, no minority"
    assert ex.problems["teachers_never_parsed"] == ["missing"] and ex.problems["unparsed_answers"] == 6


def test_query_policy_teachers_keeps_finished_steps_when_it_fails(tmp_path, monkeypatch):
    from composer.models import tiny_model
    from composer.serve import serve

    call = '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>'
    first = StepRecord(schema_version=SCHEMA_VERSION, trace_id="E", step=0,
                       state=State(messages=[{"role": "user", "content": call}]),
                       action=Action(text="x", tool_call=ToolCall(name="view", arguments={"path": "a.py"})),
                       observation=None, reward=None, done=False, truncated=False, source="test")
    second = first.model_copy(update={"step": 1, "state": State(messages=[{"role": "user", "content": "crash"}])})
    real = pairs.prompt_messages

    def crash_at_step_1(messages):
        if messages[-1]["content"] == "crash":
            raise RuntimeError("killed mid-run")
        return real(messages)

    monkeypatch.setattr(policy_teachers, "prompt_messages", crash_at_step_1)
    with serve(models={"teacher-a": tiny_model()}, backend="echo") as server:
        endpoints = {"teacher-a": {"base_url": server.base_url, "model": "teacher-a"}}
        with pytest.raises(RuntimeError, match="killed"):
            asyncio.run(query_policy_teachers({"E": [first, second]}, endpoints, tmp_path / "q.jsonl", k=2))
    kept = replay.read_queries(tmp_path / "q.jsonl")  # step 0 was answered before step 1 failed: it is on disk
    assert [(q.step, q.sample, q.distribution) for q in kept] == [(0, 0, {VIEW: 1.0}), (0, 1, {VIEW: 1.0})]


def test_query_policy_teachers_asks_for_each_sample_an_endpoint_ignoring_n_left_out(tmp_path, capsys):
    by_trace = {"A": [step("A", t, 2, "ls") for t in range(2)]}
    path = tmp_path / "q.jsonl"
    with counting_server(ignore_n={"deaf"}) as (url, sent):
        endpoints = {name: {"base_url": url, "model": name} for name in ("honest", "deaf")}
        records = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=3, seed=10))
        assert "endpoint 'deaf' ignored n (asked for 3 samples, got 1)" in capsys.readouterr().out
        assert Counter((b["model"], b["n"]) for b in sent) == {("honest", 3): 2, ("deaf", 3): 2, ("deaf", 1): 4}
        assert policy_teachers.ignored_n(records) == ["deaf"]
        for t in range(2):
            honest, deaf = ([q for q in records if q.teacher == name and q.step == t] for name in ("honest", "deaf"))
            assert [next(iter(q.distribution)) for q in honest] == [f"echo {10 + t}-{i}" for i in range(3)]
            assert [next(iter(q.distribution)) for q in deaf] == [f"echo {10 + t + i}-0" for i in range(3)]
            assert len({q.request_key for q in honest}) == 1 and len({q.request_key for q in deaf}) == 3
            assert [q.prompt_tokens for q in deaf] == [10] * 3  # each request's usage, once
        sent.clear()
        again = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=3, seed=10))
    assert sent == [] and all(q.cached for q in again)  # every request answered from the store
    assert [q.model_copy(update={"cached": False}) for q in again] == records
    assert policy_teachers.ignored_n(again) == ["deaf"]
    assert replay.read_queries(path) == again and set(sample_counts(again).values()) == {1}


def test_query_policy_teachers_resumes_from_its_store(tmp_path):
    by_trace = {"E": [step("E", t, 3, "ls") for t in range(3)]}
    path = tmp_path / "q.jsonl"
    with counting_server() as (url, sent):
        endpoints = {"teacher-a": {"base_url": url, "model": "teacher-a", "revision": "v1"}}
        first = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=2))
        # a kill after step 2 was answered and before it was stored, which also tore the file's last line
        db = sqlite3.connect(tmp_path / replay.STORE_FILE)
        db.execute("DELETE FROM answers WHERE key = ?", (first[-1].request_key,))
        db.commit()
        db.close()
        path.write_text(path.read_text()[:-30])
        sent.clear()
        again = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=2))
        assert [b["seed"] for b in sent] == [2]  # only the request whose answer was not stored
        assert [q.cached for q in again] == [True] * 4 + [False] * 2
        assert [q.model_dump(exclude={"cached", "latency_s"}) for q in again] == [
            q.model_dump(exclude={"cached", "latency_s"}) for q in first]
        assert again[:4] == [q.model_copy(update={"cached": True}) for q in first[:4]]  # reused as they were
        assert replay.read_queries(path) == again  # afresh: each sample once
        sent.clear()  # another checkpoint behind the same name: nothing is reused
        asyncio.run(query_policy_teachers(by_trace, {"teacher-a": {**endpoints["teacher-a"], "revision": "v2"}},
                                                          path, k=2))
        assert len(sent) == 3
        sent.clear()
        fresh = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=2, resume=False))
        assert len(sent) == 3 and not any(q.cached for q in fresh)


def test_query_policy_teachers_sends_a_request_two_traces_share_once(tmp_path):
    # two rollouts of one task: the same first state, then different ones
    by_trace = {"A": [step("A", 0, 2, "ls"), step("A", 1, 2, "ls", history="a")],
                "B": [step("B", 0, 2, "ls"), step("B", 1, 2, "ls", history="b")]}
    with counting_server() as (url, sent):
        records = asyncio.run(query_policy_teachers(by_trace, {"t": {"base_url": url, "model": "t"}},
                                                                    tmp_path / "q.jsonl", k=2))
    assert len(sent) == 3  # not 4
    first = {(q.trace_id, q.step): q for q in records if q.sample == 0}
    assert first["A", 0].request_key == first["B", 0].request_key != first["B", 1].request_key
    assert first["A", 0].distribution == first["B", 0].distribution
    assert sorted(q.cached for q in records if q.step == 0) == [False, False, True, True]  # paid once
    assert sample_counts(records) == {(tid, t, "t", i): 1 for tid in "AB" for t in range(2) for i in range(2)}


def test_query_policy_teachers_killed_at_random_moments_never_repays_a_stored_answer(tmp_path):
    """kill -9 at seeded random moments, then resume: no request whose answer was stored is sent again (what
    was in flight at a kill may be), and the last run's file holds every planned sample once."""
    by_trace = {tid: [step(tid, t, 5, "ls", history=tid) for t in range(5)] for tid in ("A", "B")}
    traces_file, path, store = tmp_path / "traces.jsonl", tmp_path / "q.jsonl", tmp_path / replay.STORE_FILE
    traces_file.write_text("".join(r.model_dump_json() + "\n" for rs in by_trace.values() for r in rs))

    def key(body):
        return policy_teachers.policy_request_key(body["model"], "r1", body)

    def stored():
        if not store.exists():
            return set()
        db = sqlite3.connect(store)
        try:
            return {k for (k,) in db.execute("SELECT key FROM answers")}
        finally:
            db.close()

    requests = 2 * 5 * (1 + 3)  # per step: one to the endpoint honouring n, three to the one ignoring it
    rng = random.Random(3)
    repaid, sent_ever, outcomes = [], [], []
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE_RUNS, str(traces_file), str(path)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        while len(outcomes) < 6 and requests - len(before := stored()) > 1:
            # a random point: after a random number of requests have arrived, and a random delay more (in flight,
            # answered but not yet stored, stored but not yet written, ...); a loaded machine only slows it down
            arrived = rng.randint(1, min(10, requests - len(before) - 1))
            with counting_server(ignore_n={"deaf"}) as (url, sent):
                proc.stdin.write(url + "\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == "started\n"
                deadline = time.monotonic() + 120  # a hang guard: the poll ends once they arrived
                while len(sent) < arrived and time.monotonic() < deadline:
                    time.sleep(0.001)
                time.sleep(rng.uniform(0, 0.08))
                proc.stdin.write("kill\n")
                proc.stdin.flush()
                outcomes.append(int(proc.stdout.readline()))
            repaid += [key(b) for b in sent if key(b) in before]
            sent_ever += sent
    finally:
        proc.kill()
        proc.wait()
    assert outcomes.count(-9) >= 4, outcomes
    before = stored()
    with counting_server(ignore_n={"deaf"}) as (url, sent):
        endpoints = {name: {"base_url": url, "model": name, "revision": "r1"} for name in ("honest", "deaf")}
        records = asyncio.run(query_policy_teachers(by_trace, endpoints, path, k=3))
    repaid += [key(b) for b in sent if key(b) in before]
    sent_ever += sent
    assert repaid == []  # 0 re-paid stored answers
    planned = {(tid, t, name, i) for tid in by_trace for t in range(5) for name in ("honest", "deaf") for i in range(3)}
    for got in (records, replay.read_queries(path)):
        counts = sample_counts(got)
        assert set(counts) == planned and set(counts.values()) == {1}
    assert not any(q.error_kind for q in records) and policy_teachers.ignored_n(records) == ["deaf"]
    assert stored() == {q.request_key for q in records} <= {key(b) for b in sent_ever}  # the test's keys are right
    assert any(q.cached for q in records) and {q.request_key for q in records if q.cached} == before


def test_lenient_tool_call():
    assert lenient_tool_call('<tool_call>\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>') == (
        "run_tests", {})
    assert lenient_tool_call('x <tool_call>{"name": "view", "arguments": "{\\"path\\": \\"a\\"}"}') == (
        "view", {"path": "a"})  # arguments as a JSON string, no closing tag
    assert lenient_tool_call('<tool_call>\n{"name": "view", "arguments": {"path": ') is None  # cut mid-object
    assert lenient_tool_call('<tool_call>\n{"name": " "arguments": "run_tests"}}\n</tool_call>') is None
    assert lenient_tool_call('{"name": "view", "arguments": {}}') is None  # no tag: not a call
    assert lenient_tool_call('<tool_call>{"name": 3, "arguments": {}}</tool_call>') is None


def test_query_policy_teachers_refuses_zero_concurrency_and_a_busy_folder(tmp_path):
    from composer.lock import RunDirBusy, run_lock

    steps = {"t": embedded_traces(1)[:1]}
    endpoints = {"a": {"base_url": "http://127.0.0.1:9/v1", "model": "a"}}
    with pytest.raises(ValueError, match="concurrency must be >= 1, got 0"):
        asyncio.run(asyncio.wait_for(query_policy_teachers(steps, endpoints, tmp_path / "q.jsonl", concurrency=0), 10))
    with run_lock(tmp_path), pytest.raises(RunDirBusy, match="in use by another run"):
        asyncio.run(query_policy_teachers(steps, endpoints, tmp_path / "q.jsonl"))
    assert not (tmp_path / "q.jsonl").exists()


KILLABLE_RUNS = """
import asyncio, os, signal, sys, time, traceback
from composer.disagreement.policy_teachers import query_policy_teachers
from composer.traces import StepRecord

by_trace = {}
for line in open(sys.argv[1]):
    record = StepRecord.model_validate_json(line)
    by_trace.setdefault(record.trace_id, []).append(record)
print("ready", flush=True)
for url in iter(sys.stdin.readline, ""):  # a run against the server at URL, killed when a line says so
    url = url.strip()
    pid = os.fork()  # everything is imported already: the run starts at once
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            endpoints = {name: {"base_url": url, "model": name, "revision": "r1"} for name in ("honest", "deaf")}
            asyncio.run(query_policy_teachers(by_trace, endpoints, sys.argv[2], k=3))
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    print("started", flush=True)
    sys.stdin.readline()
    os.kill(pid, signal.SIGKILL)  # not reaped yet, so this pid is still the run's, finished or not
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)  # -9: killed
"""
