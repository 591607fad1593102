"""composer.env.containment.forkserver: fresh sandboxes with pytest preloaded, tied to the process that uses them.

    .venv/bin/pytest tests/test_env_forkserver.py
"""

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from composer.env.containment import limits, sandbox

pytestmark = pytest.mark.skipif(not sandbox.forked_runs(), reason="the fork server needs root and bubblewrap "
                                                                  "(.ci/run installs bubblewrap)")


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "repo" / "tests").mkdir(parents=True)
    (tmp_path / "repo" / "tests" / "test_p.py").write_text(textwrap.dedent("""
        import os

        def test_probe():
            status = open("/proc/self/status").read()
            caps = [line.split()[1] for line in status.splitlines() if line.startswith(("CapEff", "CapPrm", "CapBnd"))]
            open("probe.txt", "w").write(repr((os.getpid(), os.getuid(), caps, sorted(os.listdir("/")))))
    """))
    return tmp_path / "repo"


def test_a_run_is_pid_1_of_its_namespace_with_its_own_uid_and_no_capability(repo, layout_tops):
    run = sandbox.run_pytest(repo, ["tests/test_p.py::test_probe"])
    assert run.error is None and run.outcomes == {"tests/test_p.py::test_probe": True}
    pid, uid, caps, root = eval((repo / "probe.txt").read_text())
    assert pid == 1 and uid >= limits.UID_BASE and set(caps) == {"0000000000000000"}
    assert set(root) == layout_tops(repo)  # nothing of the host's / but the layout's mount points
    assert sandbox._FORKSERVER.failed is None


def test_the_server_outlives_the_thread_that_started_it(repo):
    sandbox._FORKSERVER.close()
    done = []
    t = threading.Thread(target=lambda: done.append(sandbox.run_pytest(repo, ["tests/test_p.py::test_probe"])))
    t.start()
    t.join()
    proc = sandbox._FORKSERVER._proc
    time.sleep(0.3)
    assert proc.poll() is None  # a pool thread ending must not take the server (and every run in flight) down
    assert sandbox.run_pytest(repo, ["tests/test_p.py::test_probe"]).error is None
    assert sandbox._FORKSERVER._proc is proc and done[0].error is None


def test_the_server_dies_with_the_process_that_started_it(repo):
    code = ("import sys; from composer.env.containment import sandbox; "
            f"sandbox.run_pytest({str(repo)!r}, []); print(sandbox._FORKSERVER._proc.pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 60  # a hang guard: the poll ends as soon as the server is gone
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid)


def test_when_the_server_cannot_run_runs_go_through_bubblewrap_and_say_so(repo, monkeypatch):
    def broken(self, request, fds):
        raise OSError("no such server")

    monkeypatch.setattr(sandbox._ForkServer, "send", broken)
    monkeypatch.setattr(sandbox._FORKSERVER, "failed", None)
    run = sandbox.run_pytest(repo, ["tests/test_p.py::test_probe"])
    assert run.error is None and run.outcomes == {"tests/test_p.py::test_probe": True}  # contained by bwrap
    assert "no such server" in sandbox._FORKSERVER.failed and not sandbox.forked_runs()
    assert "fork server failed" in sandbox.isolation()["pytest_runs"]


def _state(pid) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_repo_module_named_like_a_preloaded_one_runs_in_a_cold_interpreter(repo, monkeypatch):
    (repo / "tomllib.py").write_text("VALUE = 'the repo'\n")  # the server imported the standard library's
    (repo / "tests" / "test_m.py").write_text("import tomllib\n\ndef test_m():\n    assert tomllib.VALUE == 'the repo'\n")
    calls = []
    monkeypatch.setattr(sandbox, "_forked", lambda *a: calls.append(a))
    assert sandbox.run_pytest(repo, ["tests/test_m.py::test_m"]).outcomes == {"tests/test_m.py::test_m": True}
    assert calls == [] and "tomllib" in sandbox._FORKSERVER.modules()
