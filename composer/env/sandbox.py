"""Run untrusted Python (an agent's edits, a task's tests) in a contained, bounded subprocess.

    from composer.env import sandbox

    run = sandbox.run_pytest(repo, ["tests/test_ops.py::test_mean_1"], timeout_s=20)
    run.outcomes                    # {"tests/test_ops.py::test_mean_1": False}
    with sandbox.PytestWorker(repo, timeout_s=20) as worker:   # a warm pytest for one episode's runs
        run = worker.run(["tests/test_ops.py::test_mean_1"])   # the same TestRun, ~3x cheaper
    rc, out, timed_out = sandbox.run_python(repo, ["-c", "print(1)"])
    sandbox.apply_unified_diff(repo, diff)   # -> ["calc/ops.py"]; PatchError (and nothing changed) if it fails
    sandbox.safe_path(repo, "calc/ops.py")   # SandboxError for ../x, /etc/passwd, escaping symlinks
    sandbox.isolation()                      # what this host enforces (goes into reports)

Threat model: the code a run executes is an adversary's (a policy under RL writes it). What it must not do
is reach anything outside its own repository copy, outlive its run, exhaust the host, or forge the
outcomes that become rewards. Always, on every OS with `resource`: a scrubbed environment (`scrubbed_env`:
no variable of the parent, so no API key), RLIMIT_AS (`memory_mb`, per process), RLIMIT_CPU, RLIMIT_FSIZE
(64 MiB per file), RLIMIT_CORE=0 (util-linux `prlimit` where it exists, else a preexec_fn), a wall-clock
timeout that SIGKILLs the whole tree, output read incrementally and cut to `max_output` bytes, and a
watch on the repository's size (`disk_mb`, `max_files`: polled every 0.2 s, the run killed when over).
What else holds depends on the host, and `isolation()["mode"]` says which:

- "root-ns" (Linux, root, bubblewrap `bwrap` and util-linux `setpriv`; the dev VM and CI, where
  `.ci/run` installs bubblewrap): each run (a cold run, or a PytestWorker's server and its runs) gets
  its own mount, PID, network, IPC and UTS namespaces. Cold pytest runs start from a fork server
  (composer.env.forkserver: a trusted process with pytest imported that builds the same `layout` itself
  for each run), other runs through bwrap. Its filesystem is built from nothing: the
  system's /usr (and /bin, /lib... links), a few /etc files (the loader cache, passwd, group, localtime;
  not /etc/shadow), the Python installation, all read-only; a fresh /proc and a minimal /dev; a private
  size-limited tmpfs on /tmp and /dev/shm (`tmp_mb`, gone with the run); the outcome plugin read-only;
  and its repository copy read-write. Nothing else exists for it: no other episode's copy, no host
  /tmp, no host socket, no /root, no /work. It runs as a uid of its own (`_Uids`: unique among all live
  sandboxes on the host, whatever process made them, so never shared and never wrapped), with no
  capability and no_new_privs, as pid 1 of its PID namespace (so the whole tree dies with it), and
  with the memory of its whole process tree capped by a cgroup (`memory_mb`; cgroup v2 where the
  memory controller can be delegated to a child, else the v1 memory hierarchy where writable; the mode
  `isolation()["memory"]` names; where neither is writable, RLIMIT_AS per process and RLIMIT_NPROC
  bound the tree to memory_mb x max_procs). tmpfs pages count against that cgroup too.
- "user-ns" (Linux, not root, unprivileged user namespaces): `unshare --user --map-root-user` with new
  network and PID namespaces; the uid is the caller's, so the run reads and writes what the caller can,
  and RLIMIT_NPROC is the caller's current process count plus `max_procs`. Not contained.
- "plain" (anything else): rlimits and the process-group kill only. No network isolation; a child that
  calls setsid() survives the timeout kill; as root RLIMIT_NPROC is not enforced at all. Not contained.

Outcomes. Per-test outcomes come from a small pytest plugin (composer/env/sandbox_plugin.py, its module name
suffixed per session) loaded with `-p` that sends each report's node id and phase down a pipe, each line
carrying a per-run token; the plugin takes the pipe's number and the token out of the environment when pytest
loads it, before any conftest or test module is imported, and closes its run with an end line. pytest is
pinned to the repository's own configuration file (`-c`, chosen by the trusted side), `--rootdir` and
`--confcutdir` are the repository, so no pytest.ini or conftest.py outside it steers a run. What this cannot stop: code imported by the tests runs in the same
process as the plugin, so it can patch pytest or find the pipe and the token in memory. Grading therefore
also resets every file that steers a test run to the base (composer.env.grading), plants canaries among the
tests (composer.env.canaries), scans the changed source files (composer.env.tampering), and runs with
`grading=True`: the values the tests compare made plain (composer/env/plain_values.py) and the repository copy
read-only to the run. xfail counts as a pass and skip as a failure, as in SWE-bench's log parsers.

`PytestWorker` is the warm path for an agent's repeated test runs on one copy: a server started once
inside the same sandbox (pid 1 of its namespaces, pytest imported) forks one child per run and kills every
other process of its namespace after each; a run past the timeout takes the whole server down and the
next run starts a new one. It needs a PID namespace ("root-ns" or "user-ns"); in "plain" mode, or when the
server cannot start, it falls back to cold run_pytest (see its docstring). Where cold runs start from the
fork server (`forked_runs()`), they cost about what a warm run does, and CodingEnv uses no worker. Grading
never goes through a worker: a submission is graded by a cold run in a fresh sandbox on a fresh copy
(composer.env.grading).
"""

import contextlib
import functools
import itertools
import json
import os
import random
import re
import resource
import secrets
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

from composer.env import forkserver

FILE_LIMIT_MB = 64
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Per-run uids live far above any real account (and below 2^31, where setresuid's -1 sentinel sits).
UID_BASE = 1_500_000_000
UID_SPAN = 1 << 24
WATCH_S = 0.2  # how often a run's repository size is checked
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group", "nsswitch.conf",
             "hosts", "alternatives")

