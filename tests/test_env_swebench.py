"""Tests for composer.env.real.swebench: the record contract on embedded tasks, evaluation, clear errors."""

import json
import random
from pathlib import Path

import pytest

from composer.env import tools
from composer.env.containment import sandbox
from composer.env.defences import layers, probes
from composer.env.embedded import tasks
from composer.env.real import container, swebench

HARNESS_KEYS = {"total_instances", "submitted_instances", "completed_instances", "resolved_instances",
                "unresolved_instances", "empty_patch_instances", "error_instances", "completed_ids",
                "incomplete_ids", "empty_patch_ids", "submitted_ids", "resolved_ids", "unresolved_ids",
                "error_ids", "schema_version"}  # swebench.harness.reporting.make_run_report, schema 2
REAL_PREDS = Path(__file__).resolve().parents[1] / "data/real-traces/mini-swe-agent-deepseek-chat-lite-dev/preds.json"


@pytest.fixture(scope="module")
def records():
    return tasks.generate(3, seed=21)


def pred(record, patch):
    return {"instance_id": record["instance_id"], "model_name_or_path": "test-model", "model_patch": patch}


def test_round_trip_json_jsonl_parquet(records, tmp_path):
    import pyarrow
    import pyarrow.parquet

    (tmp_path / "r.json").write_text(json.dumps(records))
    tasks.save_jsonl(records, tmp_path / "r.jsonl")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(records), tmp_path / "r.parquet")
    for name in ("r.json", "r.jsonl", "r.parquet"):
        assert swebench.load_instances(tmp_path / name) == records, name


def test_validate_instance_names_the_field_and_the_instance(records):
    r = records[0]
    assert swebench.validate_instance(r) is r
    missing = {k: v for k, v in r.items() if k != "test_patch"}
    with pytest.raises(ValueError, match=f"{r['instance_id']}.*test_patch"):
        swebench.validate_instance(missing)
    for bad in ["tests/test_x.py::test_a", "[1, 2]", '{"a": 1}']:
        with pytest.raises(ValueError, match=f"{r['instance_id']}.*FAIL_TO_PASS"):
            swebench.validate_instance({**r, "FAIL_TO_PASS": bad})
    with pytest.raises(ValueError, match="PASS_TO_PASS.*string"):
        swebench.validate_instance({**r, "PASS_TO_PASS": ["tests/test_x.py::test_a"]})


def test_evaluate_resolves_gold_and_not_empty_broken_or_wrong_patches(records, tmp_path):
    gold, empty, wrong = records
    readme = (tasks.materialize(wrong, tmp_path / "w", with_tests=False) / "README.md").read_text()
    harmless = tasks._git_diff({"README.md": readme}, {"README.md": readme + "More.\n"})
    preds = [pred(gold, gold["patch"]), pred(empty, ""), pred(wrong, harmless)]
    report = swebench.evaluate(preds, records, run_id="t", max_workers=2)
    assert HARNESS_KEYS <= set(report) and report["schema_version"] == 2
    assert report["resolved_ids"] == [gold["instance_id"]]
    assert report["empty_patch_ids"] == [empty["instance_id"]]
    assert report["unresolved_ids"] == [wrong["instance_id"]]
    status = report["instances"][wrong["instance_id"]]["tests_status"]
    assert status["FAIL_TO_PASS"]["failure"] == json.loads(wrong["FAIL_TO_PASS"])
    assert status["PASS_TO_PASS"]["success"] == json.loads(wrong["PASS_TO_PASS"])
    assert report["instances"][gold["instance_id"]]["resolved"] is True

    broken = swebench.evaluate([pred(gold, "not a diff")], records, run_id="t")
    assert broken["error_ids"] == [gold["instance_id"]] and broken["incomplete_ids"] == sorted(
        r["instance_id"] for r in records[1:])
    with pytest.raises(ValueError, match="not in the dataset"):
        swebench.evaluate([{**pred(gold, ""), "instance_id": "nope"}], records, run_id="t")


def test_a_name_patch_reads_otherwise_than_grading_is_refused_and_left_out_of_the_agents_diff(records, tmp_path):
    # GNU patch writes "conftest.py x" as conftest.py, which grading would have kept as a source file, unscanned
    gold = records[0]
    planted = "--- /dev/null\n+++ b/conftest.py x\n@@ -0,0 +1 @@\n+import pytest\n"
    report = swebench.evaluate([pred(gold, gold["patch"] + planted)], records, run_id="t")["instances"]
    assert not report[gold["instance_id"]]["resolved"] and "plain name" in report[gold["instance_id"]]["error"]
    repo = tasks.materialize(gold, tmp_path / "repo", with_tests=False)
    before = tools.snapshot(repo)
    (repo / "conftest.py x").write_text("import pytest\n")  # what code run by run_tests can leave
    assert tools.repo_diff(before, repo) == ("", ["conftest.py x"])


