"""composer.policy_teachers: checkpoints asked for a trace step's next action as the student is (the echo server
and a counting server on loopback), through replay like any teacher: the spec's kind chooses the class, the store
resumes, a shared request is paid once, and the budget guard and the key's rule hold as for a reviewer.

    .venv/bin/pytest tests/test_policy_teachers.py
"""

import asyncio
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import pytest

from composer import policy_teachers, replay, teachers, traces
from composer.disagreement import pairs
from composer.paths import ROOT
from composer.policy_teachers import PolicyTeacher, lenient_tool_call
from composer.teachers import TeacherSpec
from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall
from hand_records import VIEW, counting_server, query, sample_counts, step


def policy(name, base_url, **fields):
    return TeacherSpec(name=name, model=name, kind="policy", base_url=base_url, **fields)


def ask(by_trace, specs, out_dir, **kwargs):
    return asyncio.run(replay.replay(by_trace, specs, out_dir, **kwargs)).records


def test_clip_messages():
    msgs = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": "task"}]
    for i in range(4):
        msgs += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "content": f"o{i}"}]
    out = policy_teachers.clip_messages(msgs, window=2)
    assert [m["content"] for m in out] == ["s" * 10, "task", "a2", "o2", "a3", "o3"]
    out = policy_teachers.clip_messages(msgs, max_chars=4)
    assert out[0]["content"] == "ss\n[…]\nss" and out[1]["content"] == "task"
    assert policy_teachers.clip_messages(msgs) == msgs


def test_the_spec_chooses_how_a_teacher_is_asked():
    assert replay.BACKENDS[policy("p", "http://127.0.0.1:9/v1").kind] is PolicyTeacher
    assert replay.BACKENDS[TeacherSpec(name="r", model="openai/gpt-5").kind] is teachers.Teacher
    assert policy("p", "http://127.0.0.1:9/v1").mode == "samples"  # what a policy does
    with pytest.raises(ValueError, match="a policy teacher samples actions .* mode 'topk' cannot be asked"):
        policy("p", "http://127.0.0.1:9/v1", mode="topk")
    with pytest.raises(ValueError, match="revision and max_chars are settings of a policy teacher"):
        TeacherSpec(name="r", model="openai/gpt-5", max_chars=100)
    with pytest.raises(ValueError, match="kind"):
        TeacherSpec(name="r", model="openai/gpt-5", kind="oracle")


def test_a_replay_asks_reviewers_and_policies_side_by_side(tmp_path):
    """One replay, two kinds: the reviewer gets the question about the trace (one call a sample, no tools), the
    policy the student's own chat with its tools and n=k."""
    by_trace = {"A": [step("A", t, 2, "ls") for t in range(2)]}
    with counting_server() as (url, sent):
        reviewer = TeacherSpec(name="r", model="r", base_url=url, mode="samples", k=2, api_key_env="UNSET_KEY",
                               expected_output_tokens=0)
        records = ask(by_trace, [reviewer, policy("p", url, k=3)], tmp_path, seed=5)
    by_model = {m: [b for b in sent if b["model"] == m] for m in ("r", "p")}
    assert len(by_model["r"]) == 2 * 2 and all("tools" not in b and b["messages"][-1]["content"] ==
                                               teachers.COMMAND_QUESTION for b in by_model["r"])
    assert [(b["n"], b["seed"]) for b in by_model["p"]] == [(3, 5), (3, 6)]
    assert all(b["tools"] == policy_teachers.bash_tool_schema() and b["messages"] ==
               traces.prompt_messages(by_trace["A"][b["seed"] - 5].state.messages) for b in by_model["p"])
    assert [(q.teacher, q.step, q.sample) for q in records] == [
        (name, t, i) for t in range(2) for name, k in (("r", 2), ("p", 3)) for i in range(k)]
    assert replay.read_queries(tmp_path / replay.QUERIES_FILE) == records  # in order, each once
    assert [q.distribution for q in records if q.teacher == "p" and q.step == 1] == [
        {f"echo 6-{i}": 1.0} for i in range(3)]


