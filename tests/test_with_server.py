"""scripts/with-server.sh, the live 004 launcher that gives each job its own vLLM server: here a loopback HTTP server
stands in for the vLLM server (the script only starts it, waits for its URL, and stops it; tests/test_vllm_cpu.py runs
it with the real one).

    .venv/bin/pytest tests/test_with_server.py
"""

import subprocess
import sys
import urllib.request

import pytest
from ports import free_port

from composer.paths import ROOT

SCRIPT = str(ROOT / "scripts" / "with-server.sh")


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
        return True
    except OSError:
        return False


def test_the_command_runs_while_the_server_answers_and_the_server_stops_with_it(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    probe = f"import urllib.request; print(urllib.request.urlopen({url!r}).status)"
    done = subprocess.run([SCRIPT, f"{sys.executable} -m http.server {port} --bind 127.0.0.1", url,
                           sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200"  # the command reached the server
    assert not _answers(url)  # and the server is gone with the command


def test_the_commands_own_status_comes_back_and_the_server_still_stops(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    done = subprocess.run([SCRIPT, f"{sys.executable} -m http.server {port} --bind 127.0.0.1", url,
                           sys.executable, "-c", "raise SystemExit(5)"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 5 and not _answers(url)


@pytest.mark.parametrize("server, wait, why", [
    ("echo 'CUDA out of memory'; exit 1", "60", "exited"),
    ("echo 'loading the model'; sleep 600", "3", "did not answer"),
])
def test_a_server_that_dies_or_never_answers_stops_the_job_with_its_log(tmp_path, server, wait, why):
    done = subprocess.run([SCRIPT, server, f"http://127.0.0.1:{free_port()}/health/", "touch", "ran"],
                          capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                                                                               "COMPOSER_SERVER_WAIT_S": wait},
                          timeout=120)
    assert done.returncode == 3 and why in done.stderr and server.split("'")[1] in done.stderr
    assert not (tmp_path / "ran").exists()  # the command never ran


def test_without_a_command_it_says_how_to_call_it():
    done = subprocess.run([SCRIPT, "true", "http://127.0.0.1:1/"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr
