"""Run untrusted Python (an agent's edits, a task's tests) in a contained, bounded subprocess.

    from composer.env.containment import sandbox

    run = sandbox.run_pytest(repo, ["tests/test_ops.py::test_mean_1"], timeout_s=20)
    run.outcomes                    # {"tests/test_ops.py::test_mean_1": False}
    rc, out, timed_out = sandbox.run_python(repo, ["-c", "print(1)"])
    sandbox.isolation()                      # what this host enforces (goes into reports)
    sandbox.guarantees()                     # what each containment mode holds, as booleans

Beside it: composer.env.containment.limits (the bounds of a run: Limits, its own uid, its memory cgroup),
composer.env.containment.worker (PytestWorker: a warm pytest for one episode's runs), composer.env.containment.patches
(paths inside a copy, diffs applied whole or not at all), composer.env.containment.forkserver (fresh sandboxes with
pytest preloaded).

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
  (composer.env.containment.forkserver: a trusted process with pytest imported that builds the same `layout` itself
  for each run), other runs through bwrap. Its filesystem is built from nothing: the
  system's /usr (and /bin, /lib... links), a few /etc files (the loader cache, passwd, group, localtime;
  not /etc/shadow), the Python installation, all read-only; a fresh /proc and a minimal /dev; a private
  size-limited tmpfs on /tmp and /dev/shm (`tmp_mb`, gone with the run); the outcome plugin read-only;
  and its repository copy read-write. Nothing else exists for it: no other episode's copy, no host
  /tmp, no host socket, no /root, no /work. It runs as a uid of its own (`Uids`: unique among all live
  sandboxes on the host, whatever process made them, so never shared and never wrapped), with no
  capability and no_new_privs, as pid 1 of its PID namespace (so the whole tree dies with it), and
  with the memory of its whole process tree capped by a cgroup (`memory_mb`; cgroup v2 where the
  memory controller can be delegated to a child, else the v1 memory hierarchy where writable; the mode
  `isolation()["memory"]` names; where neither is writable, RLIMIT_AS per process and RLIMIT_NPROC
  bound the tree to memory_mb x max_procs). tmpfs pages count against that cgroup too.
- "user-ns" (Linux, no root or no bubblewrap, user namespaces): `unshare --user --map-root-user` with new mount,
  network, IPC, UTS and PID namespaces, where a launcher (forkserver.enter_and_exec) builds the same `layout` as
  the mapped root and execs the run without a capability: the same filesystem as "root-ns" (grading's files, the
  checkout, the cache and other episodes are not there; the plugin and a grading copy are read-only binds it cannot
  remount), but no uid of its own (it is root of its namespace, the caller outside), no memory cgroup, and
  RLIMIT_NPROC (which counts the uid's threads, and which root ignores) the caller's thread count plus `max_procs`.
- "plain" (anything else): rlimits and the process-group kill only. No network isolation; a child that
  calls setsid() survives the timeout kill; as root RLIMIT_NPROC is not enforced at all. Not contained: the run
  reads every file the caller can, so grading refuses to run there (`grading_refusal`) unless a smoke run opts in.

Outcomes. Per-test outcomes come from a small pytest plugin (composer/env/containment/sandbox_plugin.py, its module name
suffixed per session) loaded with `-p` that sends each report's node id and phase down a pipe, each line
carrying a per-run token; the plugin takes the pipe's number and the token out of the environment when pytest
loads it, before any conftest or test module is imported, and closes its run with an end line. pytest is
pinned to the repository's own configuration file (`-c`, chosen by the trusted side), `--rootdir` and
`--confcutdir` are the repository, so no pytest.ini or conftest.py outside it steers a run. What this cannot
stop: code imported by the tests runs in the same process as the plugin, so it can patch pytest or find the pipe
and the token in memory. Grading therefore
also resets every file that steers a test run to the base (composer.env.defences.grading), plants canaries among the
tests (composer.env.defences.canaries), scans the changed source files (composer.env.defences.tampering), and runs with
`grading=True`: the values the tests compare made plain (composer/env/containment/plain_values.py) and the repository
copy read-only to the run. xfail counts as a pass and skip as a failure, as in SWE-bench's log parsers.

`PytestWorker` is the warm path for an agent's repeated test runs on one copy: a server started once
inside the same sandbox (pid 1 of its namespaces, pytest imported) forks one child per run and kills every
other process of its namespace after each; a run past the timeout takes the whole server down and the
next run starts a new one. It needs a PID namespace ("root-ns" or "user-ns"); in "plain" mode, or when the
server cannot start, it falls back to cold run_pytest (see its docstring). Where cold runs start from the
fork server (`forked_runs()`), they cost about what a warm run does, and CodingEnv uses no worker. Grading
never goes through a worker: a submission is graded by a cold run in a fresh sandbox on a fresh copy
(composer.env.defences.grading).
"""

