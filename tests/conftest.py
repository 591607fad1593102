"""Shared pytest fixtures for the whole suite (most test modules keep their own)."""

import pytest


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """A fresh composer cache (COMPOSER_CACHE) for one test module, offline: models and zoo artefacts it builds
    are its own, and nothing it does can reuse or poison the developer's .cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPOSER_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield
