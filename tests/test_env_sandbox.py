"""Tests for composer.env.sandbox: limits really hold on this host, paths and patches stay confined.

Every hostile child below is bounded by the test itself (fork at most 200 times, print
100 MB, ...), so a containment failure shows up as a failed assertion, never as harm to the host.
"""

import os
import resource
import socket
import subprocess
import textwrap
import time

import pytest

from composer.env import sandbox

MODE = sandbox.isolation()["mode"]
NAMESPACED = MODE in ("root-ns", "user-ns")


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


@pytest.mark.skipif(MODE == "plain" and os.geteuid() == 0, reason="as root without namespaces RLIMIT_NPROC is ignored")
def test_fork_bomb_is_capped_by_max_procs(repo):
    code = """
    import os, time
    n = 0
    for _ in range(200):  # the test's own cap: never more than 200 sleeping children
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
    print("forked", n)
    """
    start = time.monotonic()
    rc, out, timed_out = py(repo, code, timeout_s=8, max_procs=20)
    forked = int(out.split("forked")[1].split()[0])
    assert forked < 20  # stopped by the cap, far below the 200 the child tried
    if NAMESPACED:  # the PID namespace dies with its init: the sleepers do not outlive the run
        assert time.monotonic() - start < 2.5


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
    assert "composer-sbx-" in env["HOME"]


@pytest.mark.skipif(not NAMESPACED, reason="network isolation needs a network namespace")
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


@pytest.mark.skipif(MODE != "root-ns", reason="write confinement needs the unprivileged per-run uid")
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
        except PermissionError:
            print("denied", target)
    """
    rc, out, _ = py(repo, code)
    assert rc == 0 and "WROTE" not in out and out.count("denied") == 2
    assert not (outside / "pwned").exists() and not os.path.exists("/etc/composer-pwned")
    assert (repo / "inside.txt").read_text() == "ok"
    assert (repo / "inside.txt").stat().st_uid == repo.stat().st_uid == os.geteuid()


# --- pytest outcomes ------------------------------------------------------------------------


def test_run_pytest_reports_each_node_id(repo):
    (repo / "tests").mkdir()
    (repo / "tests" / "test_x.py").write_text(textwrap.dedent("""
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
    """))
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
    if os.geteuid() == 0 and subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        assert info["mode"] == "root-ns"  # this host can do it: the probe must not silently fall back
