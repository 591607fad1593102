"""Run untrusted Python (an agent's edits, a task's tests) in a bounded subprocess.

    from composer.env import sandbox

    run = sandbox.run_pytest(repo, ["tests/test_ops.py::test_mean_1"], timeout_s=20)
    run.outcomes                    # {"tests/test_ops.py::test_mean_1": False}
    with sandbox.PytestWorker(repo, timeout_s=20) as worker:   # a warm pytest for one episode's runs
        run = worker.run(["tests/test_ops.py::test_mean_1"])   # the same TestRun, ~3x cheaper
    rc, out, timed_out = sandbox.run_python(repo, ["-c", "print(1)"])
    sandbox.apply_unified_diff(repo, diff)   # -> ["calc/ops.py"]; PatchError if it does not apply
    sandbox.safe_path(repo, "calc/ops.py")   # SandboxError for ../x, /etc/passwd, escaping symlinks
    sandbox.isolation()                      # what this host enforces (goes into reports)

The child runs in `repo_dir` itself (the caller's per-episode copy: whatever it writes there
stays) with a scrubbed environment (`scrubbed_env`: PATH, LANG, HOME and TMPDIR in a fresh
temporary folder, no variable of the parent, so no API key). Always, on every OS with
`resource`: RLIMIT_AS (`memory_mb`), RLIMIT_CPU (`cpu_s`, default timeout+1), RLIMIT_FSIZE
(64 MiB per file), RLIMIT_CORE=0 (set by util-linux `prlimit` where it exists, else in a
preexec_fn); a wall-clock timeout that SIGKILLs the child's process
group (`start_new_session` + `killpg`); output read incrementally and cut to `max_output`
bytes (head and tail kept), so a flood cannot fill the parent's memory. What else depends
on the host, and `isolation()["mode"]` says which applies:

- "root-ns" (Linux, root, util-linux `unshare` and `setpriv`; this is the dev VM): the
  child gets new PID, network and mount namespaces (`unshare --net --pid --fork
  --kill-child --mount-proc`): no network (only a down loopback), and the whole tree dies
  with it even when a grandchild calls setsid() and leaves the process group. It runs as
  a fresh unprivileged uid per run (RLIMIT_NPROC is ignored for uid 0, so dropping root
  is what makes the `max_procs` cap stop fork bombs; a per-run uid keeps concurrent runs
  from sharing that count), with no capability except CAP_DAC_READ_SEARCH: the
  interpreter and the caller's repo may sit under private folders such as /root, so the
  child can READ every file (e.g. /etc/shadow) but WRITE only to `repo_dir` (handed to
  that uid for the run, given back after) and world-writable folders (/tmp, /dev/shm).
  So run one sandbox per repo_dir at a time: a second run would take the folder over.
- "user-ns" (Linux, not root, unprivileged user namespaces allowed): the same
  namespaces via `unshare --user --map-root-user`; the uid is the caller's, so
  RLIMIT_NPROC is set to the caller's current process count plus `max_procs` (a bound,
  shared with the caller's other processes) and the child can write whatever the caller can.
- "plain" (anything else: macOS, no util-linux, namespaces forbidden): rlimits and the
  process-group kill only. No network isolation; a child that calls setsid() survives
  the timeout kill; as root RLIMIT_NPROC is not enforced at all.

Filesystem isolation beyond the per-episode copy is not enforced in any mode: path
confinement (`safe_path`, `apply_unified_diff`) is for the tools that edit files on the
agent's behalf; code that the child runs sees the host filesystem with the rights above.
Per-test outcomes come from a ten-line pytest plugin loaded with `-p` that logs each
report's exact node id and phase, so they are pytest's own verdicts (xfail counts as a
pass and skip as a failure, as in SWE-bench's log parsers). The child can forge them like
it can forge any log: untrusted code owns its own process.

`PytestWorker` is the warm path for an agent's repeated test runs on one copy: a server started
once inside the same sandbox (pid 1 of its PID namespace, pytest imported) forks one child per run,
and kills every other process of its namespace after each; a run past the timeout takes the whole
server down and the next run starts a new one. It needs a PID namespace ("root-ns" or "user-ns");
in "plain" mode, or when the server cannot start, it falls back to cold run_pytest (see its
docstring). Grading runs on a fresh copy, cold or through `worker.run(ids, repo=copy)` (see
composer.env.swebench).
"""

import contextlib
import functools
import itertools
import json
import os
import re
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

FILE_LIMIT_MB = 64
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Per-run uids live far above any real account; pid and a counter keep concurrent runs apart.
UID_BASE = 1_500_000_000
_uid_counter = itertools.count()

