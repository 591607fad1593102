"""Tests for composer.env.containment.sandbox: limits really hold on this host, containment is what each mode says it
is.

Every hostile child below is bounded by the test itself (fork at most 200 times, print
100 MB, ...), so a containment failure shows up as a failed assertion, never as harm to the host.
"""

import os
import resource
import socket
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from composer import paths
from composer.env.containment import sandbox
from composer.env.containment.limits import FILE_LIMIT_MB
from composer.env.containment.patches import SandboxError

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


# A hang guard: a run cut at its own short timeout (1.5-2 s) returns within seconds even on a loaded machine, and one
# that waited for what it left running (600 s) would be far above it. Which timeout cut a run its error says.
LATE_S = 120


def py(repo, code, **kw):
    return sandbox.run_python(repo, ["-c", textwrap.dedent(code)], **kw)


# --- limits ---------------------------------------------------------------------------------


def test_infinite_loop_times_out_and_the_whole_tree_dies(repo):
    # Two grandchildren append to files for 600 s (bounded, should containment fail), one of them in
    # its own session: killpg misses it, only a PID namespace (or nothing, in "plain" mode) stops it.
    code = """
    import subprocess, sys
    tick = "import time\\nfor _ in range(12000):\\n    open(sys.argv[1], 'a').write('x'); time.sleep(0.05)"
    subprocess.Popen([sys.executable, "-c", "import sys\\n" + tick, "same_group.log"])
    subprocess.Popen([sys.executable, "-c", "import sys\\n" + tick, "own_session.log"], start_new_session=True)
    print("started", flush=True)
    while True:
        pass
    """
    start = time.monotonic()
    rc, out, timed_out = py(repo, code, timeout_s=1.5)
    assert timed_out and rc < 0 and "started" in out and "timeout" in out
    # a hang guard: cut at its own 1.5 s, the run returns in seconds, even loaded; waiting on the grandchildren's
    # 600 s it would not
    assert time.monotonic() - start < LATE_S
    logs = [repo / "same_group.log"] + ([repo / "own_session.log"] if NAMESPACED else [])
    sizes = [p.stat().st_size for p in logs]
    assert all(s > 0 for s in sizes)  # they did run
    time.sleep(0.4)
    assert [p.stat().st_size for p in logs] == sizes  # and nothing writes any more


@capped
def test_fork_bomb_is_capped_by_max_procs(repo):
    # the test's own cap: 200 children; namespaced, they sleep for longer than the run's timeout
    code = "import os, time\n" + forks(200, 120 if NAMESPACED else 3) + 'print("forked", n)\n'
    rc, out, timed_out = py(repo, code, timeout_s=30, max_procs=20)
    forked = int(out.split("forked")[1].split()[0])
    assert forked < 20  # stopped by the cap, far below the 200 the child tried
    if NAMESPACED:  # the PID namespace dies with its init: the sleepers do not hold the run until its timeout
        assert not timed_out and rc == 0, out[-2000:]


