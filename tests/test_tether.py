"""composer.tether: children die with their parent, and a killed `composer run` leaves no process behind.

    .venv/bin/pytest tests/test_tether.py
"""

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from composer.paths import ROOT

POPEN_PARENT = """
import subprocess, sys, time
from composer import tether
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=tether.tied())
print(child.pid, flush=True)
time.sleep(120)
"""

POOL_PARENT = """
import multiprocessing, os, time
from concurrent.futures import ProcessPoolExecutor
from composer import tether
with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=tether.die_with,
                         initargs=(os.getpid(),)) as pool:
    print(pool.submit(os.getpid).result(), flush=True)  # the worker then idles, waiting for the next job
    time.sleep(120)
"""


def _alive(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of procs still running after up to `timeout` s (a zombie is dead: only its exit status is left)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _kill(procs: list[psutil.Process]) -> None:
    """Leave nothing behind when a check failed."""
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


@pytest.mark.parametrize("parent", [POPEN_PARENT, POOL_PARENT], ids=["popen", "spawned-pool-worker"])
def test_a_child_dies_when_its_parent_is_sigkilled(parent):
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(proc.stdout.readline()))
    try:
        proc.kill()  # no finally, atexit or handler runs in the parent
        proc.wait()
        assert not _alive([child], timeout=60), "the child outlived its SIGKILLed parent"  # returns once it is gone
    finally:
        _kill([child])
        proc.stdout.close()


def test_a_child_whose_parent_already_died_exits():
    # Reparented before it could ask for the signal, which would then never come: it leaves at once.
    # (Its own PID stands for "not my parent any more".)
    code = "import os; from composer import tether; tether.die_with(os.getpid()); print('still here')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""


def _listening_server(cli: psutil.Process) -> psutil.Process | None:
    """The run's `composer serve` once it accepts connections."""
    for p in cli.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "serve" in p.cmdline() and any(c.status == psutil.CONN_LISTEN for c in p.net_connections("tcp")):
                return p
    return None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_killed_run_leaves_no_process_behind(tmp_path, sig):
    """CLI -> papermill's kernel -> 001's offline teacher server: kill the CLI while the server is up."""
    reports = tmp_path / "reports"
    reports.mkdir()
    previous = {f"001-teacher-replay-cost.{ext}": f"the previous {ext}" for ext in ("json", "html")}
    for name, text in previous.items():
        (reports / name).write_text(text)
    # One step of one trace; time_scale 1: the profiles' own latencies keep the server busy for seconds once up.
    command = [sys.executable, "-m", "composer", "run", "001", "--reports-dir", str(reports), "-p", "max_traces=1",
               "-p", "steps_per_trace=1", "-p", "time_scale=1.0", "-p", f"run_dir={tmp_path / 'run'}"]
    with open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    cli, tree = psutil.Process(proc.pid), []
    try:
        deadline = time.monotonic() + 600  # a hang guard: the poll ends once the server listens
        while (server := _listening_server(cli)) is None:
            assert proc.poll() is None and time.monotonic() < deadline, (
                f"no teacher server came up (exit {proc.returncode}): {(tmp_path / 'stderr').read_text()[-3000:]}")
            time.sleep(0.1)
        tree = cli.children(recursive=True)
        assert len(tree) >= 2 and server in tree  # the kernel and the server, at least
        proc.send_signal(sig)
        assert proc.wait(timeout=120) != 0  # hang guards: each returns as soon as the process is gone
        alive = _alive(tree, timeout=60)
        assert not alive, f"still running after the CLI died: {[' '.join(p.cmdline()[:5]) for p in alive]}"
        assert {name: (reports / name).read_text() for name in previous} == previous
    finally:
        _kill([cli, *tree])
        proc.wait()


REAPED = """
import os, signal, subprocess, sys, time
from composer import tether
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal (a background job ignores it)
def spawn():
    # like verifiers' harness program: a session of its own, and an orphan reparented to init once bash exits
    own = subprocess.Popen(["sleep", "600"], start_new_session=True)
    orphan = subprocess.run(["bash", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                            text=True).stdout.strip()
    while os.getsid(int(orphan)) != int(orphan):  # setsid has not run yet: it is still in this process group
        time.sleep(0.01)
    print(own.pid, orphan, flush=True)
    time.sleep(600)
if sys.argv[1] == "reaping":
    with tether.reaping():
        spawn()
else:
    spawn()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_run_stops_the_processes_a_library_started_in_sessions_of_their_own(sig):
    """`composer run` ends (SIGTERM to its process group, or Ctrl-C's SIGINT) with nothing left: a child in a
    session of its own and an orphan reparented to init are stopped by their inherited mark (tether.reaping).
    Without reaping both outlive the run: what killing `make reports` during 002b left behind."""
    left = {}
    for mode in ("reaping", "bare"):
        proc = subprocess.Popen([sys.executable, "-c", REAPED, mode], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
        os.killpg(proc.pid, sig)
        proc.wait(timeout=60)
        procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
        left[mode] = _alive(procs, timeout=10 if mode == "reaping" else 1)
        _kill(left[mode])
    assert left["reaping"] == [] and len(left["bare"]) == 2