PLUGIN_NAME = "_composer_sandbox_plugin"
PLUGIN = """import json, os

def pytest_collection_modifyitems(config, items):
    wanted = os.environ.get("COMPOSER_SANDBOX_SELECT")
    if wanted:
        wanted = set(json.loads(wanted))
        keep = [i for i in items if i.nodeid in wanted or i.nodeid.split("::")[0] in wanted]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep

def pytest_runtest_logreport(report):
    row = [report.nodeid, report.when, report.outcome, hasattr(report, "wasxfail")]
    with open(os.environ["COMPOSER_SANDBOX_REPORT"], "a") as f:
        f.write(json.dumps(row) + "\\n")
"""

class SandboxError(Exception):
    """A path or an input that the sandbox refuses (escapes the repo, malformed)."""


class PatchError(SandboxError):
    """A diff that does not apply; the message carries the patch tool's output."""


@dataclass
class TestRun:
    __test__ = False  # not a pytest test class despite the name
    outcomes: dict[str, bool]
    output: str
    timed_out: bool
    returncode: int
    duration_s: float
    error: str | None


def scrubbed_env(home: str | Path | None = None) -> dict:
    """The only variables a child sees: nothing inherited from the parent."""
    home = str(home or tempfile.gettempdir())
    return {
        "PATH": f"{Path(sys.executable).parent}:{SAFE_PATH}",
        "LANG": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",  # a child killed at the timeout still shows what it printed
    }


# --- isolation mode ------------------------------------------------------------------------


def _ns_prefix(mode: str, uid: int | None) -> list[str]:
    ns = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if mode == "user-ns":
        return ["unshare", "--user", "--map-root-user", *ns, "--"]
    if mode == "root-ns":
        caps = "dac_read_search"
        return ["unshare", *ns, "--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                f"--inh-caps=-all,+{caps}", f"--ambient-caps=+{caps}", f"--bounding-set=-all,+{caps}",
                "--no-new-privs", "--pdeathsig=SIGKILL", "--"]  # setuid clears unshare's pdeathsig
    return []


