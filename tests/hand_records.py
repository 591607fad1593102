"""Hand-built records that several test modules share: a teacher-replay `step` and its `query` answers, the
`three_traces` (three traces with known rules) and a counting teacher server (tests/test_disagreement_pairs.py,
test_disagreement_pair_stats.py, test_policy_teachers.py), and a collected `record`
(test_collection_collect.py, test_collection_trace_checks.py).
"""

import contextlib
import hashlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


from composer import traces
from composer.teachers import TeacherQuery
from composer.actions import canonical_tool_call
from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall


VIEW = canonical_tool_call("view", {"path": "a.py"})
GREP = "grep x"
CAT, LS, PWD = "cat a.py", "ls", "pwd"


def step(trace_id, t, n, action, *, history="", outcome=None, reward=None):
    """A StepRecord whose action is `action` (a bash command, VIEW, or None: a malformed call)."""
    if action is None:
        act = Action(text="garbage")
    elif action == VIEW:
        act = Action(text="v", tool_call=ToolCall(name="view", arguments={"path": "a.py"}))
    else:
        act = Action(text=action, tool_call=ToolCall(name="bash", arguments={"command": action}))
    last = t == n - 1
    return StepRecord(schema_version=SCHEMA_VERSION, trace_id=trace_id, step=t,
                      state=State(messages=[{"role": "system", "content": "sys"},
                                            {"role": "user", "content": f"task {history} at {t}"}]),
                      action=act, observation="out", reward=reward if last else None, done=last, truncated=False,
                      source="test", task_id=f"task-{trace_id}", outcome=outcome if last else None)


def query(trace_id, t, teacher, distribution, *, sample=0, mode="topk", error=None, parse_error=None, raw=None):
    return TeacherQuery(trace_id=trace_id, step=t, teacher=teacher, model=f"m-{teacher}", model_used=None,
                        provider=None, mode=mode, sample=sample, context="full", cache=False, student_action=None,
                        distribution=distribution, raw_text=raw, parse_error=parse_error,
                        error_kind="server_error" if error else None, error=error, request_key="k")


def three_traces():
    """Trace A: rule 1 at step 0, no majority at step 1 (a tie), a malformed student call at step 2 (rule 3).
    Trace B: rule 2 at step 0; step 1 has one parse failure and a missing record (too few voters).
    Trace C: the very state and answers of B's step 0 (a duplicate)."""
    by_trace = {
        "A": [step("A", 0, 3, LS), step("A", 1, 3, VIEW), step("A", 2, 3, None, outcome={"resolved": True})],
        "B": [step("B", 0, 2, LS, history="b"), step("B", 1, 2, LS, history="b", reward=0.0)],
        "C": [step("C", 0, 1, LS, history="b", reward=1.0)],
    }
    # C's first state equals B's: same history text and step
    by_trace["C"][0] = by_trace["C"][0].model_copy(update={"state": by_trace["B"][0].state})
    qs = [
        query("A", 0, "t1", {CAT: 0.6, LS: 0.4}), query("A", 0, "t2", {CAT: 0.7, LS: 0.3}), query("A", 0, "t3", {LS: 1.0}),
        query("A", 1, "t1", {VIEW: 1.0}), query("A", 1, "t2", {VIEW: 0.5, GREP: 0.5}), query("A", 1, "t3", {GREP: 1.0}),
        query("A", 2, "t1", {CAT: 1.0}), query("A", 2, "t2", {CAT: 1.0}), query("A", 2, "t3", {CAT: 1.0}),
        query("B", 0, "t1", {LS: 1.0}), query("B", 0, "t2", {LS: 0.8, PWD: 0.2}), query("B", 0, "t3", {PWD: 1.0}),
        query("B", 1, "t1", {LS: 1.0}), query("B", 1, "t2", None, parse_error="no JSON"),
        query("C", 0, "t1", {LS: 1.0}), query("C", 0, "t2", {LS: 0.8, PWD: 0.2}), query("C", 0, "t3", {PWD: 1.0}),
    ]
    return by_trace, qs


@contextlib.contextmanager
def counting_server(ignore_n=()):
    """A loopback OpenAI-compatible endpoint that logs the body of every request it gets (a paid provider bills
    each) and answers, after a short delay, each choice with a bash call naming the body's seed and the choice's
    index; models in ignore_n get one choice whatever n asks (OpenRouter's way). On leaving, every request that
    reached it is in the log (its handler threads are joined)."""
    sent: list[dict] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers["content-length"]))
            body = json.loads(raw)
            with lock:
                sent.append(body)
            time.sleep(0.02 + int(hashlib.sha256(raw).hexdigest()[:4], 16) % 40 / 1000)
            n = 1 if body["model"] in ignore_n else body.get("n", 1)
            calls = [{"id": f"call_{i}", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": f"echo {body.get('seed')}-{i}"})}} for i in range(n)]
            choices = [{"index": i, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]}}
                       for i, call in enumerate(calls)]
            answer = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"], "choices": choices,
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5 * n}}).encode()
            with contextlib.suppress(OSError):  # the client was killed while it waited
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = False  # server_close() joins the handlers
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", sent
    finally:
        server.shutdown()
        server.server_close()


def sample_counts(records):
    return Counter((q.trace_id, q.step, q.teacher, q.sample) for q in records)


def record(trace_id, step, *, done=False, reward=None, **extra):
    return traces.StepRecord(
        schema_version="1.0", trace_id=trace_id, step=step,
        state=traces.State(messages=[{"role": "user", "content": "fix it"}]),
        action=traces.Action(text="<tool_call>...", token_ids=[1, 2], mask=[1, 1]),
        observation="ok" if not done else None, reward=reward, done=done, truncated=False, source="trl",
        outcome={"reward": reward, "truncation": []} if done else None, meta={"train_step": 0}, **extra)
