"""Tests for composer.env.containment.worker: the warm pytest server reports what a cold run reports, and its limits
hold.

Every hostile child below is bounded by the test itself, so a containment failure shows up as a failed assertion,
never as harm to the host.
"""

import gc
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from composer.env.containment import patches, sandbox
from composer.env.containment.worker import ZYGOTE, PytestWorker, _Server

MODE = sandbox.isolation()["mode"]
NAMESPACED = MODE in ("root-ns", "user-ns")
capped = pytest.mark.skipif(not sandbox.guarantees()["process_cap"],
                            reason=f"max_procs does not bound processes in {MODE!r} mode as root")


@pytest.fixture
def repo(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    return d


needs_ns = pytest.mark.skipif(not NAMESPACED, reason="the warm worker needs a PID namespace (else: cold runs)")


def write(repo, rel, text):
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def alive(pid) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def uid_processes(uid) -> list[str]:
    return [p.name for p in Path("/proc").glob("[0-9]*") if _uid_of(p) == uid]


def _uid_of(p):
    try:
        return p.stat().st_uid
    except OSError:
        return None


@pytest.fixture
def worker(repo):
    w = PytestWorker(repo, timeout_s=8)
    yield w
    w.close()


@needs_ns
def test_worker_sees_edits_and_new_files_and_keeps_no_state_between_runs(repo, worker):
    write(repo, "calc.py", "VALUE = 1\n")
    write(repo, "tests/test_v.py", """
        import builtins
        import calc

        def test_value():
            assert calc.VALUE == 1

        def test_no_leak():
            assert not hasattr(builtins, "LEAK")
            builtins.LEAK = 1
    """)
    ids = ["tests/test_v.py::test_value", "tests/test_v.py::test_no_leak"]
    assert worker.run(ids).outcomes == dict.fromkeys(ids, True)
    pid = worker.pid
    write(repo, "calc.py", "VALUE = 2\n")  # same size, same second: only a fresh import sees it
    run = worker.run(ids)
    assert run.outcomes == {ids[0]: False, ids[1]: True} and "assert 2 == 1" in run.output
    write(repo, "tests/test_new.py", "import calc\n\ndef test_two():\n    assert calc.VALUE == 2\n")
    assert worker.run(["tests/test_new.py::test_two"]).outcomes == {"tests/test_new.py::test_two": True}
    assert worker.pid == pid and worker.starts == 1 and worker.fallback is None  # all three ran warm
    assert not list(repo.rglob("__pycache__")) and not list(repo.rglob("*.pyc"))




@needs_ns
def test_worker_reports_what_a_cold_run_reports(repo, worker):
    from test_env_sandbox import RICH  # the same rich test file the cold runs are checked on
    write(repo, "tests/test_x.py", RICH)
    for ids in ([], ["tests/test_x.py::test_pass", "tests/test_x.py::test_missing"], ["tests/test_x.py"],
                ["tests/nope.py::test_a"]):
        warm, cold = worker.run(ids), sandbox.run_pytest(repo, ids)
        assert (warm.outcomes, warm.returncode, warm.error) == (cold.outcomes, cold.returncode, cold.error)
    assert warm.outcomes == {"tests/nope.py::test_a": False} and "none of the requested" in warm.output
    assert worker.starts == 1 and "2 failed" in worker.run(["tests/test_x.py"]).output


@needs_ns
def test_worker_hang_is_killed_with_its_escapees_and_the_worker_restarts(repo, tmp_path):
    log = repo / "escapee.log"  # inside the copy: in "root-ns" nothing else is visible to the run
    write(repo, "test_h.py", f"""
        import subprocess, sys

        def test_ok():
            pass

        def test_hang():
            tick = "import time\\nfor _ in range(12000):\\n    open({str(log)!r}, 'a').write('x'); time.sleep(0.05)"
            subprocess.Popen([sys.executable, "-c", tick], start_new_session=True)
            while True:
                pass
    """)
    worker = PytestWorker(repo, timeout_s=2)
    run = worker.run(["test_h.py::test_ok", "test_h.py::test_hang"])
    # cut at its own 2 s (its error says which), not after waiting on the escapee's 12,000 ticks (600 s)
    assert run.timed_out and run.error == "timed out after 2s" and log.stat().st_size < 12000
    assert run.outcomes == {"test_h.py::test_ok": True, "test_h.py::test_hang": False} and "timeout" in run.output
    assert worker.pid is None  # the whole server went
    size = log.stat().st_size
    assert size > 0
    time.sleep(0.4)
    assert log.stat().st_size == size  # the setsid() escapee died with it
    write(repo, "test_h.py", "def test_ok():\n    pass\n")
    run = worker.run(["test_h.py::test_ok"])
    assert run.error is None and run.outcomes == {"test_h.py::test_ok": True} and worker.starts == 2
    worker.close()


@needs_ns
def test_worker_kills_what_a_finished_run_left_running(repo, worker, tmp_path):
    log = repo / "left.log"
    log.touch()
    write(repo, "test_l.py", f"""
        import os, subprocess, sys

        def test_leave_a_sleeper():
            tick = "import time\\nfor _ in range(200):\\n    open({str(log)!r}, 'a').write('x'); time.sleep(0.05)"
            subprocess.Popen([sys.executable, "-c", tick], start_new_session=True)
            if os.fork() == 0:  # and a forked copy of pytest itself, in the same group
                import time
                time.sleep(10)
                os._exit(0)
    """)
    run = worker.run(["test_l.py::test_leave_a_sleeper"])
    assert run.outcomes == {"test_l.py::test_leave_a_sleeper": True}, run.output
    size = log.stat().st_size
    time.sleep(0.4)
    assert log.stat().st_size == size and worker.pid is not None  # the leftovers died, the server did not
    if MODE == "root-ns":
        assert len(uid_processes(worker._state.session.uid)) == 1  # the server alone


HOSTILE_TESTS = {  # body of test_bad; its outcome; what else the run must show
    "memory": ("x = bytearray(4 * 1024 ** 3)", False, lambda run: "MemoryError" in run.output and not run.timed_out),
    "cpu": ("while True:\n        pass", False,
            lambda run: run.returncode < 0 and not run.timed_out and "killed or crashed" in run.error),
    "flood": ("import sys\n    for _ in range(100):\n        sys.stdout.write('x' * (1 << 20))\n    assert False", False,
              lambda run: len(run.output) < 21_000 and "bytes of output cut" in run.output),
    # passes only when max_procs stopped it well below the 200 forks it tries; its sleepers (120 s, past the
    # run's timeout) die with the run, or the run would time out waiting on them
    "fork bomb": ("import os, time\n    n = 0\n    for _ in range(200):\n        try:\n            pid = os.fork()\n"
                  "        except OSError:\n            break\n        if pid == 0:\n            time.sleep(120)\n"
                  "            os._exit(0)\n        n += 1\n    assert n < 20, n", True,
                  lambda run: not run.timed_out),
}


@needs_ns
@pytest.mark.parametrize("name", [pytest.param(n, marks=capped if n == "fork bomb" else ()) for n in HOSTILE_TESTS])
def test_worker_limits_hold_per_run_and_the_server_survives(repo, name):
    body, passes, check = HOSTILE_TESTS[name]
    write(repo, "test_bad.py", f"def test_bad():\n    {body}\n\ndef test_good():\n    pass\n")
    # the timeout far above what any of these takes (the cpu one ends at its 2 s of CPU): each ends by its own limit
    with PytestWorker(repo, timeout_s=60, memory_mb=512, cpu_s=2, max_procs=20) as w:
        run = w.run(["test_bad.py::test_bad"])
        assert check(run), (run.error, run.output[-2000:])
        assert run.outcomes == {"test_bad.py::test_bad": passes} and not run.timed_out
        again = w.run(["test_bad.py::test_good"])
        assert again.error is None and again.outcomes == {"test_bad.py::test_good": True} and w.starts == 1


@needs_ns
def test_worker_child_sees_a_scrubbed_env_and_no_network(repo, worker, monkeypatch):
    canary = "sk-or-v1-canary-0123456789abcdef"
    monkeypatch.setenv("OPENROUTER_API_KEY", canary)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    write(repo, "test_e.py", f"""
        import json, os, socket

        def test_env():
            open("env.json", "w").write(json.dumps(dict(os.environ)))

        def test_net():
            socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), timeout=2)
    """)
    try:
        run = worker.run(["test_e.py::test_env", "test_e.py::test_net"])
    finally:
        server.close()
    assert run.outcomes == {"test_e.py::test_env": True, "test_e.py::test_net": False}
    env = json.loads((repo / "env.json").read_text())
    assert canary not in json.dumps(env) and "OPENROUTER_API_KEY" not in env
    # the plugin took its pipe, token and selection out before any test ran
    assert set(env) - set(sandbox.scrubbed_env()) == {"PYTHONPATH", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
                                                      "PYTEST_CURRENT_TEST", "PYTEST_VERSION"}
    assert env["TMPDIR"] == env["HOME"] != os.environ.get("HOME")
    assert env["HOME"].startswith("/tmp/run-") if MODE in sandbox.OWN_ROOT_MODES else "composer-sbx-" in env["HOME"]


@needs_ns
def test_worker_close_and_garbage_collection_leave_no_process(repo):
    write(repo, "test_c.py", "def test_c():\n    open('made_by_child.txt', 'w').write('x')\n")
    w = PytestWorker(repo)
    assert w.pid is None  # nothing starts before the first run
    assert w.run(["test_c.py::test_c"]).outcomes == {"test_c.py::test_c": True}
    pid, uid, scratch = w.pid, w._state.session.uid, w._state.session.dir
    assert alive(pid)
    w.close()
    w.close()  # idempotent
    assert not alive(pid) and w.pid is None and not scratch.exists()
    if MODE == "root-ns":
        assert uid_processes(uid) == []
        assert {p.stat().st_uid for p in [repo, *repo.rglob("*")]} == {os.geteuid()}  # the repo is given back
    with pytest.raises(patches.SandboxError, match="closed"):
        w.run(["test_c.py::test_c"])
    w = PytestWorker(repo)
    w.run(["test_c.py::test_c"])
    pid = w.pid
    del w
    gc.collect()
    assert not alive(pid)


def test_worker_bad_input(repo, tmp_path):
    with pytest.raises(patches.SandboxError, match="not a directory"):
        PytestWorker(tmp_path / "missing")
    with pytest.raises(patches.SandboxError, match="positive"):
        PytestWorker(repo, timeout_s=0)
    with PytestWorker(repo) as w:
        for bad in ["tests/test_x.py", [1, 2], None, {"tests/test_x.py": 1}]:
            with pytest.raises(patches.SandboxError, match="list of strings"):
                w.run(bad)
        assert w.pid is None  # refused before anything started


def test_the_server_refuses_to_run_unless_it_is_pid_1_of_its_namespace():
    """After each run it sends SIGKILL to -1, which reaches every process it may signal: outside a PID namespace of
    its own, as root, every process of the host. (A worker once launched it outside one, when the mode it checked and
    the mode its session launched in disagreed.) Its stdin is closed: without the guard it would run nothing."""
    read, write = os.pipe()
    try:
        proc = subprocess.run([sys.executable, "-c", ZYGOTE, str(write)], pass_fds=(write,),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as replies:
        assert replies.read() == b""  # it never said it was ready
    assert proc.returncode == 1 and "must be pid 1 of its own PID namespace, not pid" in proc.stderr


def test_worker_falls_back_to_cold_runs_in_plain_mode(repo, monkeypatch):
    monkeypatch.setattr(sandbox, "_mode", lambda: "plain")
    write(repo, "test_p.py", "def test_p():\n    pass\n")
    with PytestWorker(repo) as w:
        run = w.run(["test_p.py::test_p"])
        assert run.outcomes == {"test_p.py::test_p": True} and run.error is None
        assert "plain" in w.fallback and w.pid is None and w.starts == 0


@needs_ns
def test_worker_falls_back_to_cold_runs_when_it_cannot_start(repo, monkeypatch):
    monkeypatch.setattr("composer.env.containment.worker.ZYGOTE", "import sys; print('no pytest here'); sys.exit(3)")
    write(repo, "test_p.py", "def test_p():\n    pass\n")
    with PytestWorker(repo) as w:
        for _ in range(2):
            run = w.run(["test_p.py::test_p"])
            assert run.outcomes == {"test_p.py::test_p": True} and run.error is None
        assert w.fallback.startswith("the pytest worker did not start") and "no pytest here" in w.fallback
        assert w.pid is None and w.starts == 0


@needs_ns
def test_worker_goes_cold_for_a_repo_that_shadows_a_preloaded_module(repo, worker):
    # The repo's own textwrap (a faithful copy plus a marker): a cold `python -m pytest` imports it, a child of
    # the server would get the server's stdlib copy. The worker must notice and run cold.
    write(repo, "textwrap.py", """
        import importlib.util, os, sysconfig
        _spec = importlib.util.spec_from_file_location("textwrap", os.path.join(sysconfig.get_paths()["stdlib"],
                                                                                 "textwrap.py"))
        _real = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_real)
        globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
        THE_REPOS = True
    """)
    write(repo, "test_s.py", "import textwrap\n\ndef test_s():\n    assert textwrap.THE_REPOS\n")
    run = worker.run(["test_s.py::test_s"])
    assert run.outcomes == {"test_s.py::test_s": True}, run.output
    assert "textwrap" in worker.fallback and worker.pid is None


@needs_ns  # in user-ns mode the run is root of its user namespace, but without a capability
def test_a_run_cannot_take_over_the_server(repo, worker):
    # The server is pid 1 of the run's namespace and undumpable: no signal, no ptrace, no /proc/1/mem.
    write(repo, "test_t.py", """
        import ctypes, os, signal

        def test_signal():
            os.kill(1, signal.SIGKILL)  # init ignores it from inside its namespace

        def test_ptrace():
            libc = ctypes.CDLL(None, use_errno=True)
            assert libc.ptrace(16, 1, None, None) != 0  # PTRACE_ATTACH
            assert ctypes.get_errno() == 1  # EPERM

        def test_mem():
            try:
                open("/proc/1/mem", "rb")
            except PermissionError:
                return
            raise AssertionError("opened the server's memory")
    """)
    run = worker.run([])
    assert run.outcomes == dict.fromkeys(["test_t.py::test_signal", "test_t.py::test_ptrace", "test_t.py::test_mem"],
                                         True), run.output
    pid = worker.pid
    assert worker.run(["test_t.py::test_mem"]).error is None and worker.pid == pid and worker.starts == 1


@needs_ns
def test_worker_restarts_after_its_server_dies_or_a_run_is_interrupted(repo, worker, monkeypatch):
    import signal
    import threading

    write(repo, "test_d.py", "import time\n\ndef test_ok():\n    pass\n\ndef test_slow():\n    time.sleep(600)\n")
    ok = ["test_d.py::test_ok"]
    assert worker.run(ok).error is None
    os.kill(worker.pid, signal.SIGKILL)  # dies between runs
    worker._state.server.proc.wait()
    assert worker.run(ok).outcomes == {ok[0]: True} and worker.starts == 2

    threading.Timer(0.5, os.kill, (worker.pid, signal.SIGKILL)).start()  # dies during a run
    run = worker.run(["test_d.py::test_slow"])
    # seen at once, not at the run's 8 s timeout (nor when the 600 s sleep ends)
    assert not run.timed_out and "worker died" in run.output and run.error
    assert worker.run(ok).outcomes == {ok[0]: True} and worker.starts == 3

    real = _Server.reply
    calls = []

    def interrupted(self, out, deadline):  # the host is interrupted while a run is under way
        if not calls:
            calls.append(1)
            raise KeyboardInterrupt
        return real(self, out, deadline)

    monkeypatch.setattr(_Server, "reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        worker.run(["test_d.py::test_slow"])
    assert worker.pid is None  # its late reply can not be taken for the next run's
    assert worker.run(ok).outcomes == {ok[0]: True} and worker.starts == 4


@needs_ns
def test_worker_goes_cold_when_it_preloaded_a_module_from_the_repo(repo, worker, monkeypatch):
    # As with a repo installed in editable mode (src layout): the server's pytest would be the repo's own, stale.
    write(repo, "src/mylib.py", "X = 1\n")
    write(repo, "code/notes.txt", "a folder without __init__.py shadows nothing\n")
    write(repo, "test_m.py", "def test_m():\n    pass\n")
    monkeypatch.setattr("composer.env.containment.worker.ZYGOTE", ZYGOTE.replace(
        "gc.freeze()", "sys.path.append(os.path.join(os.getcwd(), 'src')); import mylib\ngc.freeze()", 1))
    assert worker.run(["test_m.py::test_m"]).outcomes == {"test_m.py::test_m": True}
    assert worker.fallback.endswith("preloaded modules that the repo has: mylib") and worker.pid is None
