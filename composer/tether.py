"""Child processes that die with their parent, so a killed run leaves no server or worker behind.

    subprocess.Popen(command, preexec_fn=tether.tied())                          # a child that execs
    ProcessPoolExecutor(n, initializer=tether.die_with, initargs=(os.getpid(),))  # a spawned worker

Linux's PR_SET_PDEATHSIG: the kernel SIGKILLs the child when its parent dies, however it dies (SIGKILL
included, when no `finally`, atexit or signal handler of the parent runs). The run's chain is CLI -> papermill's
kernel -> these children: the kernel already leaves when the CLI does (ipykernel polls for its parent, the
JPY_PARENT_PID jupyter_client gives it, and exits with os._exit, skipping every `finally` that would stop them),
so it is the kernel's children that need the tie.

Two catches. The signal comes when the *thread* that started the child ends, not the process: start long-lived
children from a thread that lives as long as they should (a cell's, the main thread; a process pool's own).
And a parent that died before the child set it has already left an orphan: die_with checks its parent after.
Elsewhere than Linux (no prctl) a child is not tied.
"""

import ctypes
import functools
import os
import signal

PR_SET_PDEATHSIG = 1
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