@functools.cache
def _mode() -> str:
    """The strongest mode whose probe (start the interpreter inside it) succeeds here."""
    if sys.platform != "linux" or not shutil.which("unshare"):
        return "plain"
    candidates = ["root-ns"] if os.geteuid() == 0 and shutil.which("setpriv") else []
    candidates.append("user-ns")
    for mode in candidates:
        argv = [*_ns_prefix(mode, UID_BASE - 1), sys.executable, "-c", "import os; os.getpid()"]
        try:
            probe = subprocess.run(argv, cwd="/", env=scrubbed_env(), capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return mode
    return "plain"


@functools.cache
def _prlimit() -> str | None:
    return shutil.which("prlimit") if sys.platform == "linux" else None


def isolation() -> dict:
    """What is enforced on this host, in words fit for a report's provenance block."""
    mode = _mode()
    return {
        "mode": mode,
        "network": "none (own network namespace)" if mode != "plain" else "not isolated",
        "processes": {"root-ns": "own PID namespace, per-run uid, RLIMIT_NPROC=max_procs",
                      "user-ns": "own PID namespace, RLIMIT_NPROC=current+max_procs",
                      "plain": "process group kill" + ("; RLIMIT_NPROC not enforced (root)" if os.geteuid() == 0
                                                       else "; RLIMIT_NPROC=current+max_procs")}[mode],
        "filesystem": {"root-ns": "reads anything; writes repo_dir and world-writable dirs only",
                       "user-ns": "the caller's rights", "plain": "the caller's rights"}[mode],
        "rlimits": ["AS", "CPU", "FSIZE", "NPROC", "CORE"],
        "environment": sorted(scrubbed_env()),
    }


# --- running -------------------------------------------------------------------------------


def _own_process_count() -> int:
    uid = os.getuid()
    return sum(1 for p in Path("/proc").glob("[0-9]*") if _owner(p) == uid)


def _owner(p: Path) -> int | None:
    try:
        return p.stat().st_uid
    except OSError:
        return None


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    # lchown and no symlink following: a link to /etc/passwd must not hand /etc/passwd over. Files
    # with other hard links are skipped for the same reason (the link could point at a host file).
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if name in filenames and st.st_nlink > 1 and not os.path.islink(p):
                continue
            os.lchown(p, uid, gid)


class _Session:
    """One sandboxed run's scratch folder (HOME, TMPDIR, reports) and, as root, its uid."""

    def __init__(self, repo_dir: Path):
        self.repo = Path(repo_dir).resolve()
        if not self.repo.is_dir():
            raise SandboxError(f"not a directory: {repo_dir}")
        self.mode = _mode()
        self.uid = UID_BASE + (os.getpid() % 100_000) * 1000 + next(_uid_counter) % 1000 \
            if self.mode == "root-ns" else None

    def __enter__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="composer-sbx-"))
        (self.dir / "home").mkdir()
        if self.uid is not None:
            st = self.repo.stat()
            self.owner = (st.st_uid, st.st_gid)
            _chown_tree(self.dir, self.uid, self.uid)
            _chown_tree(self.repo, self.uid, self.uid)
        return self

    def __exit__(self, *exc):
        try:
            if self.uid is not None:
                _chown_tree(self.repo, *self.owner)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def command(self, args: list[str], *, timeout_s: float, memory_mb: int, cpu_s: int | None,
                max_procs: int) -> tuple[list[str], object]:
        """(argv, preexec_fn) for `python *args` in this sandbox under the rlimits. util-linux prlimit sets
        them where it exists (preexec_fn is then None): a preexec_fn makes subprocess fork() the whole
        caller instead of vfork(), ~30 ms per run from a process with transformers loaded."""
        nproc = max_procs if self.mode == "root-ns" else _own_process_count() + max_procs
        limits = [(resource.RLIMIT_AS, "as", memory_mb * 2**20),
                  (resource.RLIMIT_CPU, "cpu", cpu_s or int(timeout_s) + 1),
                  (resource.RLIMIT_FSIZE, "fsize", FILE_LIMIT_MB * 2**20),
                  (resource.RLIMIT_NPROC, "nproc", nproc),
                  (resource.RLIMIT_CORE, "core", 0)]
        argv = [*_ns_prefix(self.mode, self.uid), sys.executable, *args]
        if _prlimit():
            return [_prlimit(), *(f"--{name}={value}" for _, name, value in limits), "--", *argv], None

        def set_limits():  # runs in the forked child before exec: only pre-imported, lock-free calls
            for which, _, value in limits:
                resource.setrlimit(which, (value, value))

        return argv, set_limits

    def plugin_env(self) -> dict:
        """The variables that load the outcome plugin, written into this session's folder."""
        plugin_dir = self.dir / "plugin"
        if not plugin_dir.exists():
            plugin_dir.mkdir()
            (plugin_dir / f"{PLUGIN_NAME}.py").write_text(PLUGIN)
        # Plugin autoload is off: the host venv's plugins are not the repo's, and loading them costs 0.3 s a run.
        return {"PYTHONPATH": str(plugin_dir), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def hand_over(self, path: Path) -> None:
        """Give `path` (a tree) to the run's uid: files the host wrote since the last run included."""
        if self.uid is not None:
            _chown_tree(path, self.uid, self.uid)

    def run(self, args: list[str], *, timeout_s: float, memory_mb: int, cpu_s: int | None, max_output: int,
            max_procs: int, extra_env: dict | None = None) -> tuple[int, str, bool]:
        env = scrubbed_env(self.dir / "home")
        env.update(extra_env or {})
        argv, preexec = self.command(args, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s, max_procs=max_procs)
        return _run(argv, self.repo, env, preexec, timeout_s, max_output)


class _Output:
    """A child's output, read incrementally and cut to `max_output` bytes (head and tail kept)."""

    def __init__(self, max_output: int):
        self.half = max_output // 2
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        self.head += chunk[:max(room, 0)]
        self.tail += chunk[max(room, 0):]
        if len(self.tail) > self.half:
            del self.tail[:len(self.tail) - self.half]  # keep only the last `half` bytes

    def text(self, timed_out: bool, timeout_s: float, note: str = "") -> str:
        out = bytes(self.head)
        if self.total > len(self.head) + len(self.tail):
            out += f"\n... [{self.total - len(self.head) - len(self.tail)} bytes of output cut] ...\n".encode()
        out += bytes(self.tail)
        if timed_out:
            out += f"\n[sandbox: killed after {timeout_s:g}s wall-clock timeout]\n".encode()
        return out.decode("utf-8", "replace") + note


def _run(argv, cwd, env, preexec, timeout_s, max_output) -> tuple[int, str, bool]:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec)
    deadline = time.monotonic() + timeout_s
    out, timed_out = _Output(max_output), False
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(left):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            out.add(chunk)
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:  # closed its output but kept running
        timed_out = True
    _kill_group(proc.pid)  # also reaps stragglers a finished child left in its group
    proc.wait()
    proc.stdout.close()
    return proc.returncode, out.text(timed_out, timeout_s), timed_out


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_python(repo_dir: Path, args: list[str], *, timeout_s: float = 20.0, memory_mb: int = 1024,
               cpu_s: int | None = None, max_output: int = 20_000, max_procs: int = 64,
               extra_env: dict | None = None) -> tuple[int, str, bool]:
    """`python *args` in repo_dir under the limits above; (returncode, output, timed_out).

    returncode is negative (-signal) when the child was killed."""
    with _Session(repo_dir) as s:
        return s.run(args, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s, max_output=max_output,
                     max_procs=max_procs, extra_env=extra_env)


