"""Shared pytest fixtures for the whole suite (most test modules keep their own)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from composer.env import container, sandbox

REAL_RECORD = Path(__file__).resolve().parents[1] / "data/swebench-lite/marshmallow-code__marshmallow-1343.json"


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """A fresh composer cache (COMPOSER_CACHE) for one test module, offline: models and zoo artefacts it builds
    are its own, and nothing it does can reuse or poison the developer's .cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPOSER_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


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
    if container.problems(record):
        build = REAL_RECORD.parents[2] / "scripts/swebench-image/build.sh"
        subprocess.run([str(build), record["instance_id"]], check=True)
    assert container.problems(record) == []
    return record