def test_a_changed_file_longer_than_the_scan_reads_scores_0(records, monkeypatch):
    """A prediction from elsewhere has no file cap: a payload past what the scan reads would run unscanned, so the
    file scores 0 (the limit lowered here to show it on a small file); the gold patch alone still resolves."""
    gold = records[0]
    monkeypatch.setattr(layers, "SCAN_LIMIT", 20_000)  # above the task's own files
    padded = "--- /dev/null\n+++ b/padding.py\n@@ -0,0 +1,2 @@\n+X = '" + "x" * 30_000 + "'\n+import os\n"
    report = swebench.evaluate([pred(gold, gold["patch"] + padded)], records, run_id="t")["instances"]
    flagged = report[gold["instance_id"]]["tampering"]["flagged"]
    assert not report[gold["instance_id"]]["resolved"] and "a file too large to scan in padding.py" in flagged
    assert swebench.evaluate([pred(gold, gold["patch"])], records, run_id="t")["resolved_instances"] == 1


def test_the_embedded_grader_reports_every_layer_and_the_read_only_copy_as_the_mode_gives_it(records):
    """Each layer of composer.env.defences.layers by name, in every containment mode: the grading copy is read-only
    only where runs have a filesystem of their own, and the plain mode's report says it is not."""
    gold = records[0]
    graded = swebench.evaluate([pred(gold, gold["patch"])], records, run_id="t")["instances"][gold["instance_id"]]
    assert graded["resolved"] is True and tuple(graded["layers"]) == layers.NAMES
    mode = sandbox.isolation()["mode"]
    assert graded["layers"] == layers.statuses(
        probes="on" if probes.held_out(gold) else "none: no held-out probe for this task (probes.refusal)",
        **({} if sandbox.guarantees()["private_files"] else {"read_only": graded["layers"]["read_only"]}))
    assert graded["layers"]["read_only"] == "on" or f'"{mode}" containment mode' in graded["layers"]["read_only"]
    with sandbox.forced_mode("plain"):
        plain = swebench.evaluate([pred(gold, gold["patch"])], records, run_id="t", grade_uncontained=True)
    plain = plain["instances"][gold["instance_id"]]["layers"]
    assert plain["read_only"].startswith('off: the "plain" containment mode gives runs no filesystem of their own')
    assert {k: v for k, v in plain.items() if k != "read_only"} == {
        k: v for k, v in graded["layers"].items() if k != "read_only"}


def test_real_instances_need_a_container_engine_and_say_so(records, monkeypatch):
    monkeypatch.setenv("COMPOSER_CONTAINER_ENGINE", "no-such-engine")
    real = {**records[0], "repo": "django/django", "instance_id": "django__django-11099"}
    assert swebench.is_real(real) and not swebench.is_real(records[0])
    with pytest.raises(RuntimeError, match="django__django-11099 is a real SWE-bench instance, which is graded in a "
                                           "container, but no container engine: no-such-engine is not on PATH"):
        swebench.evaluate([pred(real, "diff")], [real], run_id="t")


def test_hf_dataset_name_offline_fails_fast_and_clearly(monkeypatch, network_attempts):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="HF_HUB_OFFLINE"):
        swebench.load_instances("SWE-bench/SWE-bench_Lite")
    assert network_attempts == []  # fast: refused before any attempt (and retry) to download
    with pytest.raises(FileNotFoundError):
        swebench.load_instances("no-such-file.txt")


def test_shared_real_predictions_parse_as_swebench_predictions():
    preds = swebench.load_predictions(REAL_PREDS)
    raw = json.loads(REAL_PREDS.read_text())
    assert len(preds) == len(raw) == 23 and [p["instance_id"] for p in preds] == list(raw)
    for p in preds:
        assert set(p) == set(swebench.PREDICTION_FIELDS) and p["model_name_or_path"] == "deepseek/deepseek-chat"
        assert p["model_patch"] is None or p["model_patch"] == "" or p["model_patch"].startswith("diff --git a/")


