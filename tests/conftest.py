"""Shared pytest fixtures for the whole suite (most test modules keep their own)."""

from pathlib import Path

import pytest

from composer.env import sandbox


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