def run_pytest(repo_dir: Path, test_ids: list[str], *, timeout_s: float = 20.0, memory_mb: int = 1024,
               cpu_s: int | None = None, max_output: int = 20_000, max_procs: int = 64) -> TestRun:
    """Run pytest once on `test_ids` (all collected tests when empty); outcome per node id.

    pytest gets the ids' files and the plugin keeps just the ids, so one missing id does not
    abort the run (pytest alone would exit 4 and run nothing). A file id ("tests/test_x.py")
    passes when all its tests do. A requested id that never ran (not collected, timeout,
    crash) maps to False and `error` says why; error is None only when pytest finished
    normally and every requested id ran."""
    with _Session(repo_dir) as s:
        env = s.plugin_env()
        return _pytest_once(s.repo, test_ids, timeout_s, s.dir / "home" / "report.jsonl", lambda args, extra: s.run(
            ["-m", "pytest", *args], timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s, max_output=max_output,
            max_procs=max_procs, extra_env={**env, **extra}))


def _pytest_once(repo: Path, test_ids: list[str], timeout_s: float, report: Path, runner) -> TestRun:
    """One pytest run through `runner(pytest_args, env) -> (rc, output, timed_out)`, cold or warm alike:
    the same arguments, the same plugin, the same outcome rules."""
    start = time.monotonic()
    files = [f for f in dict.fromkeys(t.split("::")[0] for t in test_ids) if _exists_inside(repo, f)]
    env = {"COMPOSER_SANDBOX_REPORT": str(report)}
    if test_ids:
        env["COMPOSER_SANDBOX_SELECT"] = json.dumps(test_ids)
    args = ["-p", "no:cacheprovider", "-p", PLUGIN_NAME, "-q", "-rfE", "--tb=short", "--color=no",
            f"--rootdir={repo}", *files]
    if test_ids and not files:
        rc, output, timed_out = 5, "none of the requested test files exist\n", False
    else:
        rc, output, timed_out = runner(args, env)
    return _test_run(test_ids, _read_report(report), rc, output, timed_out, timeout_s, start)


def _test_run(test_ids, observed, rc, output, timed_out, timeout_s, start) -> TestRun:
    outcomes = {t: _outcome(observed, t) for t in test_ids} if test_ids else observed
    missing = [t for t, ok in outcomes.items() if ok is None]
    outcomes = {t: bool(ok) for t, ok in outcomes.items()}
    error = None
    if timed_out:
        error = f"timed out after {timeout_s:g}s"
    elif rc not in (0, 1) and not (rc == 5 and missing):
        error = f"pytest exited with {rc} ({_PYTEST_EXIT.get(rc, 'killed or crashed')})"
    if error is None and missing:
        error = f"{len(missing)} requested test(s) did not run: {', '.join(missing[:5])}"
    return TestRun(outcomes, output, timed_out, rc, time.monotonic() - start, error)


def _exists_inside(repo: Path, rel: str) -> bool:
    try:
        return safe_path(repo, rel).exists()
    except SandboxError:
        return False


def _outcome(observed: dict[str, bool], test_id: str) -> bool | None:
    """True/False for a node id or a file id that ran, None when nothing of it ran."""
    if test_id in observed:
        return observed[test_id]
    inside = [ok for n, ok in observed.items() if n.startswith(test_id + "::")] if "::" not in test_id else []
    return all(inside) if inside else None


_PYTEST_EXIT = {2: "interrupted or collection errors", 3: "internal error", 4: "usage error",
                5: "no tests collected"}