def test_policy_teachers_against_the_echo_server(tmp_path):
    """The echo backend answers with the last user message: a tool call there comes back parsed as one."""
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
        specs = [policy(name, server.base_url, k=3, max_tokens=64, action_space="tools")
                 for name in ("teacher-a", "teacher-b")]
        specs.append(TeacherSpec(name="missing", model="nope", kind="policy", base_url=server.base_url, k=3,
                                 max_tokens=64))
        records = ask({"E": [good, bad, doubled]}, specs, tmp_path)
    assert [q.distribution for q in records if q.step == 2 and q.teacher == "teacher-a"] == [{VIEW: 1.0}] * 3
    records = [q for q in records if q.step < 2]
    assert len(records) == 2 * 3 * 3
    assert [q for q in replay.read_queries(tmp_path / replay.QUERIES_FILE) if q.step < 2] == records
    a0 = [q for q in records if q.teacher == "teacher-a" and q.step == 0]
    assert [q.distribution for q in a0] == [{VIEW: 1.0}] * 3 and a0[0].student_action == VIEW
    assert all(q.mode == "samples" and q.raw_text.startswith("<tool_call>") for q in a0)
    a1 = [q for q in records if q.teacher == "teacher-a" and q.step == 1]
    assert all(q.distribution is None and "no well-formed tool call" in q.parse_error for q in a1)
    missing = [q for q in records if q.teacher == "missing"]
    assert all(q.error_kind == "not_found" for q in missing)
    ex = pairs.extract({"E": [good, bad]}, records)
    assert ex.steps[0]["status"] == "student is the majority, no minority"
    assert ex.problems["teachers_never_parsed"] == ["missing"] and ex.problems["unparsed_answers"] == 6


def test_a_policy_prompt_is_cut_to_the_window_and_max_chars(tmp_path):
    history = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "task"}]
    for i in range(3):
        history += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "content": f"o{i}"}]
    record = step("A", 0, 1, "ls").model_copy(update={"state": State(messages=history)})
    with counting_server() as (url, sent):
        [q, *_] = ask({"A": [record]}, [policy("p", url, k=1, max_chars=8, provider=["deepinfra"])], tmp_path,
                      context="window", window=1)
    assert [m["content"] for m in sent[0]["messages"]] == ["ssss\n[…]\nssss", "task", "a2", "o2"]
    assert sent[0]["provider"] == {"order": ["deepinfra"], "allow_fallbacks": False}
    assert q.context == "window:1,chars:8"
    rows = replay.project({"A": [record]}, [policy("p", url, k=4, max_chars=8).model_copy(
        update={"model": "qwen/qwen3-8b"})], context="window", window=1)  # priced as the policy is prompted
    counter = replay.TokenCounter()
    assert [r["prompt_tokens"] for r in rows] == [counter.count(sent[0]["messages"])] * 4


def test_a_policy_teacher_answers_to_the_budget_guard(tmp_path):
    """A policy teacher sends through teachers.Teacher: a priced model's worst case is reserved before each request
    and the cap refuses what would pass it (here: any request), and the replay stops."""
    by_trace = {"A": [step("A", t, 3, "ls") for t in range(3)]}
    with counting_server() as (url, sent):
        spec = policy("p", url, k=4, max_tokens=4096).model_copy(update={"model": "qwen/qwen3-8b"})
        result = asyncio.run(replay.replay(by_trace, [spec], tmp_path, budget_usd=1e-9))
    assert sent == [] and {q.error_kind for q in result.records} == {"budget"}
    assert result.stop_reason == "budget" and not result.complete and len(result.records) == 4  # one step, then stop


def test_once_a_run_is_stopped_no_teacher_sends_again(tmp_path):
    """The run's stop list is shared: a refusal noted by one teacher ends every other teacher's sending at once (a
    reviewer's later samples, a policy's requests), not at the end of the step."""
    record = step("A", 0, 1, "ls")
    failed = query("A", 0, "t", None, error="HTTP 500")
    stop = []
    teachers.note_stop(stop, [failed])  # a server error is the call's, not the run's
    assert stop == []
    teachers.note_stop(stop, [failed, failed.model_copy(update={"error_kind": "payment_required"}),
                              failed.model_copy(update={"error_kind": "budget"})])
    assert stop == ["payment_required"]
    with counting_server() as (url, sent):
        store = teachers.Store(tmp_path / "s.sqlite", cap_usd=1.0)
        reviewer = teachers.Teacher(TeacherSpec(name="r", model="r", base_url=url, mode="samples", k=3,
                                                api_key_env="UNSET_KEY"), store)
        other = PolicyTeacher(policy("p", url, k=2), store)

        async def both():
            stop = []
            first = await reviewer.answer(record, stop=stop)
            stop.append("budget")  # as another teacher's refusal would put it there
            return first, await reviewer.answer(record, stop=stop), await other.answer(record, stop=stop)

        first, after, policy_after = asyncio.run(both())
        store.close()
    assert len(first) == 3 and after == [] and policy_after == [] and len(sent) == 3


