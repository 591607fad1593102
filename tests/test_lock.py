"""composer.lock: one run at a time in a run directory, released however its holder ends.

    .venv/bin/pytest tests/test_lock.py
"""

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from composer import replay
from composer.bench.replay import synthetic_traces
from composer.lock import RunDirBusy, run_lock
from composer.paths import ROOT
from composer.teachers import TeacherSpec

HOLD = "import sys, time; from composer.lock import run_lock\nwith run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)"


def holder(directory) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_second_run_is_refused_naming_the_holder_until_it_dies(tmp_path):
    proc = holder(tmp_path)
    try:
        with pytest.raises(RunDirBusy, match=rf"{tmp_path} is in use by another run \(pid {proc.pid} on .*-c import sys"):
            with run_lock(tmp_path):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no clean exit: the kernel still drops its lock
        proc.wait()
    with run_lock(tmp_path):
        assert str(os.getpid()) in (tmp_path / ".lock").read_text()


def test_replay_holds_its_run_directory(tmp_path):
    spec = TeacherSpec(name="t", model="openai/gpt-5", base_url="http://127.0.0.1:9/v1", api_key_env="UNSET_KEY")
    with run_lock(tmp_path), pytest.raises(RunDirBusy, match="in use by another run"):
        asyncio.run(replay.replay(synthetic_traces(1, 2), [spec], tmp_path))
    assert not (tmp_path / replay.QUERIES_FILE).exists()  # refused before anything was written or sent


def test_the_lock_is_released_on_an_exception(tmp_path):
    with pytest.raises(KeyError), run_lock(tmp_path):
        raise KeyError("x")
    with run_lock(tmp_path):  # the lock never waits: were it still held, this would raise RunDirBusy
        pass