def _read_report(path: Path, limit: int = 8 << 20) -> dict[str, bool]:
    """Per node id: passed iff no phase failed and the call passed (or was an expected failure)."""
    try:  # the child owns this folder: refuse a symlink or a FIFO planted in place of the report
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        lines = f.read(limit).decode("utf-8", "replace").splitlines()
    failed, called = set(), {}
    for line in lines:
        try:
            nodeid, when, outcome, xfail = json.loads(line)
        except (ValueError, TypeError):
            continue
        called.setdefault(nodeid, False)
        if outcome == "failed" or (when == "setup" and outcome == "skipped"):
            failed.add(nodeid)
        if when == "call":
            called[nodeid] = outcome == "passed" or (outcome == "skipped" and xfail)
    return {n: ok and n not in failed for n, ok in called.items()}


# --- the warm worker -----------------------------------------------------------------------

# The worker's server: init (pid 1) of its own PID namespace, inside the same sandbox as a cold run. It
# imports pytest once, then per request forks a child that runs pytest.main in the repo and exits. The child
# starts from a process that never imported a module of the repo, so the task's code is imported fresh
# every run (and no .pyc is ever written: PYTHONDONTWRITEBYTECODE). After each child, SIGKILL to -1 (from
# a namespace's init: every other process of the namespace) and reaping leave nothing running between runs.
ZYGOTE = r"""
import ctypes, gc, importlib, json, os, random, signal, sys, tempfile, time, traceback
PR_SET_DUMPABLE = 4
prctl = ctypes.CDLL(None, use_errno=True).prctl
# Not dumpable: a run (same uid) can then neither ptrace this process nor read its /proc/1/mem or fds, so
# it cannot take over the server that kills it; it cannot signal it either (init of its namespace).
if prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
    sys.exit("cannot make the server undumpable")
del sys.path[0]  # the repo: preload only the host's pytest, never a module of the repo
import pytest
from _pytest.config import default_plugins
# What pytest.main would otherwise import on every run: once here instead.
for name in [*("_pytest." + p for p in default_plugins), "_pytest._argcomplete", "faulthandler", "pdb", "tomllib"]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
replies = os.fdopen(int(sys.argv[1]), "w")


def reap_all():
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.001)  # a child is still dying (or was forked during the kill): kill again


def child(request):
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a cold run is
    os.close(replies.fileno())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.environ.update(request["env"])
    if request["cwd"] != os.getcwd():  # another copy than the worker's repo (a fresh one to grade on)
        os.chdir(request["cwd"])  # by path: its folders must let this uid through (the server's own cwd need not)
    tempfile.tempdir = None  # per-process caches that would carry the server's state into the run
    random.seed()
    importlib.invalidate_caches()
    sys.path.insert(0, os.getcwd())  # what `python -m pytest` puts first
    sys.argv = [pytest.__file__, *request["args"]]
    try:
        rc = int(pytest.main(request["args"]))
    except BaseException:
        traceback.print_exc()
        rc = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


gc.freeze()  # the preloaded heap: out of every child's gc.collect (pytest runs it at exit) and its copy-on-write
here = os.path.realpath(os.getcwd()) + os.sep
inside = [n for n, m in list(sys.modules.items()) if os.path.realpath(getattr(m, "__file__", None) or "/").startswith(here)]
replies.write(json.dumps({"ready": sorted({m.split(".")[0] for m in sys.modules}), "inside": sorted(inside)}) + "\n")
replies.flush()
while line := sys.stdin.readline():
    pid = os.fork()
    if pid == 0:
        child(json.loads(line))
    status = os.waitpid(pid, 0)[1]
    reap_all()
    replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""


class _WorkerDied(Exception):
    """The server did not start, or died between runs."""


class _Server:
    """The running server process of a PytestWorker, and the session (scratch folder, uid) it runs in."""

    def __init__(self, session: "_Session", limits: dict, start_timeout_s: float):
        self.session = session
        env = {**scrubbed_env(session.dir / "home"), **session.plugin_env()}
        read, write = os.pipe()
        argv, preexec = session.command(["-c", ZYGOTE, str(write)], **limits)
        try:
            self.proc = subprocess.Popen(
                argv, cwd=session.repo, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(write,), preexec_fn=preexec)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        self.replies, self.pending, self.init = read, b"", None
        out = _Output(4000)
        ready = self.reply(out, time.monotonic() + start_timeout_s)
        if ready is None or "ready" not in ready:
            self.close()
            raise _WorkerDied(f"the pytest worker did not start: {out.text(False, 0).strip()[-2000:]!r}")
        self.preloaded = frozenset(ready["ready"])
        self.inside = list(ready.get("inside", []))  # preloaded from the repo itself (e.g. an editable install)
        self.init = _child_pidfd(self.proc.pid)  # the server itself, under unshare: what close() kills first

    def alive(self) -> bool:
        return self.proc.poll() is None

    def reply(self, out: _Output, deadline: float) -> dict | None:
        """The next reply line, while collecting the output into `out`; None at the deadline or when it died."""
        fds = {self.proc.stdout.fileno(): "out", self.replies: "reply"}
        with selectors.DefaultSelector() as sel:
            for fd in fds:
                sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if fds[key.fd] == "out" and chunk:
                        out.add(chunk)
                    elif fds[key.fd] == "reply":
                        if not chunk:
                            return None
                        self.pending += chunk
                    else:
                        sel.unregister(key.fd)
            self._drain(out)  # the child has exited: what it wrote is all in the pipe by now
        line, self.pending = self.pending.split(b"\n", 1)
        try:
            return dict(json.loads(line))
        except (ValueError, TypeError):  # not what the server writes: treat it as dead
            return None

    def _drain(self, out: _Output) -> None:
        fd = self.proc.stdout.fileno()
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, 1 << 16):
                out.add(chunk)
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(fd, True)

    def request(self, args: list[str], env: dict, cwd: Path) -> None:
        try:
            self.proc.stdin.write((json.dumps({"args": args, "env": env, "cwd": str(cwd)}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:  # BrokenPipeError: it died since the last run
            raise _WorkerDied(str(e)) from None

    def close(self) -> None:
        """Kill it and wait until its PID namespace is empty; close the pipes; the session stays open."""
        # The server first: unshare reaps it and exits, and a namespace's init is reapable only once every
        # other process of the namespace is gone, so unshare's exit means nothing of the run is left.
        # (Killing unshare first would leave the dying server to the host's init, gone "soon".)
        if self.init is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.init, signal.SIGKILL)
            os.close(self.init)
            self.init = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        _kill_group(self.proc.pid)
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            os.close(self.replies)


def _child_pidfd(pid: int) -> int | None:
    """A pidfd (immune to pid reuse) of the only child of `pid`, None when that cannot be had."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return os.pidfd_open(int(children[0])) if len(children) == 1 else None
    except (OSError, ValueError, AttributeError):  # no such file, gone, or no pidfd_open on this OS
        return None


