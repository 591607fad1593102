"""Child processes that die with their parent, so a killed run leaves no server or worker behind.

    subprocess.Popen(command, preexec_fn=tether.tied())                          # a child that execs
    ProcessPoolExecutor(n, initializer=tether.die_with, initargs=(os.getpid(),))  # a spawned worker
    with tether.reaping(): ...          # `composer run`: no descendant outlives it (Ctrl-C, SIGTERM, an error)

Linux's PR_SET_PDEATHSIG: the kernel SIGKILLs the child when its parent dies, however it dies (SIGKILL
included, when no `finally`, atexit or signal handler of the parent runs). The run's chain is CLI -> papermill's
kernel -> these children: the kernel already leaves when the CLI does (ipykernel polls for its parent, the
JPY_PARENT_PID jupyter_client gives it, and exits with os._exit, skipping every `finally` that would stop them),
so it is the kernel's children that need the tie.

Two catches. The signal comes when the *thread* that started the child ends, not the process: start long-lived
children from a thread that lives as long as they should (a cell's, the main thread; a process pool's own).
And a parent that died before the child set it has already left an orphan: die_with checks its parent after.
Elsewhere than Linux (no prctl) a child is not tied.

A library's own children are out of reach of both: verifiers starts each rollout's harness program in a session of
its own, so killing the run's process group left it running, reparented to init, its server gone. `reaping` marks
the run's environment (MARK, a fresh value each time), which every descendant inherits wherever it is reparented,
and when the run ends by any way but SIGKILL (a return, an exception, Ctrl-C, SIGTERM) stops every process of this
user that carries the mark or descends from the run: SIGTERM, then SIGKILL after REAP_GRACE_S. A process started
with an environment of its own carries no mark; it is stopped only while its parent is still in the run's tree.
"""

import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading
import uuid

import psutil

PR_SET_PDEATHSIG = 1
MARK = "COMPOSER_RUN_MARK"
REAP_GRACE_S = 5.0
# Loaded here, in the parent: dlopen in a child forked from a threaded process could wait on a lock forever.
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def die_with(parent: int) -> None:
    """In a child of `parent`: be killed when it dies; exit now if it already has."""
    if _prctl is not None and _prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # reparented before the line above: no death signal will ever come
        os._exit(1)


def tied():
    """A preexec_fn for subprocess.Popen: the child dies with this process."""
    return functools.partial(die_with, os.getpid())


@contextlib.contextmanager
def reaping():
    """Mark this process's environment and stop every marked process and descendant when the block ends (module
    doc); SIGTERM ends the block as SystemExit(143), so the stop runs then too."""
    previous_mark = os.environ.get(MARK)
    os.environ[MARK] = mark = f"{os.getpid()}-{uuid.uuid4().hex}"
    main = threading.current_thread() is threading.main_thread()  # only the main thread may set a handler
    previous = signal.signal(signal.SIGTERM, _exit_on_term) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        stop_marked(mark)
        if previous_mark is None:
            os.environ.pop(MARK, None)
        else:
            os.environ[MARK] = previous_mark


def _exit_on_term(signum, frame):
    sys.exit(128 + signum)


def stop_marked(mark: str, grace_s: float = REAP_GRACE_S) -> list[int]:
    """SIGTERM this process's descendants and every other process carrying `mark` in its environment, SIGKILL those
    alive after grace_s; their pids."""
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True)}
    for p in psutil.process_iter(["environ"]):
        if p.pid != me.pid and (p.info["environ"] or {}).get(MARK) == mark:
            found.setdefault(p.pid, p)
    procs = list(found.values())
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return sorted(found)