PLUGIN_NAME = "_composer_sandbox_plugin"  # + each session's own suffix (plugin_name): no repository file can shadow it
# Loaded with -p, so imported before any conftest or test module (composer/env/sandbox_plugin.py; see the module
# docstring for what remains possible from inside the test process).
PLUGIN = (Path(__file__).with_name("sandbox_plugin.py")).read_text()
PLAIN_VALUES = (Path(__file__).with_name("plain_values.py")).read_text()  # imported by the plugin when grading
PLAIN_NAME = "_composer_plain_values"


def plugin_name(plugin_dir: Path, name: str = PLUGIN_NAME) -> str:
    """A plugin module's name in one session: its name and the session folder's random suffix. The run's code sees
    it, but a repository file written before the run (a diff under grading) cannot have taken it, as it would with
    a fixed name: `python -m pytest` puts the repository ahead of PYTHONPATH on sys.path."""
    return f"{name}_{plugin_dir.parent.name.rsplit('-', 1)[-1]}"


EMPTY_INI = "[pytest]\n"
# Where pytest would find its configuration in a repository root, and the section that makes a file count.
CONFIG_FILES = (("pytest.ini", ""), (".pytest.ini", ""), ("pyproject.toml", "[tool.pytest.ini_options]"),
                ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))


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
    missing: tuple[str, ...] = ()  # requested ids that gave no outcome at all (not collected, never reached)
    properties: dict | None = None  # node id -> what its call recorded (record_property), when any did


@dataclass(frozen=True)
class Limits:
    """What bounds one run (a cold run, or each run of a PytestWorker)."""
    timeout_s: float = 20.0
    memory_mb: int = 1024  # per process (RLIMIT_AS) and, where a cgroup can be made, for the whole tree
    cpu_s: int | None = None  # RLIMIT_CPU; default timeout_s + 1
    max_output: int = 20_000
    max_procs: int = 64
    tmp_mb: int = 256  # the private /tmp and /dev/shm ("root-ns")
    disk_mb: int = 512  # the repository copy's size, polled
    max_files: int = 20_000  # files and folders in the repository copy, polled

    def __post_init__(self):
        bad = [k for k, v in vars(self).items() if v is not None and v <= 0]
        if bad:
            raise SandboxError(f"sandbox limits must be positive: {', '.join(bad)}")


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


def _python_dirs() -> list[str]:
    """The Python installation a child needs (the venv and the interpreter it was made from), outermost only."""
    dirs = {os.path.realpath(d) for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                           os.path.dirname(os.path.realpath(sys.executable)))}
    dirs |= {os.path.abspath(d) for d in (sys.prefix, sys.base_prefix)}  # as the child's PATH names them
    dirs = {d for d in dirs if not d.startswith("/usr/")}
    return sorted(d for d in dirs if not any(d.startswith(o + os.sep) for o in dirs))


def layout(repo: Path, plugin_dir: Path, tmp_mb: int) -> list[tuple]:
    """A run's filesystem, built from nothing, as a list of operations in order: ("symlink", target, path),
    ("dir", path) (mode 0755), ("ro", path) / ("rw", path) (a bind of the host's path at the same place),
    ("dev",) (null, zero, full, random, urandom, tty), ("proc",), ("tmpfs", path, bytes) (mode 1777).
    bubblewrap carries it out for cold runs and PytestWorkers (`_bwrap`), composer.env.forkserver for
    grading runs: one description, two executors."""
    ops = [("symlink", os.readlink(d), d) if os.path.islink(d) else ("ro", d) for d in SYSTEM_DIRS
           if os.path.islink(d) or os.path.isdir(d)]
    ops += [("ro", f"/etc/{name}") for name in ETC_FILES if os.path.exists(f"/etc/{name}")]
    ops += [("proc",), ("dev",), ("tmpfs", "/tmp", tmp_mb * 2**20), ("tmpfs", "/dev/shm", tmp_mb * 2**20)]
    made = {"/", "/tmp", "/dev", "/dev/shm", "/proc", "/etc", *SYSTEM_DIRS}
    for how, d in [("ro", d) for d in _python_dirs()] + [("ro", str(plugin_dir)), ("rw", str(repo))]:
        for parent in reversed(Path(d).parents):  # made 0755: the run's uid must pass through them
            if str(parent) not in made:
                made.add(str(parent))
                ops.append(("dir", str(parent)))
        ops.append((how, d))
    return ops