class _WorkerState:
    """What a PytestWorker holds outside itself, so a finalizer can release it without the worker."""

    def __init__(self):
        self.session: _Session | None = None
        self.server: _Server | None = None

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def close(self) -> None:
        self.stop_server()
        if self.session is not None:
            with contextlib.suppress(OSError):  # the repo may be gone already
                self.session.__exit__(None, None, None)
            self.session = None


class PytestWorker:
    """A warm pytest for one repo copy (one episode): run_pytest's results without its start-up cost.

        worker = sandbox.PytestWorker(repo, timeout_s=20)
        run = worker.run(["tests/test_ops.py::test_mean_1"])  # a TestRun, exactly as run_pytest returns
        worker.pid            # the server's pid while it runs (None before the first run and after close)
        worker.fallback       # None, or why runs go through cold run_pytest instead
        worker.close()        # also on garbage collection; `with sandbox.PytestWorker(repo) as w:` works

    The first run starts a server in the same sandbox as a cold run (namespaces, unprivileged uid,
    rlimits, scrubbed environment: see the module docstring), which imports pytest once. Each run
    forks a child of it that runs pytest on the ids, so the repo's own modules are imported afresh
    and edits between runs are seen. Every limit holds per run: the child inherits the rlimits (its
    CPU time starts at zero), its output is read and cut as in a cold run, and when it ends every other
    process of the namespace is killed. A run that passes the wall-clock timeout kills the whole server
    (reported as a cold run reports it); the next run starts a new one. Differences from run_pytest: one
    uid, scratch folder and HOME for the worker's life (each run gets a fresh HOME/TMPDIR inside it, but
    /tmp and the repo keep what runs wrote, as with successive cold runs), and the repo stays handed to
    that uid until close. A run cannot signal the server (init of its namespace) nor, in "root-ns" mode,
    ptrace it or read its memory (it is undumpable); in "user-ns" mode a run holds every capability
    of its user namespace and could. A run can leave files (a conftest.py, a patched plugin) in its repo
    that alter the next runs there, as with cold runs: so grade on a fresh copy, `run(ids, repo=copy)`;
    the run is then a new child of a server that has never run task code, like a cold run.

    Falls back to cold run_pytest (and says why in `fallback`) where the server cannot work: in
    "plain" isolation mode (no PID namespace, so nothing contains the per-run kill), when it does not
    start, or when the server preloaded a module of the repo (a top-level module of the same name, or
    one loaded from the repo's files, e.g. pytest-dev/pytest installed in editable mode): a child
    would run against that stale copy.
    One run at a time per worker (a lock), one worker per repo copy, like run_pytest.
    """

    def __init__(self, repo_dir: Path, *, timeout_s: float = 20.0, memory_mb: int = 1024, cpu_s: int | None = None,
                 max_output: int = 20_000, max_procs: int = 64, start_timeout_s: float = 30.0):
        self.repo = Path(repo_dir).resolve()
        if not self.repo.is_dir():
            raise SandboxError(f"not a directory: {repo_dir}")
        if timeout_s <= 0 or max_output <= 0 or max_procs <= 0 or memory_mb <= 0:
            raise SandboxError("timeout_s, memory_mb, max_output and max_procs must be positive")
        self.timeout_s, self.max_output, self.start_timeout_s = timeout_s, max_output, start_timeout_s
        self.limits = dict(timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s, max_procs=max_procs)
        self.fallback = None if _mode() != "plain" else "plain isolation mode: no PID namespace to contain a run"
        self.starts = 0  # servers started so far (a timeout costs a restart)
        self._runs = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._state = _WorkerState()
        self._finalizer = weakref.finalize(self, self._state.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pid(self) -> int | None:
        server = self._state.server
        return server.proc.pid if server is not None and server.alive() else None

    def run(self, test_ids: list[str], *, repo: Path | None = None) -> TestRun:
        """pytest on `test_ids` (all collected tests when empty), as run_pytest(repo, test_ids, **limits).

        `repo`: run in another folder than the worker's own, e.g. a fresh copy to grade on (see the class
        docstring). It is handed to the worker's uid for the run and given back after; the folders above
        it must let that uid through (a mkdtemp folder needs chmod 0o711). Warm only in "root-ns" mode,
        where runs cannot reach the server; elsewhere it is a cold run_pytest."""
        if not isinstance(test_ids, (list, tuple)) or not all(isinstance(t, str) for t in test_ids):
            raise SandboxError(f"test_ids must be a list of strings, got {test_ids!r}")
        target = self.repo if repo is None else Path(repo).resolve()
        if not target.is_dir():
            raise SandboxError(f"not a directory: {repo}")
        with self._lock:
            if self._closed:
                raise SandboxError("this PytestWorker is closed")
            if target != self.repo and _mode() != "root-ns":
                # Another copy is graded: in "user-ns" mode an earlier run could have ptraced the server, so
                # the run is cold there (in "root-ns" the server is undumpable to the runs' uid).
                return self._cold(test_ids, target)
            if self.fallback is None:
                try:
                    return self._warm(list(test_ids), target)
                except _WorkerDied as e:  # a server that will not start: no point trying again each run
                    self._go_cold(str(e))
            return self._cold(test_ids, target)

    def close(self) -> None:
        """Kill the server and hand the repo back to its owner; idempotent."""
        with self._lock:
            self._closed = True
            self._finalizer()

    # --- internals ---

    def _cold(self, test_ids, repo: Path) -> TestRun:
        return run_pytest(repo, list(test_ids), max_output=self.max_output, **self.limits)

    def _go_cold(self, why: str) -> None:
        self.fallback = why
        self._state.close()  # hand the repo back before cold runs take it over

    def _server(self) -> _Server:
        state = self._state
        if state.server is not None and not state.server.alive():
            state.stop_server()
        if state.server is None:
            if state.session is None:
                state.session = _Session(self.repo).__enter__()
            state.server = _Server(state.session, self.limits, self.start_timeout_s)
            self.starts += 1
        return state.server

    @staticmethod
    def _shadowed(server: _Server, repo: Path) -> list[str]:
        """Modules of the repo that the server has preloaded, so a child would not import them afresh: its
        top-level modules and packages (first on sys.path in a cold run) and any preloaded from its files."""
        names = {p.name.removesuffix(".py") for p in repo.iterdir()
                 if p.suffix == ".py" or (p / "__init__.py").is_file()}
        return sorted(names & server.preloaded) + server.inside

    def _warm(self, test_ids: list[str], repo: Path) -> TestRun:
        server = self._server()
        clash = self._shadowed(server, repo)
        if clash:
            raise _WorkerDied(f"the worker preloaded modules that the repo has: {', '.join(clash[:5])}")
        session = server.session
        run_dir = session.dir / f"run-{next(self._runs)}"  # a fresh HOME and TMPDIR per run
        run_dir.mkdir()
        owner = repo.stat()
        session.hand_over(repo)
        session.hand_over(run_dir)
        try:
            return _pytest_once(repo, test_ids, self.timeout_s, run_dir / "report.jsonl",
                                lambda args, env: self._exchange(server, args, {**env, "HOME": str(run_dir),
                                                                               "TMPDIR": str(run_dir)}, repo))
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
            if repo != self.repo and session.uid is not None:
                _chown_tree(repo, owner.st_uid, owner.st_gid)

    def _exchange(self, server: _Server, args: list[str], env: dict, cwd: Path) -> tuple[int, str, bool]:
        deadline = time.monotonic() + self.timeout_s
        try:
            server.request(args, env, cwd)
        except _WorkerDied:  # it died since the last run (it checked alive just now: a rare race)
            self._state.stop_server()
            return -signal.SIGKILL, "[sandbox: the pytest worker died before the run; it restarts]\n", False
        out = _Output(self.max_output)
        try:
            reply = server.reply(out, deadline)
        except BaseException:  # e.g. KeyboardInterrupt: its late reply must not pass for the next run's
            self._state.stop_server()
            raise
        if reply is not None and type(reply.get("rc")) is int:
            return reply["rc"], out.text(False, self.timeout_s), False
        timed_out = time.monotonic() >= deadline
        self._state.stop_server()  # hung (or died): its whole namespace goes; the next run starts a new one
        rc = -signal.SIGKILL if timed_out else server.proc.returncode
        note = "" if timed_out else f"\n[sandbox: the pytest worker died ({rc})]\n"
        return rc, out.text(timed_out, self.timeout_s, note), timed_out


# --- paths and patches ---------------------------------------------------------------------


def safe_path(root: Path, rel: str) -> Path:
    """The resolved path of `rel` inside `root`; SandboxError if it is absolute or escapes it."""
    if not isinstance(rel, str) or "\0" in rel:
        raise SandboxError(f"bad path: {rel!r}")
    if os.path.isabs(rel) or rel.startswith("~"):
        raise SandboxError(f"absolute path not allowed: {rel!r}")
    base = Path(root).resolve()
    path = (base / rel).resolve()  # follows symlinks, so a link pointing outside is caught here
    if path != base and base not in path.parents:
        raise SandboxError(f"path escapes the repository: {rel!r}")
    return path


_HEADER = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$")


def _diff_paths(diff: str) -> list[str]:
    """Every repo-relative path a diff names (after -p1), deletions and renames included."""
    paths = []
    for line in diff.splitlines():
        m = _HEADER.match(line)
        if not m:
            continue
        name = m.group(1).split("\t")[0].strip()
        if name == "/dev/null":
            continue
        if line.startswith(("--- ", "+++ ")):
            name = name.split("/", 1)[1] if "/" in name else name  # what patch -p1 strips
        paths.append(name)
    return list(dict.fromkeys(paths))


def _patch_tool() -> str:
    return "patch" if shutil.which("patch") else "git"


def apply_unified_diff(repo_dir: Path, diff: str) -> list[str]:
    """Apply a unified diff (git-style or plain, -p1) atomically; returns the files it touches.

    Every named path must stay inside repo_dir (no '..', no absolute path, no symlink that
    leads out); a diff that does not apply cleanly changes nothing and raises PatchError."""
    if not diff.strip():
        raise PatchError("empty diff")
    repo = Path(repo_dir).resolve()
    paths = _diff_paths(diff)
    if not paths:
        raise PatchError("no file headers (---/+++) found in the diff")
    for p in paths:
        if ".." in Path(p).parts:
            raise PatchError(f"diff path escapes the repository: {p!r}")
        try:
            safe_path(repo, p)
        except SandboxError as e:
            raise PatchError(str(e)) from None
    if not diff.endswith("\n"):
        diff += "\n"
    if _patch_tool() == "patch":  # patch is not atomic across files: dry-run first
        base = ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--reject-file=-", "-d", str(repo)]
        steps = [base + ["--dry-run"], base]
        env = None
    else:  # git apply is atomic; the ceiling keeps it from using an enclosing repository's root
        steps = [["git", "apply", "--whitespace=nowarn", "-p1"]]
        env = {**scrubbed_env(), "GIT_CEILING_DIRECTORIES": str(repo.parent)}
    for cmd in steps:
        try:
            r = subprocess.run(cmd, cwd=repo, input=diff, text=True, capture_output=True, timeout=60, env=env)
        except subprocess.TimeoutExpired:
            raise PatchError(f"{cmd[0]} timed out") from None
        if r.returncode != 0:
            raise PatchError(f"{cmd[0]} failed ({r.returncode}): {(r.stdout + r.stderr).strip()[:4000]}")
    return sorted(paths)
