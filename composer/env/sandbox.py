"""Run untrusted Python (an agent's edits, a task's tests) in a bounded subprocess.

    from composer.env import sandbox

    run = sandbox.run_pytest(repo, ["tests/test_ops.py::test_mean_1"], timeout_s=20)
    run.outcomes                    # {"tests/test_ops.py::test_mean_1": False}
    rc, out, timed_out = sandbox.run_python(repo, ["-c", "print(1)"])
    sandbox.apply_unified_diff(repo, diff)   # -> ["calc/ops.py"]; PatchError if it does not apply
    sandbox.safe_path(repo, "calc/ops.py")   # SandboxError for ../x, /etc/passwd, escaping symlinks
    sandbox.isolation()                      # what this host enforces (goes into reports)

The child runs in `repo_dir` itself (the caller's per-episode copy: whatever it writes there
stays) with a scrubbed environment (`scrubbed_env`: PATH, LANG, HOME and TMPDIR in a fresh
temporary folder, no variable of the parent, so no API key). Always, on every OS with
`resource`: RLIMIT_AS (`memory_mb`), RLIMIT_CPU (`cpu_s`, default timeout+1), RLIMIT_FSIZE
(64 MiB per file), RLIMIT_CORE=0; a wall-clock timeout that SIGKILLs the child's process
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
import time
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
        if self.uid is not None:
            _chown_tree(self.repo, *self.owner)
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, args: list[str], *, timeout_s: float, memory_mb: int, cpu_s: int | None, max_output: int,
            max_procs: int, extra_env: dict | None = None) -> tuple[int, str, bool]:
        env = scrubbed_env(self.dir / "home")
        env.update(extra_env or {})
        nproc = max_procs if self.mode == "root-ns" else _own_process_count() + max_procs
        limits = [(resource.RLIMIT_AS, memory_mb * 2**20),
                  (resource.RLIMIT_CPU, cpu_s or int(timeout_s) + 1),
                  (resource.RLIMIT_FSIZE, FILE_LIMIT_MB * 2**20),
                  (resource.RLIMIT_NPROC, nproc),
                  (resource.RLIMIT_CORE, 0)]

        def set_limits():  # runs in the forked child before exec: only pre-imported, lock-free calls
            for which, value in limits:
                resource.setrlimit(which, (value, value))

        argv = [*_ns_prefix(self.mode, self.uid), sys.executable, *args]
        return _run(argv, self.repo, env, set_limits, timeout_s, max_output)


def _run(argv, cwd, env, preexec, timeout_s, max_output) -> tuple[int, str, bool]:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec)
    deadline = time.monotonic() + timeout_s
    half = max_output // 2
    head, tail, total, timed_out = bytearray(), bytearray(), 0, False
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
            total += len(chunk)
            room = half - len(head)
            head += chunk[:max(room, 0)]
            tail += chunk[max(room, 0):]
            if len(tail) > half:
                del tail[:len(tail) - half]  # keep only the last `half` bytes
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:  # closed its output but kept running
        timed_out = True
    _kill_group(proc.pid)  # also reaps stragglers a finished child left in its group
    proc.wait()
    proc.stdout.close()
    out = bytes(head)
    if total > len(head) + len(tail):
        out += f"\n... [{total - len(head) - len(tail)} bytes of output cut] ...\n".encode()
    out += bytes(tail)
    if timed_out:
        out += f"\n[sandbox: killed after {timeout_s:g}s wall-clock timeout]\n".encode()
    return proc.returncode, out.decode("utf-8", "replace"), timed_out


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
    start = time.monotonic()
    repo = Path(repo_dir).resolve()
    files = [f for f in dict.fromkeys(t.split("::")[0] for t in test_ids) if _exists_inside(repo, f)]
    with _Session(repo) as s:
        plugin_dir = s.dir / "plugin"
        plugin_dir.mkdir()
        (plugin_dir / f"{PLUGIN_NAME}.py").write_text(PLUGIN)
        report = s.dir / "home" / "report.jsonl"
        # Plugin autoload is off: the host venv's plugins are not the repo's, and loading them costs 0.3 s a run.
        env = {"PYTHONPATH": str(plugin_dir), "COMPOSER_SANDBOX_REPORT": str(report),
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        if test_ids:
            env["COMPOSER_SANDBOX_SELECT"] = json.dumps(test_ids)
        args = ["-m", "pytest", "-p", "no:cacheprovider", "-p", PLUGIN_NAME, "-q", "-rfE", "--tb=short",
                "--color=no", f"--rootdir={repo}", *files]
        if test_ids and not files:
            rc, output, timed_out = 5, "none of the requested test files exist\n", False
        else:
            rc, output, timed_out = s.run(args, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                                          max_output=max_output, max_procs=max_procs, extra_env=env)
        observed = _read_report(report)
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
