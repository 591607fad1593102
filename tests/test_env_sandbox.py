"""Tests for composer.env.sandbox: limits really hold on this host, paths and patches stay confined.

Every hostile child below is bounded by the test itself (fork at most 200 times, print
100 MB, ...), so a containment failure shows up as a failed assertion, never as harm to the host.
"""

import gc
import json
import os
import resource
import socket
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from composer.env import sandbox

MODE = sandbox.isolation()["mode"]
NAMESPACED = MODE in ("root-ns", "user-ns")
HOLDS = sandbox.guarantees()
capped = pytest.mark.skipif(not HOLDS["process_cap"], reason=f"max_procs does not bound processes in {MODE!r} mode "
                                                             "as root (RLIMIT_NPROC: root ignores it, in a user "
                                                             "namespace too); it does in root-ns (bubblewrap)")


@pytest.fixture
def repo(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    return d


def py(repo, code, **kw):
    return sandbox.run_python(repo, ["-c", textwrap.dedent(code)], **kw)


# --- limits ---------------------------------------------------------------------------------


def test_infinite_loop_times_out_and_the_whole_tree_dies(repo):
    # Two grandchildren append to files for 10 s (bounded, should containment fail), one of them in
    # its own session: killpg misses it, only a PID namespace (or nothing, in "plain" mode) stops it.
    code = """
    import subprocess, sys
    tick = "import time\\nfor _ in range(200):\\n    open(sys.argv[1], 'a').write('x'); time.sleep(0.05)"
    subprocess.Popen([sys.executable, "-c", "import sys\\n" + tick, "same_group.log"])
    subprocess.Popen([sys.executable, "-c", "import sys\\n" + tick, "own_session.log"], start_new_session=True)
    print("started", flush=True)
    while True:
        pass
    """
    start = time.monotonic()
    rc, out, timed_out = py(repo, code, timeout_s=1.5)
    assert timed_out and rc < 0 and "started" in out and "timeout" in out
    assert time.monotonic() - start < 4
    logs = [repo / "same_group.log"] + ([repo / "own_session.log"] if NAMESPACED else [])
    sizes = [p.stat().st_size for p in logs]
    assert all(s > 0 for s in sizes)  # they did run
    time.sleep(0.4)
    assert [p.stat().st_size for p in logs] == sizes  # and nothing writes any more


@capped
def test_fork_bomb_is_capped_by_max_procs(repo):
    code = "import os, time\n" + forks(200, 3) + 'print("forked", n)\n'  # the test's own cap: 200 children
    start = time.monotonic()
    rc, out, timed_out = py(repo, code, timeout_s=8, max_procs=20)
    forked = int(out.split("forked")[1].split()[0])
    assert forked < 20  # stopped by the cap, far below the 200 the child tried
    if NAMESPACED:  # the PID namespace dies with its init: the sleepers do not outlive the run
        assert time.monotonic() - start < 2.5


def forks(count: int, sleep_s: float) -> str:
    """Child code that forks up to `count` children sleeping `sleep_s` each (bounded), counting them in n."""
    return (f"n = 0\nfor _ in range({count}):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            f"    if pid == 0:\n        time.sleep({sleep_s})\n        os._exit(0)\n    n += 1\n")


PROBE_GUARANTEES = """
import os, socket, sys, time
report = {"pid_namespace": os.getpid() == 1}
try:
    with open(sys.argv[1], "w") as f:
        f.write("x")
    report["private_files"] = False
except OSError:
    report["private_files"] = True
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).close()
    report["no_network"] = False
except OSError:
    report["no_network"] = True
""" + forks(40, 1) + """
report["process_cap"] = n < 40
print("REPORT", report)
"""


def test_every_mode_keeps_exactly_the_guarantees_the_skips_rest_on(tmp_path):
    """Each containment mode this host can run, forced: what a run can do there is what sandbox.guarantees says,
    so no test skips where its guarantee holds, and none runs (and fails) where it does not."""
    import ast
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(outside, 0o777)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    tried = []
    try:
        for mode in ("root-ns", "user-ns", "pid-ns", "plain"):
            repo = tmp_path / mode
            repo.mkdir()
            with sandbox.forced_mode(mode):
                if sandbox.run_python(repo, ["-c", "pass"])[0] != 0:
                    continue  # this host cannot run it (no bubblewrap, no user namespaces, not root)
                rc, out, _ = sandbox.run_python(repo, ["-c", PROBE_GUARANTEES, str(outside / mode),
                                                       str(server.getsockname()[1])], timeout_s=15, max_procs=10)
            seen = ast.literal_eval(out.split("REPORT", 1)[1].strip())
            assert seen == sandbox.guarantees(mode), (mode, out)
            tried.append(mode)
    finally:
        server.close()
    assert "plain" in tried and MODE in tried


@pytest.mark.skipif(os.environ.get("COMPOSER_REQUIRE_ROOT_NS") != "1", reason="COMPOSER_REQUIRE_ROOT_NS=1 is CI's")
def test_ci_runs_the_containment_tests_it_requires():
    assert MODE == "root-ns" and sandbox.forked_runs(), sandbox.isolation()


def test_output_flood_is_truncated_and_parent_memory_stays_bounded(repo):
    code = """
    import sys
    chunk = "x" * (1 << 20)
    for _ in range(100):
        sys.stdout.write(chunk)
    print("THE END")
    """
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    rc, out, timed_out = py(repo, code, timeout_s=9, max_output=20_000)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert rc == 0 and not timed_out
    assert len(out) < 21_000 and "bytes of output cut" in out and out.rstrip().endswith("THE END")
    assert grown_mb < 40  # the 100 MB were streamed through, never held


def test_memory_hog_is_stopped(repo):
    start = time.monotonic()
    rc, out, timed_out = py(repo, "x = bytearray(4 * 1024 ** 3)\nprint('allocated')", memory_mb=512, timeout_s=8)
    assert rc != 0 and not timed_out and "MemoryError" in out and "allocated" not in out
    assert time.monotonic() - start < 5


def test_cpu_limit_kills_a_busy_child_before_the_wall_clock(repo):
    start = time.monotonic()
    rc, out, timed_out = py(repo, "while True:\n    pass", cpu_s=1, timeout_s=9)
    assert rc != 0 and not timed_out
    assert time.monotonic() - start < 5


# --- environment, network, filesystem -------------------------------------------------------


def test_parent_secrets_are_not_visible_and_home_is_a_temp_dir(repo, monkeypatch):
    canary = "sk-or-v1-canary-0123456789abcdef"
    monkeypatch.setenv("OPENROUTER_API_KEY", canary)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    rc, out, _ = py(repo, "import os, json; print(json.dumps(dict(os.environ)))")
    assert rc == 0 and canary not in out
    env = __import__("json").loads(out)
    assert set(env) == set(sandbox.scrubbed_env())
    assert env["PYTHONHASHSEED"] == "0" and env["HOME"] != os.environ.get("HOME")
    assert env["HOME"] == "/tmp" if MODE == "root-ns" else "composer-sbx-" in env["HOME"]  # the private /tmp


@pytest.mark.skipif(not HOLDS["no_network"], reason="network isolation needs a network namespace")
def test_no_network_not_even_the_parents_loopback(repo):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = f"""
    import socket
    for addr in [("127.0.0.1", {port}), ("1.1.1.1", 80)]:
        try:
            socket.create_connection(addr, timeout=2)
            print("CONNECTED", addr)
        except OSError as e:
            print("blocked", addr, e)
    """
    try:
        rc, out, _ = py(repo, code, timeout_s=8)
    finally:
        server.close()
    assert rc == 0 and "CONNECTED" not in out and out.count("blocked") == 2


@pytest.mark.skipif(not HOLDS["private_files"], reason="write confinement needs the unprivileged per-run uid")
def test_child_writes_only_its_repo_and_ownership_is_restored(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    code = f"""
    import os
    open("inside.txt", "w").write("ok")
    for target in ["{outside}/pwned", "/etc/composer-pwned"]:
        try:
            open(target, "w").write("x")
            print("WROTE", target)
        except OSError:  # not there (another mount namespace), read-only, or not ours
            print("denied", target)
    """
    rc, out, _ = py(repo, code)
    assert rc == 0 and "WROTE" not in out and out.count("denied") == 2
    assert not (outside / "pwned").exists() and not os.path.exists("/etc/composer-pwned")
    assert (repo / "inside.txt").read_text() == "ok"
    assert (repo / "inside.txt").stat().st_uid == repo.stat().st_uid == os.geteuid()


# --- pytest outcomes ------------------------------------------------------------------------


RICH = """
    import pytest

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture")

    def test_pass():
        assert 1 + 1 == 2

    def test_fail():
        assert 1 + 1 == 3

    def test_error(broken):
        pass

    @pytest.mark.skip
    def test_skip():
        pass

    @pytest.mark.xfail
    def test_xfail():
        assert False

    @pytest.mark.parametrize("n", [1, 2])
    def test_param(n):
        assert n == 1
"""


def test_run_pytest_reports_each_node_id(repo):
    (repo / "tests").mkdir()
    (repo / "tests" / "test_x.py").write_text(textwrap.dedent(RICH))
    run = sandbox.run_pytest(repo, [])
    assert run.error is None and run.returncode == 1 and not run.timed_out
    assert run.outcomes == {
        "tests/test_x.py::test_pass": True, "tests/test_x.py::test_fail": False,
        "tests/test_x.py::test_error": False, "tests/test_x.py::test_skip": False,
        "tests/test_x.py::test_xfail": True, "tests/test_x.py::test_param[1]": True,
        "tests/test_x.py::test_param[2]": False}
    ids = ["tests/test_x.py::test_pass", "tests/test_x.py::test_missing"]
    run = sandbox.run_pytest(repo, ids)
    assert run.outcomes == {ids[0]: True, ids[1]: False} and "did not run" in run.error


def test_run_pytest_timeout_keeps_finished_outcomes(repo):
    (repo / "test_t.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    while True:\n        pass\n")
    run = sandbox.run_pytest(repo, ["test_t.py::test_a", "test_t.py::test_b"], timeout_s=2)
    assert run.timed_out and run.error.startswith("timed out") and run.duration_s < 5
    assert run.outcomes == {"test_t.py::test_a": True, "test_t.py::test_b": False}


# --- paths and patches ----------------------------------------------------------------------


def test_safe_path(repo, tmp_path):
    (repo / "pkg").mkdir()
    (repo / "escape").symlink_to("/etc")
    (repo / "passwd").symlink_to("/etc/passwd")
    assert sandbox.safe_path(repo, "pkg/a.py") == (repo / "pkg" / "a.py").resolve()
    assert sandbox.safe_path(repo, "pkg/../b.py") == (repo / "b.py").resolve()
    for bad in ["../x", "pkg/../../x", "/etc/passwd", "escape/passwd", "passwd", "~/x", "a\0b"]:
        with pytest.raises(sandbox.SandboxError):
            sandbox.safe_path(repo, bad)


GOOD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
diff --git a/tests/test_calc.py b/tests/test_calc.py
new file mode 100644
--- /dev/null
+++ b/tests/test_calc.py
@@ -0,0 +1,2 @@
+def test_add():
+    assert __import__("calc").add(1, 2) == 3
"""


@pytest.fixture(params=["patch", "git"])
def tool(request, monkeypatch):
    if request.param == "git" and not __import__("shutil").which("git"):
        pytest.skip("git not installed")
    monkeypatch.setattr(sandbox, "_patch_tool", lambda: request.param)
    return request.param


def test_apply_unified_diff_applies_a_good_diff(repo, tool):
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    assert sandbox.apply_unified_diff(repo, GOOD) == ["calc.py", "tests/test_calc.py"]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert sandbox.run_pytest(repo, ["tests/test_calc.py::test_add"]).outcomes == {"tests/test_calc.py::test_add": True}


def test_apply_unified_diff_rejects_bad_diffs_and_changes_nothing(repo, tool):
    original = "def add(a, b):\n    return a * b\n"  # the first hunk does not match
    (repo / "calc.py").write_text(original)
    with pytest.raises(sandbox.PatchError, match="failed"):
        sandbox.apply_unified_diff(repo, GOOD)
    assert (repo / "calc.py").read_text() == original and not (repo / "tests").exists()
    with pytest.raises(sandbox.PatchError):
        sandbox.apply_unified_diff(repo, "this is not a diff\n")
    with pytest.raises(sandbox.PatchError):
        sandbox.apply_unified_diff(repo, "")


@pytest.mark.parametrize("target", ["../outside.txt", "/tmp/composer-outside.txt", "link/outside.txt"])
def test_apply_unified_diff_refuses_paths_outside_the_repo(repo, tmp_path, target):
    (repo / "link").symlink_to(tmp_path)
    diff = f"--- /dev/null\n+++ b/{target}\n@@ -0,0 +1 @@\n+pwned\n"
    with pytest.raises(sandbox.PatchError, match="escapes|absolute"):
        sandbox.apply_unified_diff(repo, diff)
    assert not (tmp_path / "outside.txt").exists() and not os.path.exists("/tmp/composer-outside.txt")


def test_isolation_describes_the_host():
    info = sandbox.isolation()
    assert info["mode"] in ("root-ns", "user-ns", "plain")
    if os.geteuid() == 0 and shutil.which("bwrap") and \
            subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        assert info["mode"] == "root-ns"  # this host can do it: the probe must not silently fall back
        assert info["pytest_runs"].startswith("fork server")  # and cold runs start from the fork server


# --- the warm worker ------------------------------------------------------------------------

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
    w = sandbox.PytestWorker(repo, timeout_s=8)
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
            tick = "import time\\nfor _ in range(200):\\n    open({str(log)!r}, 'a').write('x'); time.sleep(0.05)"
            subprocess.Popen([sys.executable, "-c", tick], start_new_session=True)
            while True:
                pass
    """)
    worker = sandbox.PytestWorker(repo, timeout_s=2)
    run = worker.run(["test_h.py::test_ok", "test_h.py::test_hang"])
    assert run.timed_out and run.error.startswith("timed out") and run.duration_s < 5
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
    # passes only when max_procs stopped it well below the 200 forks it tries; its sleepers die with the run
    "fork bomb": ("import os, time\n    n = 0\n    for _ in range(200):\n        try:\n            pid = os.fork()\n"
                  "        except OSError:\n            break\n        if pid == 0:\n            time.sleep(3)\n"
                  "            os._exit(0)\n        n += 1\n    assert n < 20, n", True,
                  lambda run: not run.timed_out and run.duration_s < 2.5),
}


@needs_ns
@pytest.mark.parametrize("name", [pytest.param(n, marks=capped if n == "fork bomb" else ()) for n in HOSTILE_TESTS])
def test_worker_limits_hold_per_run_and_the_server_survives(repo, name):
    body, passes, check = HOSTILE_TESTS[name]
    write(repo, "test_bad.py", f"def test_bad():\n    {body}\n\ndef test_good():\n    pass\n")
    with sandbox.PytestWorker(repo, timeout_s=8, memory_mb=512, cpu_s=2, max_procs=20) as w:
        run = w.run(["test_bad.py::test_bad"])
        assert check(run), (run.error, run.output[-2000:])
        assert run.outcomes == {"test_bad.py::test_bad": passes} and run.duration_s < 8
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
    assert env["HOME"].startswith("/tmp/run-") if MODE == "root-ns" else "composer-sbx-" in env["HOME"]


@needs_ns
def test_worker_close_and_garbage_collection_leave_no_process(repo):
    write(repo, "test_c.py", "def test_c():\n    open('made_by_child.txt', 'w').write('x')\n")
    w = sandbox.PytestWorker(repo)
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
    with pytest.raises(sandbox.SandboxError, match="closed"):
        w.run(["test_c.py::test_c"])
    w = sandbox.PytestWorker(repo)
    w.run(["test_c.py::test_c"])
    pid = w.pid
    del w
    gc.collect()
    assert not alive(pid)


def test_worker_bad_input(repo, tmp_path):
    with pytest.raises(sandbox.SandboxError, match="not a directory"):
        sandbox.PytestWorker(tmp_path / "missing")
    with pytest.raises(sandbox.SandboxError, match="positive"):
        sandbox.PytestWorker(repo, timeout_s=0)
    with sandbox.PytestWorker(repo) as w:
        for bad in ["tests/test_x.py", [1, 2], None, {"tests/test_x.py": 1}]:
            with pytest.raises(sandbox.SandboxError, match="list of strings"):
                w.run(bad)
        assert w.pid is None  # refused before anything started


def test_worker_falls_back_to_cold_runs_in_plain_mode(repo, monkeypatch):
    monkeypatch.setattr(sandbox, "_mode", lambda: "plain")
    write(repo, "test_p.py", "def test_p():\n    pass\n")
    with sandbox.PytestWorker(repo) as w:
        run = w.run(["test_p.py::test_p"])
        assert run.outcomes == {"test_p.py::test_p": True} and run.error is None
        assert "plain" in w.fallback and w.pid is None and w.starts == 0


@needs_ns
def test_worker_falls_back_to_cold_runs_when_it_cannot_start(repo, monkeypatch):
    monkeypatch.setattr(sandbox, "ZYGOTE", "import sys; print('no pytest here'); sys.exit(3)")
    write(repo, "test_p.py", "def test_p():\n    pass\n")
    with sandbox.PytestWorker(repo) as w:
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


@pytest.mark.skipif(MODE != "root-ns", reason="in user-ns mode a run holds every capability of its user namespace")
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

    write(repo, "test_d.py", "import time\n\ndef test_ok():\n    pass\n\ndef test_slow():\n    time.sleep(3)\n")
    ok = ["test_d.py::test_ok"]
    assert worker.run(ok).error is None
    os.kill(worker.pid, signal.SIGKILL)  # dies between runs
    worker._state.server.proc.wait()
    assert worker.run(ok).outcomes == {ok[0]: True} and worker.starts == 2

    threading.Timer(0.5, os.kill, (worker.pid, signal.SIGKILL)).start()  # dies during a run
    run = worker.run(["test_d.py::test_slow"])
    assert not run.timed_out and "worker died" in run.output and run.error and run.duration_s < 2.5
    assert worker.run(ok).outcomes == {ok[0]: True} and worker.starts == 3

    real = sandbox._Server.reply
    calls = []

    def interrupted(self, out, deadline):  # the host is interrupted while a run is under way
        if not calls:
            calls.append(1)
            raise KeyboardInterrupt
        return real(self, out, deadline)

    monkeypatch.setattr(sandbox._Server, "reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        worker.run(["test_d.py::test_slow"])
    assert worker.pid is None  # its late reply can not be taken for the next run's
    assert worker.run(ok).outcomes == {ok[0]: True} and worker.starts == 4


@pytest.mark.parametrize("setter", ["prlimit", "preexec_fn"])
def test_rlimits_are_the_same_whichever_sets_them(repo, monkeypatch, setter):
    if setter == "preexec_fn":
        monkeypatch.setattr(sandbox, "_prlimit", lambda: None)
    elif not sandbox._prlimit():
        pytest.skip("no util-linux prlimit here")
    code = """
    import resource
    print([resource.getrlimit(getattr(resource, "RLIMIT_" + n)) for n in ["AS", "CPU", "FSIZE", "NPROC", "CORE"]])
    """
    rc, out, _ = py(repo, code, memory_mb=300, cpu_s=3, max_procs=7)
    limits = eval(out.strip().splitlines()[-1])
    assert rc == 0 and limits[0] == (300 * 2**20,) * 2 and limits[1] == (3, 3) and limits[4] == (0, 0)
    assert limits[2] == (sandbox.FILE_LIMIT_MB * 2**20,) * 2
    if MODE == "root-ns":
        assert limits[3] == (7, 7)


@needs_ns
def test_worker_goes_cold_when_it_preloaded_a_module_from_the_repo(repo, worker, monkeypatch):
    # As with a repo installed in editable mode (src layout): the server's pytest would be the repo's own, stale.
    write(repo, "src/mylib.py", "X = 1\n")
    write(repo, "code/notes.txt", "a folder without __init__.py shadows nothing\n")
    write(repo, "test_m.py", "def test_m():\n    pass\n")
    monkeypatch.setattr(sandbox, "ZYGOTE", sandbox.ZYGOTE.replace(
        "gc.freeze()", "sys.path.append(os.path.join(os.getcwd(), 'src')); import mylib\ngc.freeze()", 1))
    assert worker.run(["test_m.py::test_m"]).outcomes == {"test_m.py::test_m": True}
    assert worker.fallback.endswith("preloaded modules that the repo has: mylib") and worker.pid is None