def forks(count: int, sleep_s: float) -> str:
    """Child code that forks up to `count` children sleeping `sleep_s` each (bounded), counting them in n."""
    return (f"n = 0\nfor _ in range({count}):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            f"    if pid == 0:\n        time.sleep({sleep_s})\n        os._exit(0)\n    n += 1\n")


PROBE_GUARANTEES = """
import os, socket, sys, time
report = {"pid_namespace": os.getpid() == 1, "own_uid": os.getuid() not in (0, int(sys.argv[3]))}
try:  # a file the caller can read (grading's probes in its cache), then one it may write
    open(os.path.join(os.path.dirname(sys.argv[1]), "secret")).read()
    report["private_files"] = False
except OSError:
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
    (outside / "secret").write_text("the expected values")
    os.chmod(outside / "secret", 0o644)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    tried = []
    try:
        for mode in ("root-ns", "user-ns", "pid-ns", "plain"):
            repo = tmp_path / mode
            repo.mkdir()
            with sandbox.forced_mode(mode):
                try:
                    if sandbox.run_python(repo, ["-c", "pass"])[0] != 0:
                        continue  # this host cannot run it (no bubblewrap, no user namespaces)
                except SandboxError as refused:  # root-ns without root
                    assert mode == "root-ns" and os.geteuid() != 0 and "needs root" in str(refused)
                    continue
                rc, out, _ = sandbox.run_python(repo, ["-c", PROBE_GUARANTEES, str(outside / mode),
                                                       str(server.getsockname()[1]), str(os.geteuid())],
                                                timeout_s=15, max_procs=10)
            seen = ast.literal_eval(out.split("REPORT", 1)[1].strip())
            assert seen == sandbox.guarantees(mode), (mode, out)
            tried.append(mode)
    finally:
        server.close()
    assert "plain" in tried and MODE in tried


def runs_here(mode: str, tmp_path) -> bool:
    """Whether this host can run `mode` (root-ns: root and bubblewrap; user-ns: user namespaces)."""
    (tmp_path / mode).mkdir()
    with sandbox.forced_mode(mode):
        try:
            return sandbox.run_python(tmp_path / mode, ["-c", "pass"])[0] == 0
        except SandboxError:  # root-ns without root
            return False


@pytest.mark.parametrize("mode", sandbox.OWN_ROOT_MODES)
def test_grading_s_files_are_not_in_a_grading_run_s_filesystem(mode, tmp_path):
    """Where grading's files live (the composer cache: the probes' expected values and the task
    records; the checkout: the task generator and its gold library; the caller's temporary folders) is not there for
    a grading run of a mode with a filesystem of its own; in "user-ns" it was, with the caller's every right."""
    if not runs_here(mode, tmp_path):
        pytest.skip(f"this host cannot run the {mode!r} mode")
    cache = Path(os.environ.get("COMPOSER_CACHE", paths.CACHE))
    cache.mkdir(parents=True, exist_ok=True)
    (tmp_path / "grading.json").write_text("{}")
    wanted = [str(cache), str(paths.ROOT / "composer"), str(tmp_path / "grading.json"), sandbox.__file__]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_look.py").write_text("import os\n\ndef test_look(record_property):\n"
                                       f"    record_property('seen', [p for p in {wanted!r} if os.path.exists(p)])\n")
    with sandbox.forced_mode(mode):
        run = sandbox.run_pytest(repo, ["test_look.py::test_look"], grading=True)
    assert run.error is None and run.properties == {"test_look.py::test_look": {"seen": []}}, run.output


def test_a_grading_run_is_refused_where_runs_read_the_caller_s_files_unless_a_smoke_run_opts_in(repo, monkeypatch):
    monkeypatch.delenv(sandbox.UNCONTAINED_GRADING, raising=False)
    (repo / "test_a.py").write_text("def test_a():\n    pass\n")
    with sandbox.forced_mode("plain"):
        with pytest.raises(SandboxError, match='"plain" containment mode.*Missing: .*"root-ns".*user namespaces'):
            sandbox.run_pytest(repo, [], grading=True)
        assert sandbox.isolation()["grading"].startswith('refusing to grade a reward in the "plain"')
        assert sandbox.run_pytest(repo, []).outcomes == {"test_a.py::test_a": True}  # an agent's runs grade nothing
        assert sandbox.run_pytest(repo, [], grading=True, uncontained_ok=True).outcomes == {"test_a.py::test_a": True}
        monkeypatch.setenv(sandbox.UNCONTAINED_GRADING, "1")
        assert sandbox.run_pytest(repo, [], grading=True).outcomes == {"test_a.py::test_a": True}
        assert sandbox.isolation()["grading"].startswith('UNCONTAINED ("plain" mode, opted in by '
                                                         f"{sandbox.UNCONTAINED_GRADING}=1)")


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
    rc, out, timed_out = py(repo, "x = bytearray(4 * 1024 ** 3)\nprint('allocated')", memory_mb=512, timeout_s=60)
    assert rc != 0 and not timed_out and "MemoryError" in out and "allocated" not in out  # refused, not timed out


def test_cpu_limit_kills_a_busy_child_before_the_wall_clock(repo):
    rc, out, timed_out = py(repo, "while True:\n    pass", cpu_s=1, timeout_s=60)
    assert rc != 0 and not timed_out  # killed by its CPU limit; a loaded machine only moves the wall-clock one


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
    assert env["HOME"] == "/tmp" if HOLDS["private_files"] else "composer-sbx-" in env["HOME"]  # the private /tmp


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
    assert run.timed_out and run.error == "timed out after 2s"  # cut at its own timeout, not the 20 s default
    assert run.outcomes == {"test_t.py::test_a": True, "test_t.py::test_b": False}


def test_isolation_describes_the_host():
    info = sandbox.isolation()
    assert info["mode"] in ("root-ns", "user-ns", "plain")
    if os.geteuid() == 0 and shutil.which("bwrap") and \
            subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        assert info["mode"] == "root-ns"  # this host can do it: the probe must not silently fall back
        assert info["pytest_runs"].startswith("fork server")  # and cold runs start from the fork server


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
    assert limits[2] == (FILE_LIMIT_MB * 2**20,) * 2
    if MODE == "root-ns":
        assert limits[3] == (7, 7)