import contextlib
import functools
import json
import logging
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from composer.env.containment import forkserver
from composer.env.containment.limits import (FILE_LIMIT_MB, UID_BASE, Cgroup, Limits, SandboxError, Uids,
                                             chown_tree, memory_cgroup, own_task_count, readable_tree, scrubbed_env,
                                             tree_size)
from composer.env.containment.patches import read_regular, safe_path

WATCH_S = 0.2  # how often a run's repository size is checked
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group", "nsswitch.conf",
             "hosts", "alternatives")

PLUGIN_NAME = "_composer_sandbox_plugin"  # + each session's own suffix (plugin_name): no repository file can shadow it
# Loaded with -p, so imported before any conftest or test module (composer/env/containment/sandbox_plugin.py; see the
# module docstring for what remains possible from inside the test process).
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


# --- isolation mode ------------------------------------------------------------------------


def _python_dirs() -> list[str]:
    """The Python installation a child needs (the venv and the interpreter it was made from), outermost only."""
    dirs = {os.path.realpath(d) for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                           os.path.dirname(os.path.realpath(sys.executable)))}
    dirs |= {os.path.abspath(d) for d in (sys.prefix, sys.base_prefix)}  # as the child's PATH names them
    dirs = {d for d in dirs if not d.startswith("/usr/")}
    return sorted(d for d in dirs if not any(d.startswith(o + os.sep) for o in dirs))


def layout(repo: Path, plugin_dir: Path, tmp_mb: int, writable: bool = True) -> list[tuple]:
    """A run's filesystem, built from nothing, as a list of operations in order: ("symlink", target, path),
    ("dir", path) (mode 0755), ("ro", path) / ("rw", path) (a bind of the host's path at the same place),
    ("dev",) (null, zero, full, random, urandom, tty), ("proc",), ("tmpfs", path, bytes) (mode 1777).
    The repository copy is bound read-only unless `writable` (a grading run's is not). In "root-ns" bubblewrap
    carries it out for cold runs and PytestWorkers (`_bwrap`), composer.env.containment.forkserver for grading
    runs; in "user-ns" the forkserver module's launcher (`enter_and_exec`): one description, three executors."""
    ops = [("symlink", os.readlink(d), d) if os.path.islink(d) else ("ro", d) for d in SYSTEM_DIRS
           if os.path.islink(d) or os.path.isdir(d)]
    ops += [("ro", f"/etc/{name}") for name in ETC_FILES if os.path.exists(f"/etc/{name}")]
    ops += [("proc",), ("dev",), ("tmpfs", "/tmp", tmp_mb * 2**20), ("tmpfs", "/dev/shm", tmp_mb * 2**20)]
    made = {"/", "/tmp", "/dev", "/dev/shm", "/proc", "/etc", *SYSTEM_DIRS}
    own = [("ro", str(plugin_dir)), ("rw" if writable else "ro", str(repo))]
    for how, d in [("ro", d) for d in _python_dirs()] + own:
        for parent in reversed(Path(d).parents):  # made 0755: the run's uid must pass through them
            if str(parent) not in made:
                made.add(str(parent))
                ops.append(("dir", str(parent)))
        ops.append((how, d))
    return ops