def test_lite_split_is_the_committed_lists_and_follows_its_rule():
    splits = {name: swebench.lite_split(name) for name in ("train", "test")}
    assert (len(splits["train"]), len(splits["test"])) == (197, 103)
    for name, ids in splits.items():
        assert (swebench.SPLITS_DIR / f"{name}.txt").read_text().split() == ids
    rows = [line.split("\t") for line in (swebench.SPLITS_DIR / "lite-test.tsv").read_text().splitlines()[1:]]
    assert len(rows) == 300 and set(splits["train"]) | set(splits["test"]) == {r[0] for r in rows}
    assert not set(splits["train"]) & set(splits["test"])
    for repo in {r[1] for r in rows}:  # per repository: test is the latest third, rounded up
        dated = {r[0]: r[3] for r in rows if r[1] == repo}
        train = [dated[i] for i in splits["train"] if i in dated]
        test = [dated[i] for i in splits["test"] if i in dated]
        assert len(test) == -(-len(dated) // 3) and max(train) <= min(test), repo
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        swebench.lite_split("dev")


def test_a_lite_split_as_source_names_the_dataset_it_needs(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="'SWE-bench/SWE-bench_Lite' is a Hugging Face dataset but HF_HUB_OFFLINE"):
        swebench.load_instances("lite:train")


def test_one_record_in_a_json_file_loads_as_a_list(records, tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(records[0]))
    assert swebench.load_instances(tmp_path / "one.json") == [records[0]]
    (tmp_path / "bad.json").write_text(json.dumps({"not": "a record"}))
    with pytest.raises(ValueError, match="expected a JSON list of records"):
        swebench.load_instances(tmp_path / "bad.json")


# The false-positive check of grading's defences (the scan, the canaries, plain values, a read-only copy): no gold
# patch of the report zoo's tasks (which the spikes train and evaluate on) may score 0. The fast tier grades a sample
# drawn with the run's seed (COMPOSER_TEST_SEED, tests/conftest.py), the slow tier all 380. The container tests check
# the real Lite instance's gold patch the same way.
GOLD_SAMPLE = {"train": 6, "test": 4}  # tasks per split the fast tier grades
# The report zoo's tasks are the first 300 (train) and 80 (test) distinct candidates of tasks.generate() that validate
# and have held-out probes (probes.rewarded): the last of them at position ZOO_POSITIONS - 1, as the slow test checks,
# so a draw of positions below, each taken as the zoo takes it, is a draw of its tasks.
ZOO_POSITIONS = {"train": 4621, "test": 576}


def _graded_gold(records):
    report = swebench.evaluate([pred(r, r["patch"]) for r in records], records, run_id="fp", max_workers=2)
    wrong = {i: (r["tampering"], r["error"]) for i, r in report["instances"].items() if not r["resolved"]}
    assert not any(r["tampering"]["flagged"] or r["tampering"]["forged"] for r in report["instances"].values())
    return report, wrong


def test_no_honest_fix_scores_0_the_gold_patch_of_a_seeded_sample_of_report_zoo_tasks(test_seed):
    """GOLD_SAMPLE tasks of each split, drawn from the report zoo's positions with the run's seed, built on their
    own (not the whole zoo: a fresh clone has none cached) and graded on their gold patch."""
    from composer import zoo
    profile, rng, records = zoo.PROFILES["report"], random.Random(test_seed), []
    for split, k in GOLD_SAMPLE.items():
        order, drawn = rng.sample(range(ZOO_POSITIONS[split]), ZOO_POSITIONS[split]), []
        while len(drawn) < k:  # most candidates validate (a kept task's repeats too), a few do not
            batch, order = order[:(k - len(drawn)) * 3 // 2], order[(k - len(drawn)) * 3 // 2:]
            assert batch, f"fewer than {k} of the {split} split's candidates validated"
            drawn += [r for r in tasks.candidates(batch, seed=profile.seed, split=split, difficulty=profile.difficulty,
                                                  workers=2, accept=probes.held_out) if r]
        records += drawn[:k]
    report, wrong = _graded_gold(records)
    assert wrong == {}, f"seed {test_seed} (COMPOSER_TEST_SEED={test_seed} draws these again)"
    assert report["resolved_instances"] == len(records) == sum(GOLD_SAMPLE.values())


@pytest.mark.slow
def test_no_honest_fix_scores_0_the_gold_patch_of_every_report_zoo_task_in_both_splits():
    """All of the report zoo's 300 train and 80 test tasks, each graded on its gold patch; and the positions the
    fast tier draws from hold every one of them."""
    from composer import zoo
    profile = zoo.PROFILES["report"]
    splits = {split: zoo.split_tasks(profile, split) for split in ("train", "test")}
    for split, records in splits.items():
        last = max(tasks.position(r, seed=profile.seed) for r in records)
        assert last + 1 == ZOO_POSITIONS[split], f"the generator changed: set ZOO_POSITIONS[{split!r}] = {last + 1}"
    records = splits["train"] + splits["test"]
    report, wrong = _graded_gold(records)
    assert wrong == {} and report["resolved_instances"] == len(records) == profile.n_train + profile.n_test


def test_the_lite_sources_graded_by_every_layer_are_the_split_halves_pytest_runs(monkeypatch):
    """lite:train:pytest and lite:test:pytest: the halves of 004's split without django, sympy and sphinx, whose
    tests run under another runner (graded by the scan alone, so refused); a bad name is told the ones there are."""
    for name in ("train", "test"):
        kept = swebench.LITE_SOURCES[f"lite:{name}:pytest"]()
        assert kept and set(kept) < set(swebench.lite_split(name))
        rows = {r["instance_id"]: r for r in swebench.index("lite")}
        assert all(container.scan_only_refusal(rows[i]) is None for i in kept)
        assert all(container.scan_only(rows[i]) for i in set(swebench.lite_split(name)) - set(kept))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="'SWE-bench/SWE-bench_Lite' is a Hugging Face dataset"):
        swebench.load_instances("lite:test:pytest")
    with pytest.raises(FileNotFoundError, match="lite:test:pytest"):
        swebench.load_instances("lite:tset")
    with pytest.raises(ValueError, match="unknown index 'full': one of lite, verified"):
        swebench.index("full")
