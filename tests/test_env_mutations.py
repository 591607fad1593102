"""Tests for composer.env.embedded.mutations: every family of bugs makes a valid task."""

import json

import pytest

from composer.env.embedded import mutations, tasks


@pytest.mark.parametrize("family", mutations.MUTATIONS)
def test_every_mutation_family_yields_a_valid_task(family):
    (r,) = tasks.generate(1, seed=5, difficulty=tasks.Difficulty(families=(family,)))
    assert tasks.describe(r)["family"] == family and json.loads(r["FAIL_TO_PASS"])


def test_generate_builds_the_catalogue_before_its_threads(monkeypatch):
    # CPython 3.11's ast.parse is not thread-safe: a cold catalogue parsed by every worker at once failed
    # with "AST constructor recursion depth mismatch" in a fresh process (it did, in CI).
    pools = []

    class Pool(tasks.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(mutations.catalogue.cache_info().currsize)
            super().__init__(*args, **kwargs)

    mutations.catalogue.cache_clear()
    monkeypatch.setattr(tasks, "ThreadPoolExecutor", Pool)
    assert len(tasks.generate(1, seed=3, workers=2)) == 1
    assert pools == [1]  # the catalogue was already built when the pool started
