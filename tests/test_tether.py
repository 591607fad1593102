"""composer.tether: children die with their parent, and a killed `composer run` leaves no process behind.

    .venv/bin/pytest tests/test_tether.py
"""

import contextlib
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