def _bwrap(repo: Path, plugin_dir: Path, tmp_mb: int) -> list[str]:
    """bubblewrap's arguments for `layout` (bwrap would make implicit parent folders 0700: they are explicit)."""
    args = ["bwrap", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session"]
    for op in layout(repo, plugin_dir, tmp_mb):
        args += {"symlink": lambda: ["--symlink", op[1], op[2]], "ro": lambda: ["--ro-bind", op[1], op[1]],
                 "rw": lambda: ["--bind", op[1], op[1]], "dir": lambda: ["--perms", "0755", "--dir", op[1]],
                 "dev": lambda: ["--dev", "/dev"], "proc": lambda: ["--dir", "/proc"],  # unshare --mount-proc mounts it
                 "tmpfs": lambda: ["--perms", "1777", "--size", str(op[2]), "--tmpfs", op[1]]}[op[0]]()
    return [*args, "--chdir", str(repo)]


def _setpriv(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--pdeathsig=SIGKILL"]  # setuid clears bwrap's pdeathsig


PID_NS = ["--pid", "--fork", "--kill-child", "--mount-proc"]


def _ns_prefix(mode: str, uid: int | None, repo: Path, plugin_dir: Path, tmp_mb: int) -> list[str]:
    """The launcher chain. In "root-ns": bwrap (mount, network, IPC, UTS namespaces) runs unshare for the PID
    namespace, so the run's interpreter is pid 1 there (unkillable from inside, and its death ends the whole
    tree) while unshare's --kill-child still reaches it when the chain above dies (bwrap's --as-pid-1 would
    make it the parent-death signal's target as a namespace init, which the kernel does not deliver)."""
    if mode == "root-ns":
        return [*_bwrap(repo, plugin_dir, tmp_mb), "--", "unshare", *PID_NS, "--", *_setpriv(uid), "--",
                "env", "-u", "PWD", "-u", "OLDPWD", "--"]  # bwrap sets both (OLDPWD: the caller's folder)
    if mode == "user-ns":
        return ["unshare", "--user", "--map-root-user", "--net", *PID_NS, "--"]
    if mode == "pid-ns":
        return ["unshare", *PID_NS, "--"]
    return []


_FORCED: list[str] = []


def _mode() -> str:
    return _FORCED[-1] if _FORCED else _probed_mode()


@contextlib.contextmanager
def forced_mode(mode: str):
    """Run every sandbox made inside in `mode`; for benchmarks only. "pid-ns" (root): a PID namespace and
    nothing else, not even another uid: the uncontained baseline that the cost of containment is measured
    against (composer.bench.env), with the same warm-worker scheme."""
    _FORCED.append(mode)
    try:
        yield
    finally:
        _FORCED.pop()


@functools.cache
def _probed_mode() -> str:
    """The strongest mode whose probe (start the interpreter inside it) succeeds here."""
    if sys.platform != "linux":
        return "plain"
    candidates = []
    if os.geteuid() == 0 and shutil.which("bwrap") and shutil.which("setpriv"):
        candidates.append("root-ns")
    if shutil.which("unshare"):
        candidates.append("user-ns")
    for mode in candidates:
        with tempfile.TemporaryDirectory(prefix="composer-probe-") as tmp:
            argv = [*_ns_prefix(mode, UID_BASE - 1, Path(tmp), Path(tmp), 1), sys.executable, "-c",
                    "import os; os.getpid()"]
            try:
                probe = subprocess.run(argv, cwd="/", env=scrubbed_env(), capture_output=True, timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                continue
        if probe.returncode == 0:
            return mode
    return "plain"


def guarantees(mode: str | None = None) -> dict[str, bool]:
    """What a run is guaranteed in `mode` (default: this host's), the facts that tests and reports rest on:
    process_cap (max_procs bounds its processes: RLIMIT_NPROC, which root ignores, also root inside a user
    namespace), private_files (its own filesystem and uid: host files, the plugin and a grading copy out of its
    write reach), no_network (its own network namespace), pid_namespace (its tree dies with it)."""
    mode = mode or _mode()
    root = os.geteuid() == 0
    return {"process_cap": mode == "root-ns" or (mode in ("user-ns", "plain") and not root),
            "private_files": mode == "root-ns",
            "no_network": mode in ("root-ns", "user-ns"),
            "pid_namespace": mode in ("root-ns", "user-ns", "pid-ns")}


@functools.cache
def _prlimit() -> str | None:
    return shutil.which("prlimit") if sys.platform == "linux" else None


def isolation() -> dict:
    """What is enforced on this host, in words fit for a report's provenance block."""
    mode = _mode()
    memory = _memory_cgroup()
    return {
        "mode": mode,
        "network": "none (own network namespace)" if mode != "plain" else "not isolated",
        "processes": {"root-ns": "own PID namespace, own uid (unique among live sandboxes), no capabilities",
                      "user-ns": "own PID namespace, RLIMIT_NPROC=current+max_procs",
                      "plain": "process group kill" + ("; RLIMIT_NPROC not enforced (root)" if os.geteuid() == 0
                                                       else "; RLIMIT_NPROC=current+max_procs")}[mode],
        "filesystem": {"root-ns": "own mount namespace: system and Python read-only, private size-limited /tmp, "
                                  "the repository copy read-write, nothing else",
                       "user-ns": "the caller's rights (not contained)",
                       "plain": "the caller's rights (not contained)"}[mode],
        "memory": (f"cgroup {memory[1]} memory cap for the process tree" if mode == "root-ns" and memory
                   else "RLIMIT_AS per process only"),
        "pytest_runs": ("fork server (a fresh sandbox per run, pytest preloaded)" if forked_runs()
                        else f"cold interpreter per run{' (fork server failed: ' + _FORKSERVER.failed + ')' if _FORKSERVER.failed else ''}"),
        "rlimits": ["AS", "CPU", "FSIZE", "NPROC", "CORE"],
        "environment": sorted(scrubbed_env()),
    }


# --- uids and cgroups ------------------------------------------------------------------------


class _Uids:
    """Per-run uids unique among the live sandboxes of this host: each is a file made with O_EXCL in a
    root-only folder, holding the pid that owns it; one whose owner died is taken back."""

    DIR = Path(tempfile.gettempdir()) / "composer-sandbox-uids"

    @classmethod
    def take(cls) -> int:
        cls.DIR.mkdir(mode=0o700, exist_ok=True)
        st = cls.DIR.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise SandboxError(f"{cls.DIR} must be a folder of uid {os.geteuid()} with mode 0700")
        first = random.randrange(UID_SPAN)
        for i in range(UID_SPAN):
            uid = UID_BASE + (first + i) % UID_SPAN
            path = cls.DIR / str(uid)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if cls._stale(path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return uid
        raise SandboxError("no free sandbox uid")

    @staticmethod
    def _stale(path: Path) -> bool:
        try:
            os.kill(int(path.read_text() or 0), 0)
            return False
        except (ProcessLookupError, ValueError):
            return True
        except (OSError, PermissionError):
            return False

    @classmethod
    def give_back(cls, uid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (cls.DIR / str(uid)).unlink()


@functools.cache
def _memory_cgroup() -> tuple[Path, str] | None:
    """(folder under which a sandbox can make its own memory cgroup, "v2" or "v1"), or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return None
    try:
        own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
        mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return None
    found = []
    for head, tail in mounts:
        fstype, _, options = tail.split()[:3]
        point = head.split()[4]
        if fstype == "cgroup2" and "" in own:
            found.append((Path(point + own[""]), "v2", "memory.max"))
        elif fstype == "cgroup" and "memory" in options.split(","):
            key = next((k for k in own if "memory" in k.split(",")), None)
            if key is not None:
                found.append((Path(point + own[key]), "v1", "memory.limit_in_bytes"))
    for base, version, limit in sorted(found, key=lambda f: f[1] != "v2"):
        probe = base / f"composer-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            (probe / limit).write_text(str(64 * 2**20))
            return base, version
        except OSError:
            continue
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
    return None


class _Cgroup:
    """A memory cgroup for one sandbox's process tree; the launcher joins it before anything runs."""

    def __init__(self, name: str, memory_mb: int):
        base, self.version = _memory_cgroup()
        self.path = base / name
        self.path.mkdir()
        limit = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
        (self.path / limit).write_text(str(memory_mb * 2**20))
        if self.version == "v1":
            with contextlib.suppress(OSError):  # no swap to escape into either (absent without swap accounting)
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(memory_mb * 2**20))

    def join_argv(self) -> list[str]:
        """Prefix that moves the launcher into the cgroup, then execs the rest (children inherit it)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def remove(self) -> None:
        for _ in range(100):  # the namespace is dead by now; its last processes may still be exiting
            with contextlib.suppress(OSError, ValueError):
                for pid in (self.path / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


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


def _readable_tree(root: Path) -> None:
    """Let every user read the tree's files and enter its folders (a grading copy, read-only to its run)."""
    for dirpath, _, filenames in os.walk(root, followlinks=False):
        for p, bits in ((dirpath, 0o555), *((os.path.join(dirpath, f), 0o444) for f in filenames)):
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & bits != bits:
                os.chmod(p, stat.S_IMODE(st.st_mode) | bits)


def _tree_size(root: Path, max_files: int) -> tuple[int, int]:
    """(bytes on disk, entries) under root, without following links; stops counting past max_files."""
    size = count = 0
    stack = [str(root)]
    while stack and count <= max_files:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                count += 1
                with contextlib.suppress(OSError):
                    size += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return size, count


class _Session:
    """One sandbox: its scratch folder (the plugin, and HOME outside "root-ns"), its uid and memory cgroup."""

    def __init__(self, repo_dir: Path, limits: Limits, *, writable: bool = True):
        self.repo = Path(repo_dir).resolve()
        if not self.repo.is_dir():
            raise SandboxError(f"not a directory: {repo_dir}")
        self.limits, self.writable = limits, writable
        self.mode = _mode()
        self.uid = self.cgroup = None

    def __enter__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="composer-sbx-"))
        try:
            (self.dir / "home").mkdir()
            plugin_dir = self.dir / "plugin"  # the caller's, read-only to the run: it cannot swap the plugin
            plugin_dir.mkdir()
            (plugin_dir / f"{plugin_name(plugin_dir)}.py").write_text(PLUGIN)
            (plugin_dir / f"{plugin_name(plugin_dir, PLAIN_NAME)}.py").write_text(PLAIN_VALUES)
            (plugin_dir / "empty.ini").write_text(EMPTY_INI)
            if self.mode == "root-ns":
                os.chmod(self.dir, 0o755)
                self.uid = _Uids.take()
                st = self.repo.stat()
                self.owner = (st.st_uid, st.st_gid)
                if self.writable:
                    _chown_tree(self.repo, self.uid, self.uid)
                else:  # the run's uid, neither owner nor privileged, reads and enters it and writes nothing
                    _readable_tree(self.repo)
                if _memory_cgroup():
                    self.cgroup = _Cgroup(f"composer-{self.uid}", self.limits.memory_mb)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.uid is not None and self.writable:
                with contextlib.suppress(FileNotFoundError):  # the repo may be gone already
                    _chown_tree(self.repo, *self.owner)
        finally:
            if self.cgroup is not None:
                self.cgroup.remove()
            if self.uid is not None:
                _Uids.give_back(self.uid)
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def plugin_dir(self) -> Path:
        return self.dir / "plugin"

    def env(self) -> dict:
        """The child's variables: scrubbed, HOME/TMPDIR in the private /tmp ("root-ns") or the session folder."""
        return scrubbed_env("/tmp" if self.mode == "root-ns" else self.dir / "home")

    def pytest_env(self) -> dict:
        """env() with the outcome plugin importable (plugin autoload off: the host venv's plugins are not the
        repo's, and loading them costs 0.3 s a run)."""
        return {**self.env(), "PYTHONPATH": str(self.plugin_dir), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def rlimits(self) -> list[tuple[str, int]]:
        """(resource name without RLIMIT_, value) for every rlimit a run gets."""
        lim = self.limits
        nproc = lim.max_procs if self.mode == "root-ns" else _own_process_count() + lim.max_procs
        return [("AS", lim.memory_mb * 2**20), ("CPU", lim.cpu_s or int(lim.timeout_s) + 1),
                ("FSIZE", FILE_LIMIT_MB * 2**20), ("NPROC", nproc), ("CORE", 0)]

    def command(self, args: list[str]) -> tuple[list[str], object]:
        """(argv, preexec_fn) for `python *args` in this sandbox under the rlimits. util-linux prlimit sets
        them where it exists (preexec_fn is then None): a preexec_fn makes subprocess fork() the whole
        caller instead of vfork(), ~30 ms per run from a process with transformers loaded."""
        lim = self.limits
        limits = [(getattr(resource, f"RLIMIT_{name}"), name.lower(), value) for name, value in self.rlimits()]
        argv = [*_ns_prefix(self.mode, self.uid, self.repo, self.plugin_dir, lim.tmp_mb), sys.executable, *args]
        if self.cgroup is not None:
            argv = [*self.cgroup.join_argv(), *argv]
        if _prlimit():
            return [_prlimit(), *(f"--{name}={value}" for _, name, value in limits), "--", *argv], None

        def set_limits():  # runs in the forked child before exec: only pre-imported, lock-free calls
            for which, _, value in limits:
                resource.setrlimit(which, (value, value))

        return argv, set_limits

    def over_disk(self) -> str | None:
        """Why the repository copy is over its limits, or None."""
        size, count = _tree_size(self.repo, self.limits.max_files)
        if count > self.limits.max_files:
            return f"more than {self.limits.max_files} files in the repository"
        if size > self.limits.disk_mb * 2**20:
            return f"the repository grew past {self.limits.disk_mb} MB"
        return None

    def run(self, args: list[str], *, extra_env: dict | None = None, pass_fds=()) -> tuple[int, str, bool]:
        argv, preexec = self.command(args)
        return _run(argv, self, {**self.env(), **(extra_env or {})}, preexec, pass_fds)
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

    def text(self) -> str:
        out = bytes(self.head)
        if self.total > len(self.head) + len(self.tail):
            out += f"\n... [{self.total - len(self.head) - len(self.tail)} bytes of output cut] ...\n".encode()
        out += bytes(self.tail)
        return out.decode("utf-8", "replace")




class _Report:
    """The outcome plugin's pipe for one run (cold) or one server's runs (warm): what it sent, bounded."""

    LIMIT = 8 << 20

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk[:max(self.LIMIT - len(self.data), 0)]

    def close_write(self) -> None:
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def close(self) -> None:
        self.close_write()
        with contextlib.suppress(OSError):
            os.close(self.read_fd)

    def take(self) -> bytes:
        data, self.data = bytes(self.data), bytearray()
        return data


def _pump(streams: dict, deadline: float, session: "_Session", done=None) -> str | None:
    """Read every fd of `streams` ({fd: callback(chunk)}) into its callback until all are closed, or until
    `done()` is true, checking the repository's size every WATCH_S. None when finished; else why it was cut:
    "timeout", or the size limit passed."""
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        next_watch = time.monotonic() + WATCH_S
        while sel.get_map() and not (done and done()):
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if now >= next_watch:
                over = session.over_disk()
                if over:
                    return over
                next_watch = now + WATCH_S
            for key, _ in sel.select(min(deadline, next_watch) - now):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    streams[key.fd](chunk)
                else:
                    sel.unregister(key.fd)
    return None


def _drain(streams: dict) -> None:
    """What is already in these pipes (the writer has exited), without blocking."""
    for fd, add in streams.items():
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, 1 << 16):
                add(chunk)
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(fd, True)


def _cut_note(why: str | None, timeout_s: float) -> str:
    if why is None:
        return ""
    if why == "timeout":
        return f"\n[sandbox: killed after {timeout_s:g}s wall-clock timeout]\n"
    return f"\n[sandbox: killed: {why}]\n"


def _run(argv, session: "_Session", env, preexec, report: _Report | None = None) -> tuple[int, str, bool]:
    lim = session.limits
    proc = subprocess.Popen(argv, cwd=session.repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
                            pass_fds=(report.write_fd,) if report else ())
    if report:
        report.close_write()  # the child holds the only write end: EOF when its tree is gone
    deadline = time.monotonic() + lim.timeout_s
    out = _Output(lim.max_output)
    streams = {proc.stdout.fileno(): out.add, **({report.read_fd: report.add} if report else {})}
    why = _pump(streams, deadline, session)
    if why is None:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:  # closed its output but kept running
            why = "timeout"
    _kill_group(proc.pid)  # also reaps stragglers a finished child left in its group
    proc.wait()
    proc.stdout.close()
    return proc.returncode, out.text() + _cut_note(why, lim.timeout_s), why == "timeout"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_python(repo_dir: Path, args: list[str], *, extra_env: dict | None = None, **limits) -> tuple[int, str, bool]:
    """`python *args` in repo_dir in a sandbox under `Limits(**limits)`; (returncode, output, timed_out).

    returncode is negative (-signal) when the child was killed."""
    with _Session(repo_dir, Limits(**limits)) as s:
        return s.run(args, extra_env=extra_env)


def run_pytest(repo_dir: Path, test_ids: list[str], *, grading: bool = False, known_classes=(), **limits) -> TestRun:
    """Run pytest once on `test_ids` (all collected tests when empty) under `Limits(**limits)`; outcome per node id.
    grading: a submission's graded run: the tests see the code under test's values made plain
    (composer/env/plain_values.py; known_classes: "module:qualname" of the classes the base commit defines), and in
    "root-ns" the repository is the caller's, read-only to the run (its code cannot rewrite the graded test files
    or the canaries in them).

    pytest gets the ids' files and the plugin keeps just the ids, so one missing id does not
    abort the run (pytest alone would exit 4 and run nothing). A file id ("tests/test_x.py")
    passes when all its tests do. A requested id that never ran (not collected, timeout,
    crash) maps to False and `error` says why; error is None only when pytest finished
    normally and every requested id ran."""
    with _Session(repo_dir, Limits(**limits), writable=not grading) as s:
        def runner(args, extra):
            if s.mode in FORKED_MODES and _FORKSERVER.failed is None:
                try:
                    if not _shadows(s.repo, _FORKSERVER.modules()):  # else a cold interpreter imports them afresh
                        return _forked(s, args, extra)
                except (_ForkFailed, OSError) as e:  # say so in isolation() and keep running, through bwrap
                    _FORKSERVER.failed = str(e)
            report = _Report()
            try:
                argv, preexec = s.command(["-m", "pytest", *args])
                env = {**s.pytest_env(), **extra, "COMPOSER_SANDBOX_REPORT_FD": str(report.write_fd)}
                rc, out, timed_out = _run(argv, s, env, preexec, report)
                return rc, out, timed_out, report.take()
            finally:
                report.close()

        return _pytest_once(s.repo, test_ids, s.limits.timeout_s, s.plugin_dir, runner, grading, known_classes)


class _ForkFailed(Exception):
    """The fork server could not start a run (not a failure of the run itself)."""


class _ForkServer(forkserver.Server):
    failed: str | None = None  # why pytest runs went back to bwrap, for isolation()


_FORKSERVER = _ForkServer()
FORKED_MODES = ("root-ns", "pid-ns")  # where run_pytest starts from the fork server (pid-ns: benchmarks' baseline)


def forked_runs() -> bool:
    """Whether cold pytest runs start from the fork server here (a fresh sandbox with pytest preloaded)."""
    return _mode() in FORKED_MODES and _FORKSERVER.failed is None


def _shadows(repo: Path, preloaded: frozenset) -> list[str]:
    """Top-level modules and packages of the repo that a preloaded interpreter would not import afresh."""
    names = {p.name.removesuffix(".py") for p in repo.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    return sorted(names & preloaded)


def _forked(s: "_Session", args: list[str], extra: dict) -> tuple[int, str, bool, bytes]:
    """One pytest run through the fork server (composer.env.forkserver) in a fresh sandbox of `s`'s layout."""
    lim = s.limits
    out_r, out_w = os.pipe()
    status_r, status_w = os.pipe()
    report = _Report()
    contained = s.mode == "root-ns"
    request = {"layout": layout(s.repo, s.plugin_dir, lim.tmp_mb) if contained else None, "uid": s.uid,
               "rlimits": s.rlimits(),
               "cgroup": str(s.cgroup.path / "cgroup.procs") if s.cgroup else None, "args": args,
               "env": {**s.pytest_env(), **extra}, "cwd": str(s.repo), "plugin_dir": str(s.plugin_dir)}
    try:
        try:
            _FORKSERVER.send(request, [out_w, report.write_fd, status_w])
        finally:
            os.close(out_w)
            os.close(status_w)
            report.close_write()
        out, status = _Output(lim.max_output), bytearray()
        streams = {out_r: out.add, report.read_fd: report.add, status_r: status.extend}
        why = _pump(streams, time.monotonic() + lim.timeout_s, s)
        lines = dict(line.split(" ", 1) for line in status.decode("utf-8", "replace").splitlines() if " " in line)
        if why is not None and "rc" not in lines and "pid" in lines:
            with contextlib.suppress(OSError):  # C1; the run's whole namespace dies with it
                pidfd = os.pidfd_open(int(lines["pid"]))
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                os.close(pidfd)
            _pump(streams, time.monotonic() + 10, s)
            lines = {**lines, "rc": str(-signal.SIGKILL)}
        if "error" in lines or "rc" not in lines:
            raise _ForkFailed(f"the fork server failed: {lines.get('error', 'no exit status')}")
        rc = int(lines["rc"])
        if rc == 126 and "the fork server could not start the run" in out.text():
            raise _ForkFailed(out.text()[-2000:])
        return rc, out.text() + _cut_note(why, lim.timeout_s), why == "timeout", report.take()
    finally:
        for fd in (out_r, status_r):
            os.close(fd)
        report.close()


def read_regular(path: Path, limit: int) -> bytes | None:
    """Up to `limit` bytes of path if it is a regular file (no symlink, FIFO or device followed), else None.
    The trusted side reads files that run code could have replaced with a FIFO (which would block forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(limit)


def config_file(repo: Path, plugin_dir: Path) -> Path:
    """The configuration file pytest would take in the repository root (its rules, root only), else an empty one."""
    for name, section in CONFIG_FILES:
        text = read_regular(repo / name, 1 << 20)
        if text is not None and section.encode() in text:
            return repo / name
    return plugin_dir / "empty.ini"


def _pytest_once(repo: Path, test_ids: list[str], timeout_s: float, plugin_dir: Path, runner,
                 grading: bool = False, known_classes=()) -> TestRun:
    """One pytest run through `runner(pytest_args, env) -> (rc, output, timed_out, report bytes)`, cold or warm
    alike: the same arguments, the same plugin, the same outcome rules."""
    start = time.monotonic()
    files = [f for f in dict.fromkeys(t.split("::")[0] for t in test_ids) if _exists_inside(repo, f)]
    token = secrets.token_hex(16)
    env = {"COMPOSER_SANDBOX_TOKEN": token}
    if grading:
        env["COMPOSER_SANDBOX_PLAIN"] = plugin_name(plugin_dir, PLAIN_NAME)
        env["COMPOSER_SANDBOX_KNOWN_CLASSES"] = json.dumps(sorted(known_classes))
    if test_ids:
        env["COMPOSER_SANDBOX_SELECT"] = json.dumps(test_ids)
    # A grading run's output is read by nobody: no tracebacks, and plain asserts (pytest's rewriting builds an
    # explanation for every failing assert: its failing canaries cost ~7 ms each); the outcomes are the same.
    shown = ["--tb=no", "--assert=plain"] if grading else ["--tb=short"]
    args = ["-c", str(config_file(repo, plugin_dir)), f"--rootdir={repo}", f"--confcutdir={repo}",
            "-p", "no:cacheprovider", "-p", plugin_name(plugin_dir), "-q", "-rfE", *shown, "--color=no", *files]
    if test_ids and not files:
        rc, output, timed_out, report = 5, "none of the requested test files exist\n", False, b""
    else:
        rc, output, timed_out, report = runner(args, env)
    observed, finished, properties = _parse_report(report, token)
    return _test_run(test_ids, observed, finished, rc, output, timed_out, timeout_s, start, properties)


def _test_run(test_ids, observed, finished, rc, output, timed_out, timeout_s, start, properties=None) -> TestRun:
    outcomes = {t: _outcome(observed, t) for t in test_ids} if test_ids else observed
    missing = [t for t, ok in outcomes.items() if ok is None]
    outcomes = {t: bool(ok) for t, ok in outcomes.items()}
    error = None
    if timed_out:
        error = f"timed out after {timeout_s:g}s"
    elif rc not in (0, 1) and not (rc == 5 and missing):
        error = f"pytest exited with {rc} ({_PYTEST_EXIT.get(rc, 'killed or crashed')})"
    elif rc in (0, 1) and not finished:
        error = f"pytest exited ({rc}) without finishing its session: it never started, or the tests ended the process"
    if error is None and missing:
        error = f"{len(missing)} requested test(s) did not run: {', '.join(missing[:5])}"
    return TestRun(outcomes, output, timed_out, rc, time.monotonic() - start, error, tuple(missing),
                   properties or None)


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


def _parse_report(data: bytes, token: str) -> tuple[dict[str, bool], bool, dict]:
    """({node id: passed}, whether the session's end line came, {node id: the properties its call recorded}):
    passed iff no phase failed and the call passed (or was an expected failure). Lines without this run's token
    are not the plugin's, and are ignored."""
    failed, called, finished, properties = set(), {}, False, {}
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            tok, nodeid, when, outcome, xfail, *extra = json.loads(line)
        except (ValueError, TypeError):
            continue
        if extra and tok == token and when == "call" and isinstance(extra[0], dict):
            properties[nodeid] = extra[0]
        if tok != token:
            continue
        if nodeid == "@end":
            finished = True
            continue
        called.setdefault(nodeid, False)
        if outcome == "failed" or (when == "setup" and outcome == "skipped"):
            failed.add(nodeid)
        if when == "call":
            called[nodeid] = outcome == "passed" or (outcome == "skipped" and xfail)
    return {n: ok and n not in failed for n, ok in called.items()}, finished, properties


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
    os.makedirs(os.environ["HOME"], exist_ok=True)  # a fresh HOME and TMPDIR per run
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

    def __init__(self, session: "_Session", start_timeout_s: float):
        self.session = session
        self.report = _Report()  # one pipe for the server's life: each run's lines carry that run's token
        self.report_fd = self.report.write_fd  # its number in the server (pass_fds keeps numbers)
        read, write = os.pipe()
        argv, preexec = session.command(["-c", ZYGOTE, str(write)])
        try:
            self.proc = subprocess.Popen(
                argv, cwd=session.repo, env=session.pytest_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(write, self.report_fd),
                preexec_fn=preexec)
        except BaseException:
            os.close(read)
            self.report.close()
            raise
        finally:
            os.close(write)
            self.report.close_write()
        self.replies, self.pending, self.init, self.cut = read, b"", None, None
        out = _Output(4000)
        ready = self.reply(out, time.monotonic() + start_timeout_s)
        if ready is None or "ready" not in ready:
            self.close()
            raise _WorkerDied(f"the pytest worker did not start: {out.text().strip()[-2000:]!r}")
        self.preloaded = frozenset(ready["ready"])
        self.inside = list(ready.get("inside", []))  # preloaded from the repo itself (e.g. an editable install)
        self.init = _child_pidfd(self.proc.pid)  # the server itself, under the launcher: what close() kills first

    def alive(self) -> bool:
        return self.proc.poll() is None

    def reply(self, out: _Output, deadline: float) -> dict | None:
        """The next reply line, while collecting the output into `out` and the plugin's lines into `report`; None
        at the deadline, when the repository passes its size limits (`cut` says which), or when it died."""
        def got(chunk):
            self.pending += chunk

        output = {self.proc.stdout.fileno(): out.add, self.report.read_fd: self.report.add}
        self.cut = _pump({**output, self.replies: got}, deadline, self.session, done=lambda: b"\n" in self.pending)
        if b"\n" not in self.pending:
            return None
        _drain(output)  # the child has exited: what it wrote is all in the pipes by now
        line, self.pending = self.pending.split(b"\n", 1)
        try:
            return dict(json.loads(line))
        except (ValueError, TypeError):  # not what the server writes: treat it as dead
            return None

    def request(self, args: list[str], env: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps({"args": args, "env": env}) + "\n").encode())
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
        self.report.close()


def _child_pidfd(pid: int) -> int | None:
    """A pidfd (immune to pid reuse) of the end of `pid`'s chain of only children (the launchers' last: the
    server, which has no child yet), None when that cannot be had."""
    try:
        leaf = None
        while len(children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split()) == 1:
            leaf = pid = int(children[0])
        return os.pidfd_open(leaf) if leaf is not None else None
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

    The first run starts a server in the same sandbox as a cold run (namespaces, own uid, memory cgroup,
    rlimits, scrubbed environment: see the module docstring), which imports pytest once. Each run
    forks a child of it that runs pytest on the ids, so the repo's own modules are imported afresh
    and edits between runs are seen. Every limit holds per run: the child inherits the rlimits (its
    CPU time starts at zero), its output is read and cut as in a cold run, and when it ends every other
    process of the namespace is killed. A run that passes the wall-clock timeout (or the repository's size
    limits) kills the whole server (reported as a cold run reports it); the next run starts a new one.
    Differences from run_pytest: one uid, cgroup and private /tmp for the worker's life (each run gets a
    fresh HOME/TMPDIR inside it, but /tmp and the repo keep what runs wrote, as with successive cold runs),
    and the repo stays handed to that uid until close. A run cannot signal the server (init of its
    namespace) nor, in "root-ns" mode, ptrace it or read its memory (it is undumpable); in "user-ns" mode
    a run holds every capability of its user namespace and could. A run can leave files (a conftest.py)
    in its repo that alter the next runs there, as with cold runs: grading never uses a worker.

    Falls back to cold run_pytest (and says why in `fallback`) where the server cannot work: in
    "plain" isolation mode (no PID namespace, so nothing contains the per-run kill), when it does not
    start, or when the server preloaded a module of the repo (a top-level module of the same name, or
    one loaded from the repo's files, e.g. pytest-dev/pytest installed in editable mode): a child
    would run against that stale copy.
    One run at a time per worker (a lock), one worker per repo copy, like run_pytest.
    """

    def __init__(self, repo_dir: Path, *, start_timeout_s: float = 30.0, **limits):
        self.repo = Path(repo_dir).resolve()
        if not self.repo.is_dir():
            raise SandboxError(f"not a directory: {repo_dir}")
        self.limits = Limits(**limits)
        self.start_timeout_s = start_timeout_s
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

    def run(self, test_ids: list[str]) -> TestRun:
        """pytest on `test_ids` (all collected tests when empty), as run_pytest(repo, test_ids, **limits)."""
        if not isinstance(test_ids, (list, tuple)) or not all(isinstance(t, str) for t in test_ids):
            raise SandboxError(f"test_ids must be a list of strings, got {test_ids!r}")
        with self._lock:
            if self._closed:
                raise SandboxError("this PytestWorker is closed")
            if self.fallback is None:
                try:
                    return self._warm(list(test_ids))
                except _WorkerDied as e:  # a server that will not start: no point trying again each run
                    self._go_cold(str(e))
            return run_pytest(self.repo, list(test_ids), **vars(self.limits))

    def close(self) -> None:
        """Kill the server and hand the repo back to its owner; idempotent."""
        with self._lock:
            self._closed = True
            self._finalizer()

    # --- internals ---

    def _go_cold(self, why: str) -> None:
        self.fallback = why
        self._state.close()  # hand the repo back before cold runs take it over

    def _server(self) -> _Server:
        state = self._state
        if state.server is not None and not state.server.alive():
            state.stop_server()
        if state.server is None:
            if state.session is None:
                state.session = _Session(self.repo, self.limits).__enter__()
            state.server = _Server(state.session, self.start_timeout_s)
            self.starts += 1
        return state.server

    @staticmethod
    def _shadowed(server: _Server, repo: Path) -> list[str]:
        """Modules of the repo that the server has preloaded, so a child would not import them afresh: its
        top-level modules and packages (first on sys.path in a cold run) and any preloaded from its files."""
        return _shadows(repo, server.preloaded) + server.inside

    def _warm(self, test_ids: list[str]) -> TestRun:
        server = self._server()
        clash = self._shadowed(server, self.repo)
        if clash:
            raise _WorkerDied(f"the worker preloaded modules that the repo has: {', '.join(clash[:5])}")
        session = server.session
        inside = "/tmp" if session.mode == "root-ns" else str(session.dir / "home")
        home = f"{inside}/run-{next(self._runs)}"
        if session.uid is not None:  # files the host wrote since the last run (the tools' edits) go to the run's uid
            _chown_tree(self.repo, session.uid, session.uid)
        env = {"HOME": home, "TMPDIR": home, "COMPOSER_SANDBOX_REPORT_FD": str(server.report_fd)}
        try:
            return _pytest_once(self.repo, test_ids, self.limits.timeout_s, session.plugin_dir,
                                lambda args, extra: self._exchange(server, args, {**extra, **env}))
        finally:
            if session.mode != "root-ns":  # in "root-ns" it is in the private /tmp, gone with the server
                shutil.rmtree(home, ignore_errors=True)

    def _exchange(self, server: _Server, args: list[str], env: dict) -> tuple[int, str, bool, bytes]:
        deadline = time.monotonic() + self.limits.timeout_s
        try:
            server.request(args, env)
        except _WorkerDied:  # it died since the last run (it checked alive just now: a rare race)
            self._state.stop_server()
            return -signal.SIGKILL, "[sandbox: the pytest worker died before the run; it restarts]\n", False, b""
        out = _Output(self.limits.max_output)
        try:
            reply = server.reply(out, deadline)
        except BaseException:  # e.g. KeyboardInterrupt: its late reply must not pass for the next run's
            self._state.stop_server()
            raise
        report = server.report.take()
        if reply is not None and type(reply.get("rc")) is int:
            return reply["rc"], out.text(), False, report
        why = server.cut
        self._state.stop_server()  # hung, too big, or died: its whole namespace goes; the next run starts a new one
        rc = -signal.SIGKILL if why else server.proc.returncode
        note = _cut_note(why, self.limits.timeout_s) if why else f"\n[sandbox: the pytest worker died ({rc})]\n"
        return rc, out.text() + note, why == "timeout", report
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


def diff_paths(diff: str) -> list[str]:
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


_BAD_NAME = re.compile(r'["\\\x00-\x1f\x7f]')


def _saved(repo: Path, paths: list[str]) -> dict:
    """What each path is now, to put back if a patch fails half-way: (mode, bytes) of a file, else None."""
    saved = {}
    for p in paths:
        target = repo / p
        st = os.lstat(target) if os.path.lexists(target) else None
        saved[p] = (stat.S_IMODE(st.st_mode), target.read_bytes()) if st and stat.S_ISREG(st.st_mode) else None
    return saved


def _restore(repo: Path, saved: dict, dirs_before: set[str]) -> None:
    for p, state in saved.items():
        target = repo / p
        if os.path.lexists(target) and not os.path.isdir(target) or os.path.islink(target):
            os.unlink(target)
        if state is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(state[1])
            os.chmod(target, state[0])
    for dirpath, _, _ in sorted(os.walk(repo), key=lambda d: -len(d[0])):  # folders the patch made, if now empty
        if os.path.relpath(dirpath, repo) not in dirs_before:
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def _patch_tool() -> str:
    return "patch" if shutil.which("patch") else "git"


def apply_unified_diff(repo_dir: Path, diff: str) -> list[str]:
    """Apply a unified diff (git-style or plain, -p1) atomically; returns the files it touches.

    Every named path must stay inside repo_dir (no '..', no absolute path, no symlink that
    leads out) and be a plain name (no quotes, backslashes or control characters, which git writes for
    names that are not plain text); the result must be regular files (no symlink, no device). A diff that
    fails any of this, or does not apply cleanly, changes nothing and raises PatchError."""
    if not diff.strip():
        raise PatchError("empty diff")
    repo = Path(repo_dir).resolve()
    paths = diff_paths(diff)
    if not paths:
        raise PatchError("no file headers (---/+++) found in the diff")
    for p in paths:
        if _BAD_NAME.search(p):
            raise PatchError(f"unsupported file name in the diff (quotes, backslashes or control characters): {p!r}")
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
    saved = _saved(repo, paths)
    dirs_before = {os.path.relpath(d, repo) for d, _, _ in os.walk(repo)}
    try:
        for cmd in steps:
            try:
                r = subprocess.run(cmd, cwd=repo, input=diff, text=True, capture_output=True, timeout=60, env=env)
            except subprocess.TimeoutExpired:
                raise PatchError(f"{cmd[0]} timed out") from None
            if r.returncode != 0:
                raise PatchError(f"{cmd[0]} failed ({r.returncode}): {(r.stdout + r.stderr).strip()[:4000]}")
        for p in paths:
            st = os.lstat(repo / p) if os.path.lexists(repo / p) else None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise PatchError(f"{p}: the diff makes it something other than a regular file (a symlink?)")
    except BaseException:
        _restore(repo, saved, dirs_before)
        raise
    return sorted(paths)