def test_the_openrouter_key_goes_to_openrouter_only(monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-canary")
    assert teachers.api_key(policy("p", "http://127.0.0.1:9/v1")) == teachers.PLACEHOLDER_KEY
    assert teachers.api_key(TeacherSpec(name="r", model="m")) == "sk-or-v1-canary"  # OpenRouter itself
    with pytest.raises(RuntimeError, match="OPENROUTER_API_KEY is sent to OpenRouter only; name the variable"):
        teachers.api_key(policy("p", "https://vllm.example.org/v1"))
    monkeypatch.setenv("LOCAL_KEY", "sk-local")
    assert teachers.api_key(policy("p", "https://vllm.example.org/v1", api_key_env="LOCAL_KEY")) == "sk-local"


def test_a_key_an_endpoint_echoes_is_in_no_record_and_not_in_the_store(tmp_path, monkeypatch):
    """The echo backend answers with the prompt's last message, which here holds the key the client sends."""
    from composer.models import tiny_model
    from composer.serve import serve

    secret = "sk-local-0123456789abcdef"
    monkeypatch.setenv("LOCAL_KEY", secret)
    record = step("A", 0, 1, "ls").model_copy(update={"state": State(messages=[
        {"role": "user", "content": f'<tool_call>{{"name": "view", "arguments": {{"path": "{secret}"}}}}</tool_call>'}])})
    with serve(models={"p": tiny_model()}, backend="echo") as server:
        records = ask({"A": [record]}, [policy("p", server.base_url, k=1, max_tokens=64, api_key_env="LOCAL_KEY")],
                      tmp_path)
    assert records[0].raw_text and "[redacted]" in records[0].raw_text
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path.name


def test_policy_teachers_keep_finished_steps_when_the_run_fails(tmp_path, monkeypatch):
    from composer.models import tiny_model
    from composer.serve import serve

    call = '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>'
    first = StepRecord(schema_version=SCHEMA_VERSION, trace_id="E", step=0,
                       state=State(messages=[{"role": "user", "content": call}]),
                       action=Action(text="x", tool_call=ToolCall(name="view", arguments={"path": "a.py"})),
                       observation=None, reward=None, done=False, truncated=False, source="test")
    second = first.model_copy(update={"step": 1, "state": State(messages=[{"role": "user", "content": "crash"}])})
    real = traces.prompt_messages

    def crash_at_step_1(messages):
        if messages[-1]["content"] == "crash":
            raise RuntimeError("killed mid-run")
        return real(messages)

    monkeypatch.setattr(policy_teachers, "prompt_messages", crash_at_step_1)
    with serve(models={"teacher-a": tiny_model()}, backend="echo") as server:
        with pytest.raises(RuntimeError, match="killed"):
            ask({"E": [first, second]}, [policy("teacher-a", server.base_url, k=2)], tmp_path)
    kept = replay.read_queries(tmp_path / replay.QUERIES_FILE)  # step 0 was answered before step 1 failed
    assert [(q.step, q.sample, q.distribution) for q in kept] == [(0, 0, {VIEW: 1.0}), (0, 1, {VIEW: 1.0})]


def test_policy_teachers_ask_for_each_sample_an_endpoint_ignoring_n_left_out(tmp_path, capsys):
    by_trace = {"A": [step("A", t, 2, "ls") for t in range(2)]}
    path = tmp_path / replay.QUERIES_FILE
    with counting_server(ignore_n={"deaf"}) as (url, sent):
        specs = [policy(name, url, k=3) for name in ("honest", "deaf")]
        records = ask(by_trace, specs, tmp_path, seed=10)
        assert "endpoint 'deaf' ignored n (asked for 3 samples, got 1)" in capsys.readouterr().out
        assert Counter((b["model"], b["n"]) for b in sent) == {("honest", 3): 2, ("deaf", 3): 2, ("deaf", 1): 4}
        assert policy_teachers.ignored_n(records) == ["deaf"]
        for t in range(2):
            honest, deaf = ([q for q in records if q.teacher == name and q.step == t] for name in ("honest", "deaf"))
            assert [next(iter(q.distribution)) for q in honest] == [f"echo {10 + t}-{i}" for i in range(3)]
            assert [next(iter(q.distribution)) for q in deaf] == [f"echo {10 + t + i}-0" for i in range(3)]
            assert len({q.request_key for q in honest}) == 1 and len({q.request_key for q in deaf}) == 3
            assert [q.prompt_tokens for q in deaf] == [10] * 3  # each request's usage, once
            assert [q.prompt_tokens for q in honest] == [10, None, None]
        sent.clear()
        again = ask(by_trace, specs, tmp_path, seed=10)
    assert sent == [] and all(q.cached for q in again)  # every request answered from the store
    assert [q.model_copy(update={"cached": False}) for q in again] == records
    assert policy_teachers.ignored_n(again) == ["deaf"]
    assert replay.read_queries(path) == again and set(sample_counts(again).values()) == {1}


def test_policy_teachers_resume_from_the_store(tmp_path):
    by_trace = {"E": [step("E", t, 3, "ls") for t in range(3)]}
    path = tmp_path / replay.QUERIES_FILE
    with counting_server() as (url, sent):
        specs = [policy("teacher-a", url, k=2, revision="v1")]
        first = ask(by_trace, specs, tmp_path)
        # a kill after step 2 was answered and before it was stored, which also tore the file's last line
        db = sqlite3.connect(tmp_path / replay.STORE_FILE)
        db.execute("DELETE FROM answers WHERE key = ?", (first[-1].request_key,))
        db.commit()
        db.close()
        path.write_text(path.read_text()[:-30])
        sent.clear()
        again = ask(by_trace, specs, tmp_path)
        assert [b["seed"] for b in sent] == [2]  # only the request whose answer was not stored
        assert [q.cached for q in again] == [True] * 4 + [False] * 2
        assert [q.model_dump(exclude={"cached", "latency_s"}) for q in again] == [
            q.model_dump(exclude={"cached", "latency_s"}) for q in first]
        assert again[:4] == [q.model_copy(update={"cached": True}) for q in first[:4]]  # reused as they were
        assert replay.read_queries(path) == again  # afresh: each sample once
        sent.clear()  # another checkpoint behind the same name: nothing is reused
        ask(by_trace, [specs[0].model_copy(update={"revision": "v2"})], tmp_path)
        assert len(sent) == 3


def test_policy_teachers_send_a_request_two_traces_share_once(tmp_path):
    # two rollouts of one task: the same first state, then different ones
    by_trace = {"A": [step("A", 0, 2, "ls"), step("A", 1, 2, "ls", history="a")],
                "B": [step("B", 0, 2, "ls"), step("B", 1, 2, "ls", history="b")]}
    with counting_server() as (url, sent):  # a model with a price: the answer's cost is on its first asker only
        records = ask(by_trace, [policy("t", url, k=2).model_copy(update={"model": "qwen/qwen3-8b"})], tmp_path)
    assert len(sent) == 3  # not 4
    assert [q.trace_id for q in records if q.step == 0 and q.cost_usd] == ["A"]
    first = {(q.trace_id, q.step): q for q in records if q.sample == 0}
    assert first["A", 0].request_key == first["B", 0].request_key != first["B", 1].request_key
    assert first["A", 0].distribution == first["B", 0].distribution
    assert sorted(q.cached for q in records if q.step == 0) == [False, False, True, True]  # paid once
    assert sample_counts(records) == {(tid, t, "t", i): 1 for tid in "AB" for t in range(2) for i in range(2)}


def test_policy_teachers_killed_at_random_moments_never_repay_a_stored_answer(tmp_path):
    """kill -9 at seeded random moments, then resume: no request whose answer was stored is sent again (what
    was in flight at a kill may be), and the last run's file holds every planned sample once."""
    by_trace = {tid: [step(tid, t, 5, "ls", history=tid) for t in range(5)] for tid in ("A", "B")}
    traces_file, path, store = tmp_path / "traces.jsonl", tmp_path / replay.QUERIES_FILE, tmp_path / replay.STORE_FILE
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
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE_RUNS, str(traces_file), str(tmp_path)], cwd=ROOT,
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
        records = ask(by_trace, [policy(name, url, k=3, revision="r1") for name in ("honest", "deaf")], tmp_path)
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


KILLABLE_RUNS = """
import asyncio, os, signal, sys, time, traceback
from composer import replay
from composer.teachers import TeacherSpec
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
            specs = [TeacherSpec(name=name, model=name, kind="policy", base_url=url, k=3, revision="r1")
                     for name in ("honest", "deaf")]
            asyncio.run(replay.replay(by_trace, specs, sys.argv[2]))
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    print("started", flush=True)
    sys.stdin.readline()
    os.kill(pid, signal.SIGKILL)  # not reaped yet, so this pid is still the run's, finished or not
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)  # -9: killed
"""
