"""The warm path for an agent's repeated test runs on one copy: a pytest server inside the run's sandbox.

    from composer.env.containment import worker

    with worker.PytestWorker(repo, timeout_s=20) as w:   # a warm pytest for one episode's runs
        run = w.run(["tests/test_ops.py::test_mean_1"])    # the same sandbox.TestRun as a cold run, ~3x cheaper

See composer.env.containment.sandbox's docstring for how it is contained and when it falls back to cold runs.
"""

import contextlib
import inspect
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from pathlib import Path

from composer.env.containment import forkserver, sandbox
from composer.env.containment.limits import Limits, SandboxError, chown_tree
from composer.env.containment.sandbox import (TestRun, _cut_note, _drain, _kill_group, _Output, _pump, _pytest_once,
                                              _Report, _Session, _shadows, run_pytest)

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
# reap_all's kill(-1) reaches every process this one may signal: only as pid 1 of its own PID namespace is that
# nothing but its own runs' processes (as root outside one, it would be every process of the host).
if os.getpid() != 1:
    sys.exit(f"the pytest worker's server must be pid 1 of its own PID namespace, not pid {os.getpid()}")
del sys.path[0]  # the repo: preload only the host's pytest, never a module of the repo
""" + inspect.getsource(forkserver.preload_pytest) + inspect.getsource(forkserver.run_pytest) + r"""
pytest = preload_pytest()
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
    run_pytest(pytest, request["args"], [os.getcwd()])  # what `python -m pytest` puts first


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

        w = worker.PytestWorker(repo, timeout_s=20)
        run = w.run(["tests/test_ops.py::test_mean_1"])       # a TestRun, exactly as run_pytest returns
        w.pid                 # the server's pid while it runs (None before the first run and after close)
        w.fallback            # None, or why runs go through cold run_pytest instead
        w.close()             # also on garbage collection; `with worker.PytestWorker(repo) as w:` works

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
    namespace) nor ptrace it or read its memory (it is undumpable, and a run holds no capability: in "user-ns"
    mode it is root of its user namespace, its capabilities dropped at its exec). A run can leave files (a conftest.py)
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
        # sandbox._mode, not a copy of it: the session that launches the server reads the same (and a forced mode)
        plain = sandbox._mode() == "plain"
        self.fallback = "plain isolation mode: no PID namespace to contain a run" if plain else None
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
        inside = "/tmp" if session.mode in sandbox.OWN_ROOT_MODES else str(session.dir / "home")
        home = f"{inside}/run-{next(self._runs)}"
        if session.uid is not None:  # files the host wrote since the last run (the tools' edits) go to the run's uid
            chown_tree(self.repo, session.uid, session.uid)
        env = {"HOME": home, "TMPDIR": home, "COMPOSER_SANDBOX_REPORT_FD": str(server.report_fd)}
        try:
            return _pytest_once(self.repo, test_ids, self.limits.timeout_s, session.plugin_dir,
                                lambda args, extra: self._exchange(server, args, {**extra, **env}))
        finally:
            if session.mode not in sandbox.OWN_ROOT_MODES:  # else in the private /tmp, gone with the server
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
