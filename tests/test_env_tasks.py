"""Tests for composer.env.embedded.tasks: exact schema, determinism, real validation, split disjointness."""

import json
import re
from pathlib import Path

import pytest

from composer.env.containment import patches, sandbox
from composer.env.embedded import mutations, tasks
from composer.env.real.swebench import validate_instance


@pytest.fixture(scope="module")
def records():
    return tasks.generate(5, seed=11)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_arguments_give_byte_identical_records(records, tmp_path):
    again = tasks.generate(3, seed=11, workers=1)  # a prefix of the same stream, validated serially
    assert json.dumps(again) == json.dumps(records[:3])
    tasks.save_jsonl(records, tmp_path / "a.jsonl")
    assert tasks.load_jsonl(tmp_path / "a.jsonl") == records
    assert (tmp_path / "a.jsonl").read_text().count("\n") == len(records)
    assert tasks.generate(2, seed=12)[0]["instance_id"] != records[0]["instance_id"]


def test_records_have_exactly_the_swebench_lite_schema(records):
    for r in records:
        assert tuple(r) == tasks.SCHEMA_FIELDS and all(isinstance(v, str) for v in r.values())
        validate_instance(r)
        f2p, p2p = json.loads(r["FAIL_TO_PASS"]), json.loads(r["PASS_TO_PASS"])
        assert f2p and len(p2p) >= 2 and not set(f2p) & set(p2p)
        assert all(re.fullmatch(r"tests/test_\w+\.py::test_\w+", t) for t in f2p + p2p)
        assert all(re.fullmatch(r"[0-9a-f]{40}", r[k]) for k in ("base_commit", "environment_setup_commit"))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["created_at"])
        assert r["repo"].startswith("composer-embedded/") and r["instance_id"].startswith("composer-embedded__")
        assert r["patch"].startswith("diff --git a/") and "\n--- a/" in r["patch"] and "\n+++ b/" in r["patch"]
        assert r["test_patch"].startswith("diff --git a/tests/") and "new file mode" in r["test_patch"]
        assert r["hints_text"] == "" and r["version"] == tasks.GENERATOR_VERSION


def test_validation_really_happened(records, tmp_path):
    for i, r in enumerate(records[:2]):
        f2p, p2p = json.loads(r["FAIL_TO_PASS"]), json.loads(r["PASS_TO_PASS"])
        buggy = sandbox.run_pytest(tasks.materialize(r, tmp_path / f"b{i}"), f2p + p2p)
        gold = sandbox.run_pytest(tasks.gold_repo(r, tmp_path / f"g{i}"), f2p + p2p)
        assert buggy.error is None and gold.error is None
        assert not any(buggy.outcomes[t] for t in f2p) and all(buggy.outcomes[t] for t in p2p)
        assert all(gold.outcomes.values())


@pytest.mark.parametrize("tool", ["patch", "git"])
def test_gold_patch_turns_the_buggy_repo_into_the_gold_repo(records, tmp_path, monkeypatch, tool):
    r = records[0]
    monkeypatch.setattr(patches, "_patch_tool", lambda: tool)
    buggy = tasks.materialize(r, tmp_path / "buggy")
    changed = patches.apply_unified_diff(buggy, r["patch"])
    assert len(changed) == 1 and changed[0].endswith(".py")
    assert tree(buggy) == tree(tasks.gold_repo(r, tmp_path / "gold"))
    assert sum(1 for line in r["patch"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")) <= 8


def test_problem_statement_shows_the_symptom_not_the_fix(records):
    for r in records:
        info = tasks.describe(r)
        statement = r["problem_statement"]
        assert info["unit"] in statement and "```python" in statement and "should" in statement
        for line in tasks._changed_lines(r["patch"]):
            assert line not in statement, (r["instance_id"], line)


def test_materialize_without_tests_is_what_an_agent_sees(records, tmp_path):
    repo = tasks.materialize(records[0], tmp_path / "r", with_tests=False)
    assert not (repo / "tests").exists() and (repo / "pyproject.toml").exists()


def test_materialize_rejects_tampered_foreign_and_unsafe_requests(records, tmp_path):
    r = records[0]
    with pytest.raises(ValueError, match=re.escape(r["instance_id"]) + ".*base_commit"):
        tasks.materialize({**r, "base_commit": "0" * 40}, tmp_path / "t")
    with pytest.raises(ValueError, match="not an embedded task.*composer.env.real.container"):
        tasks.materialize({**r, "repo": "django/django", "instance_id": "django__django-11099"}, tmp_path / "d")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        tasks.materialize(r, tmp_path / "full")


def test_train_and_test_splits_are_disjoint(records):
    sites = mutations.catalogue()
    by_split = {s: {x.key for x in sites if x.split == s} for s in tasks.SPLITS}
    assert not by_split["train"] & by_split["test"]
    for family in mutations.MUTATIONS:  # each split can draw every family
        assert all(any(x.family == family and x.split == s for x in sites) for s in tasks.SPLITS)
    test_records = tasks.generate(3, seed=11, split="test")
    train_sites = {tasks.describe(r)["site"] for r in records}
    test_sites = {tasks.describe(r)["site"] for r in test_records}
    assert train_sites <= by_split["train"] and test_sites <= by_split["test"]
    assert not {r["instance_id"] for r in records} & {r["instance_id"] for r in test_records}
    assert not {r["patch"] for r in records} & {r["patch"] for r in test_records}


def test_difficulty_knobs_shape_the_repo(tmp_path):
    d = tasks.Difficulty(n_modules=3, n_functions=2, distractors=2)
    (r,) = tasks.generate(1, seed=2, difficulty=d)
    assert tasks.describe(r)["difficulty"] == d
    repo = tasks.materialize(r, tmp_path / "r")
    modules = [p for p in (repo / r["repo"].split("/")[1]).glob("*.py") if p.name != "__init__.py"]
    assert len(modules) == 3 and len(list((repo / "tests").glob("test_*.py"))) == 3
    defined = sum(p.read_text().count("\ndef ") + p.read_text().count("\nclass ") for p in modules)
    assert defined == 3 * 2 + 2  # tested units plus untested distractors


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="split"):
        tasks.generate(1, split="dev")
    with pytest.raises(ValueError, match="families"):
        tasks.generate(1, difficulty=tasks.Difficulty(families=("typo",)))
    with pytest.raises(ValueError, match="n_modules"):
        tasks.generate(1, difficulty=tasks.Difficulty(n_modules=0))
    # One function per module: a task is one bug site, so asking for more tasks than sites fails at once
    one = tasks.Difficulty(n_functions=1, families=("constant",))
    sites = sum(s.split == "test" and s.family == "constant" for s in mutations.catalogue())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tasks, "_validate", lambda spec: pytest.fail("validated a candidate before refusing"))
        with pytest.raises(ValueError, match=f"only {sites} bug sites"):
            tasks.generate(sites + 1, split="test", difficulty=one)
