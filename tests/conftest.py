"""Shared pytest fixtures for the whole suite (most test modules keep their own)."""

import fcntl
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from composer.env import container, sandbox

REAL_RECORD = Path(__file__).resolve().parents[1] / "data/swebench-lite/marshmallow-code__marshmallow-1343.json"
# The slowest files, slowest first (seconds of a serial fresh-clone run, 2026-12-02): make test's two workers take
# whole files in collection order (--dist loadfile --no-loadscope-reorder), so the long ones start at once and
# the short ones fill in beside them instead of one long file running alone at the end. The --durations table
# printed after every run shows when this order is out of date.
SLOWEST_FIRST = ["test_notebooks.py",  # 121
                 "test_arms.py",  # 114
                 "test_slurm.py",  # 110: smoke 004 twice, locally and through SLURM
                 "test_prime.py",  # 105
                 "test_collect.py",  # 80
                 "test_env_container.py",  # 75
                 "test_env_swebench.py",  # 30, +90 generating the report zoo's tasks where .cache has none
                 "test_replay.py",  # 67
                 "test_bench_env.py",  # 46
                 "test_install.py",  # 41
                 "test_bench_ab.py",  # 39
                 "test_bench_teachers.py",  # 26
                 "test_tether.py"]  # 25


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


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