def _bwrap(repo: Path, plugin_dir: Path, tmp_mb: int, writable: bool) -> list[str]:
    """bubblewrap's arguments for `layout` (bwrap would make implicit parent folders 0700: they are explicit)."""
    args = ["bwrap", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session"]
    for op in layout(repo, plugin_dir, tmp_mb, writable):
        args += {"symlink": lambda: ["--symlink", op[1], op[2]], "ro": lambda: ["--ro-bind", op[1], op[1]],
                 "rw": lambda: ["--bind", op[1], op[1]], "dir": lambda: ["--perms", "0755", "--dir", op[1]],
                 "dev": lambda: ["--dev", "/dev"], "proc": lambda: ["--dir", "/proc"],  # unshare --mount-proc mounts it
                 "tmpfs": lambda: ["--perms", "1777", "--size", str(op[2]), "--tmpfs", op[1]]}[op[0]]()
    return [*args, "--chdir", str(repo)]


def _setpriv(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--pdeathsig=SIGKILL"]  # setuid clears bwrap's pdeathsig


PID_NS = ["--pid", "--fork", "--kill-child", "--mount-proc"]
OWN_ROOT_MODES = ("root-ns", "user-ns")  # where a run's filesystem is `layout`, built from nothing


def _ns_prefix(mode: str, uid: int | None, repo: Path, plugin_dir: Path, tmp_mb: int,
               writable: bool = True) -> list[str]:
    """The launcher chain. In "root-ns": bwrap (mount, network, IPC, UTS namespaces) runs unshare for the PID
    namespace, so the run's interpreter is pid 1 there (unkillable from inside, and its death ends the whole
    tree) while unshare's --kill-child still reaches it when the chain above dies (bwrap's --as-pid-1 would
    make it the parent-death signal's target as a namespace init, which the kernel does not deliver). In
    "user-ns" (no root or no bubblewrap): unshare makes a user namespace whose root is the caller, and mount,
    network, IPC, UTS and PID namespaces owned by it, where the launcher (forkserver.enter_and_exec: python -I, so
    no file of the repository or the environment steers it) builds the same `layout` on a folder of the session
    and execs the run with no capability: without it the run would read every file the caller can, grading's
    probes, task records and the checkout among them."""
    if mode == "root-ns":
        return [*_bwrap(repo, plugin_dir, tmp_mb, writable), "--", "unshare", *PID_NS, "--", *_setpriv(uid), "--",
                "env", "-u", "PWD", "-u", "OLDPWD", "--"]  # bwrap sets both (OLDPWD: the caller's folder)
    if mode == "user-ns":
        own_root = json.dumps(layout(repo, plugin_dir, tmp_mb, writable))
        return ["unshare", "--user", "--map-root-user", "--mount", "--net", "--ipc", "--uts", "--pid", "--fork",
                "--kill-child", "--", sys.executable, "-I", forkserver.__file__, "--enter",
                str(plugin_dir.parent / "root"), own_root, "--"]
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
            (Path(tmp) / "plugin").mkdir()
            argv = [*_ns_prefix(mode, UID_BASE - 1, Path(tmp), Path(tmp) / "plugin", 1), sys.executable, "-c",
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
    namespace), private_files (its own filesystem: host files out of its reach, grading's among them, and the plugin
    and a grading copy out of its write reach), own_uid (a uid of its own, unique among live sandboxes),
    no_network (its own network namespace), pid_namespace (its tree dies with it)."""
    mode = mode or _mode()
    root = os.geteuid() == 0
    return {"process_cap": mode == "root-ns" or (mode in ("user-ns", "plain") and not root),
            "private_files": mode in OWN_ROOT_MODES,
            "own_uid": mode == "root-ns",
            "no_network": mode in ("root-ns", "user-ns"),
            "pid_namespace": mode in ("root-ns", "user-ns", "pid-ns")}


def read_only_copy() -> str:
    """The "read_only" grading layer's status here (composer.env.defences.layers): "on" where a grading run's
    repository copy is bound read-only (a filesystem of its own), else "off" and why."""
    mode = _mode()
    if guarantees(mode)["private_files"]:
        return "on"
    return f'off: the "{mode}" containment mode gives runs no filesystem of their own (the grading copy is writable)'


UNCONTAINED_GRADING = "COMPOSER_GRADE_UNCONTAINED"  # "1": grade in a mode whose runs read the caller's files


def grading_refusal(opt_in: bool = False) -> str | None:
    """Why a reward must not be graded here, or None. Grading's own files are on disk before its run (the held-out
    probes' expected values and the task records, gold patches among them, in the composer cache; the checkout), and
    only a filesystem of the run's own (`OWN_ROOT_MODES`) keeps them from the code under test: elsewhere it reads
    them and answers the probes (an attack did: 4 of 4, reward 1.0). Fails closed: graded anyway only on an explicit
    opt-in for smoke runs (`opt_in`: EnvConfig.grade_uncontained; or COMPOSER_GRADE_UNCONTAINED=1), which
    `grading_note` names in reports."""
    mode = _mode()
    if mode in OWN_ROOT_MODES or opt_in or os.environ.get(UNCONTAINED_GRADING) == "1":
        return None
    return (f'refusing to grade a reward in the "{mode}" containment mode: its test runs read every file the caller '
            "can, grading's own among them (the held-out probes' expected values and the task records in the composer "
            f"cache), so a submission could forge its reward. Missing: {_missing_for_own_root()}. Either gives runs a "
            "filesystem of their own (docs/sandbox.md). For a smoke run whose rewards train and evaluate nothing: "
            f"{UNCONTAINED_GRADING}=1 or EnvConfig(grade_uncontained=True), named in the report.")


def _missing_for_own_root() -> str:
    """What this host lacks for a mode that gives runs a filesystem of their own, and how to get it, in words."""
    if sys.platform != "linux":
        return f"Linux's mount and user namespaces (this is {sys.platform})"
    root_ns = ('bubblewrap and setpriv (apt-get install bubblewrap util-linux) for the "root-ns" mode'
               if os.geteuid() == 0 else 'root, with bubblewrap, for the "root-ns" mode')
    return (f'{root_ns}, or user namespaces for the "user-ns" mode (`unshare --user --map-root-user --mount true` '
            "must succeed: util-linux's unshare, and sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ "
            "kernel.apparmor_restrict_unprivileged_userns=0)")


def grading_note(opt_in: bool = False) -> str:
    """How rewards are graded here, for a report: contained, graded uncontained on the opt-in, or refused."""
    mode, refused = _mode(), grading_refusal(opt_in)
    if refused:
        return refused
    if mode in OWN_ROOT_MODES:
        return f"{mode}: grading's files out of the test process's reach (a filesystem of its own)"
    how = "EnvConfig(grade_uncontained=True)" if opt_in else f"{UNCONTAINED_GRADING}=1"
    return (f'UNCONTAINED ("{mode}" mode, opted in by {how}): the code under test can read grading\'s files; '
            "rewards fit for a smoke run only")


@functools.cache
def _warn_uncontained(note: str) -> None:
    """Log, once a process, that rewards are graded where the code under test reads grading's files."""
    logging.getLogger(__name__).warning("grading rewards %s", note)


@functools.cache
def _prlimit() -> str | None:
    return shutil.which("prlimit") if sys.platform == "linux" else None


def isolation() -> dict:
    """What is enforced on this host, in words fit for a report's provenance block."""
    mode = _mode()
    memory = memory_cgroup()
    return {
        "mode": mode,
        "network": "none (own network namespace)" if mode != "plain" else "not isolated",
        "processes": {"root-ns": "own PID namespace, own uid (unique among live sandboxes), no capabilities",
                      "user-ns": "own PID namespace, RLIMIT_NPROC=current threads+max_procs",
                      "plain": "process group kill" + ("; RLIMIT_NPROC not enforced (root)" if os.geteuid() == 0
                                                       else "; RLIMIT_NPROC=current threads+max_procs")}[mode],
        "filesystem": {"root-ns": "own mount namespace: system and Python read-only, private size-limited /tmp, "
                                  "the repository copy read-write, nothing else",
                       "user-ns": "own mount namespace in a user namespace whose root is the caller, no capability: "
                                  "system and Python read-only, private size-limited /tmp, the repository copy "
                                  "read-write, nothing else",
                       "plain": "the caller's rights (not contained)"}[mode],
        "memory": (f"cgroup {memory[1]} memory cap for the process tree" if mode == "root-ns" and memory
                   else "RLIMIT_AS per process only"),
        "pytest_runs": ("fork server (a fresh sandbox per run, pytest preloaded)" if forked_runs()
                        else f"cold interpreter per run{' (fork server failed: ' + _FORKSERVER.failed + ')' if _FORKSERVER.failed else ''}"),
        "rlimits": ["AS", "CPU", "FSIZE", "NPROC", "CORE"],
        "environment": sorted(scrubbed_env()),
        "grading": grading_note(),
    }


class _Session:
    """One sandbox: its scratch folder (the plugin, and HOME outside "root-ns"), its uid and memory cgroup."""

    def __init__(self, repo_dir: Path, limits: Limits, *, writable: bool = True):
        self.repo = Path(repo_dir).resolve()
        if not self.repo.is_dir():
            raise SandboxError(f"not a directory: {repo_dir}")
        self.limits, self.writable = limits, writable
        self.mode = _mode()
        if self.mode == "root-ns" and os.geteuid() != 0:  # only forced: the probe never picks it without root
            raise SandboxError(f'the "root-ns" mode gives each run a uid of its own and needs root; this is uid '
                               f"{os.geteuid()}")
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
                self.uid = Uids.take()
                st = self.repo.stat()
                self.owner = (st.st_uid, st.st_gid)
                if self.writable:
                    chown_tree(self.repo, self.uid, self.uid)
                else:  # the run's uid, neither owner nor privileged, reads and enters it and writes nothing
                    readable_tree(self.repo)
                if memory_cgroup():
                    self.cgroup = Cgroup(f"composer-{self.uid}", self.limits.memory_mb)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.uid is not None and self.writable:
                with contextlib.suppress(FileNotFoundError):  # the repo may be gone already
                    chown_tree(self.repo, *self.owner)
        finally:
            if self.cgroup is not None:
                self.cgroup.remove()
            if self.uid is not None:
                Uids.give_back(self.uid)
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def plugin_dir(self) -> Path:
        return self.dir / "plugin"

    def env(self) -> dict:
        """The child's variables: scrubbed, HOME/TMPDIR in the private /tmp (a filesystem of its own) or the session
        folder."""
        return scrubbed_env("/tmp" if self.mode in OWN_ROOT_MODES else self.dir / "home")

    def pytest_env(self) -> dict:
        """env() with the outcome plugin importable (plugin autoload off: the host venv's plugins are not the
        repo's, and loading them costs 0.3 s a run)."""
        return {**self.env(), "PYTHONPATH": str(self.plugin_dir), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def rlimits(self) -> list[tuple[str, int]]:
        """(resource name without RLIMIT_, value) for every rlimit a run gets."""
        lim = self.limits
        nproc = lim.max_procs if self.mode == "root-ns" else own_task_count() + lim.max_procs
        return [("AS", lim.memory_mb * 2**20), ("CPU", lim.cpu_s or int(lim.timeout_s) + 1),
                ("FSIZE", FILE_LIMIT_MB * 2**20), ("NPROC", nproc), ("CORE", 0)]

    def command(self, args: list[str]) -> tuple[list[str], object]:
        """(argv, preexec_fn) for `python *args` in this sandbox under the rlimits. util-linux prlimit sets
        them where it exists (preexec_fn is then None): a preexec_fn makes subprocess fork() the whole
        caller instead of vfork(), ~30 ms per run from a process with transformers loaded."""
        lim = self.limits
        limits = [(getattr(resource, f"RLIMIT_{name}"), name.lower(), value) for name, value in self.rlimits()]
        argv = [*_ns_prefix(self.mode, self.uid, self.repo, self.plugin_dir, lim.tmp_mb, self.writable),
                sys.executable, *args]
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
        size, count = tree_size(self.repo, self.limits.max_files)
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


def run_pytest(repo_dir: Path, test_ids: list[str], *, grading: bool = False, known_classes=(), changed=(),
               uncontained_ok: bool = False, **limits) -> TestRun:
    """Run pytest once on `test_ids` (all collected tests when empty) under `Limits(**limits)`; outcome per node id.
    grading: a submission's graded run: the tests see the code under test's values made plain
    (composer/env/containment/plain_values.py; known_classes: "module:qualname" of the classes the base commit defines,
    changed: the files the submission's diff changed, never trusted as the tests' own),
    and the repository read-only to the run (its code cannot rewrite the graded test files or the canaries in them).
    A grading run is refused (SandboxError, `grading_refusal`) where the run would read grading's files, unless
    `uncontained_ok` (or COMPOSER_GRADE_UNCONTAINED=1) opts in for a smoke run, which is logged.

    pytest gets the ids' files and the plugin keeps just the ids, so one missing id does not
    abort the run (pytest alone would exit 4 and run nothing). A file id ("tests/test_x.py")
    passes when all its tests do. A requested id that never ran (not collected, timeout,
    crash) maps to False and `error` says why; error is None only when pytest finished
    normally and every requested id ran."""
    if grading and (refused := grading_refusal(uncontained_ok)):
        raise SandboxError(refused)
    if grading and _mode() not in OWN_ROOT_MODES:
        _warn_uncontained(grading_note(uncontained_ok))
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

        return _pytest_once(s.repo, test_ids, s.limits.timeout_s, s.plugin_dir, runner, grading, known_classes,
                            changed)


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
    """One pytest run through the fork server (composer.env.containment.forkserver) in a fresh sandbox of `s`'s
    layout."""
    lim = s.limits
    out_r, out_w = os.pipe()
    status_r, status_w = os.pipe()
    report = _Report()
    contained = s.mode == "root-ns"
    request = {"layout": layout(s.repo, s.plugin_dir, lim.tmp_mb, s.writable) if contained else None, "uid": s.uid,
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


def config_file(repo: Path, plugin_dir: Path) -> Path:
    """The configuration file pytest would take in the repository root (its rules, root only), else an empty one."""
    for name, section in CONFIG_FILES:
        text = read_regular(repo / name, 1 << 20)
        if text is not None and section.encode() in text:
            return repo / name
    return plugin_dir / "empty.ini"


def _pytest_once(repo: Path, test_ids: list[str], timeout_s: float, plugin_dir: Path, runner,
                 grading: bool = False, known_classes=(), changed=()) -> TestRun:
    """One pytest run through `runner(pytest_args, env) -> (rc, output, timed_out, report bytes)`, cold or warm
    alike: the same arguments, the same plugin, the same outcome rules."""
    start = time.monotonic()
    files = [f for f in dict.fromkeys(t.split("::")[0] for t in test_ids) if _exists_inside(repo, f)]
    token = secrets.token_hex(16)
    env = {"COMPOSER_SANDBOX_TOKEN": token}
    if grading:
        env["COMPOSER_SANDBOX_PLAIN"] = plugin_name(plugin_dir, PLAIN_NAME)
        env["COMPOSER_SANDBOX_KNOWN_CLASSES"] = json.dumps(sorted(known_classes))
        env["COMPOSER_SANDBOX_CHANGED"] = json.dumps(sorted(changed))
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
