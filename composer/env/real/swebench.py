"""SWE-bench records and predictions: load, validate, evaluate (embedded in the sandbox, real in containers).

    from composer.env.real import swebench

    instances = swebench.load_instances("lite.jsonl")            # .json / .jsonl / .parquet / HF name / lite:train
    swebench.index("verified")                                   # the shipped index: instance_id, repo, version, ...
    preds = swebench.load_predictions("preds.json")              # mini-swe-agent dict or a list
    report = swebench.evaluate(preds, instances, run_id="spike004")
    report["resolved_ids"], report["instances"][iid]["tests_status"]["FAIL_TO_PASS"]

Records are validated against the SWE-bench Lite schema (`tasks.SCHEMA_FIELDS`: 12 string
fields, FAIL_TO_PASS/PASS_TO_PASS JSON-encoded lists of test ids); predictions are
`{"instance_id", "model_name_or_path", "model_patch"}`. `evaluate` returns the summary
that `swebench.harness.reporting.make_run_report` writes (resolved_ids, error_ids, ...,
schema_version 2) plus `instances`: the per-instance `report.json` content of the harness
(patch_is_None, patch_exists, patch_successfully_applied, resolved, tests_status) and
`error` (None or why the instance errored).

Both kinds are graded on the model patch without its tests and test-run configuration (conftest.py,
pytest.ini, setup.cfg, pyproject.toml, *.pth, ...: composer.env.defences.grading; listed in the report's
`tampering["reset"]`), stricter than the harness, which would let a conftest.py the model wrote steer its run; a
model patch whose changed source files reach the grading's own machinery (`tampering["flagged"]`: the decisive
findings of composer.env.defences.tampering) is not resolved and not run unless flag_tampering=False, and the scan's
other findings are listed for review (`tampering["review"]`), scoring nothing; canary tests planted among the task's
tests at grading (composer.env.defences.canaries) that come out wrong (`tampering["forged"]`) mean not resolved,
whatever flag_tampering says. An empty patch is an empty-patch instance (never run), a patch that does not apply an
error instance, as in the harness.

Embedded records ("composer-embedded/..." repos) are evaluated here like the harness does it: the repo at
base_commit, then the patch, then test_patch, then FAIL_TO_PASS + PASS_TO_PASS (renamed, among the canaries and the
task's held-out probes, composer.env.defences.probes, which must record the gold library's values: `probes` in the
report) in one cold pytest run in a fresh sandbox, read-only to the run, with the values the tests compare made plain
(`sandbox.run_pytest(grading=True)`), and only where that run has a filesystem of its own (sandbox.grading_refusal:
else refused, unless grade_uncontained opts in for a smoke run). Real records are graded by the swebench harness's
own eval script and log parser in a fresh container from the instance image (composer.env.real.container; needs a
container engine and the image); several at once with max_workers.
"""

import importlib.util
import json
import os
import random
import re
import secrets
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from composer.env.containment import patches, sandbox
from composer.env.defences import canaries, grading, layers, probes
from composer.env.embedded import tasks
from composer.env.real import container
from composer.paths import ROOT

PREDICTION_FIELDS = ("instance_id", "model_name_or_path", "model_patch")
LITE = "SWE-bench/SWE-bench_Lite"  # on Hugging Face
EVAL_TIMEOUT_S = 60.0  # per test run of an embedded record
REAL_TIMEOUT_S = 1800.0  # per eval script of a real one: the harness's default


def _offline() -> bool:
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def load_instances(source: str | Path, *, split: str = "test") -> list[dict]:
    """Validated records from a .json list (or one record), a .jsonl, a .parquet, a Hugging Face dataset name, or
    one of LITE_SOURCES: SWE-bench Lite's records (Hugging Face) in one half of 004's split (lite_split), all of
    them or (":pytest") only those whose tests pytest runs, the ones every layer of grading covers (the others are
    graded by the tampering scan alone, and refused: container.scan_only_refusal)."""
    if str(source) in LITE_SOURCES:
        keep = set(LITE_SOURCES[str(source)]())
        return [r for r in load_instances(LITE, split="test") if r["instance_id"] in keep]
    path = Path(source)
    if path.suffix in (".json", ".jsonl", ".parquet") or path.exists():
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file (a task source is a .json, .jsonl or .parquet file of "
                                    f"records, one of {', '.join(LITE_SOURCES)}, or a Hugging Face dataset name)")
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        elif path.suffix == ".parquet":
            import pyarrow.parquet  # comes with `datasets`
            records = pyarrow.parquet.read_table(path).to_pylist()
        elif path.suffix == ".json":
            records = json.loads(path.read_text())
            if isinstance(records, dict) and "instance_id" in records:  # one record
                records = [records]
            if not isinstance(records, list):
                raise ValueError(f"{path}: expected a JSON list of records (or one record), "
                                 f"got {type(records).__name__}")
        else:
            raise ValueError(f"{path}: unknown format (want .json, .jsonl or .parquet)")
    elif re.fullmatch(r"[\w.-]+/[\w.-]+", str(source)):
        if _offline():
            raise RuntimeError(f"{source!r} is a Hugging Face dataset but HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set, "
                               "so it cannot be downloaded. Online, save it once (datasets.load_dataset("
                               f"{str(source)!r}, split={split!r}).to_json('lite.jsonl')) and pass the file here.")
        import datasets
        records = [dict(r) for r in datasets.load_dataset(str(source), split=split)]
    else:
        raise FileNotFoundError(f"{source}: no such file, not one of {', '.join(LITE_SOURCES)}, and not a Hugging "
                                "Face dataset name (owner/name)")
    return [validate_instance(r) for r in records]


SPLITS_DIR = ROOT / "data" / "swebench-lite" / "splits"
# The indexes shipped in data/ (instance_id, repo, version, created_at; no download): SWE-bench Lite's test split and
# SWE-bench Verified (data/swebench-verified/README.md)
INDEXES = {"lite": SPLITS_DIR / "lite-test.tsv", "verified": ROOT / "data" / "swebench-verified" / "verified-test.tsv"}


def index(name: str) -> list[dict]:
    """The rows of a shipped index (INDEXES): dicts of instance_id, repo, version and created_at."""
    if name not in INDEXES:
        raise ValueError(f"unknown index {name!r}: one of {', '.join(INDEXES)}")
    header, *rows = INDEXES[name].read_text().splitlines()
    return [dict(zip(header.split("\t"), row.split("\t"))) for row in rows if row.strip()]


# SWE-bench's full test split (princeton-nlp/SWE-bench, 2,294 instances) by repository; no index of it is shipped.
# From the dataset's repo column, as published in "SWE-Bench test split repo distribution"
# (gist.github.com/xennygrimmato/cab91d0c0612c529ba11087df77c6310); tests/test_costs_power.py checks its sum and that
# the shipped Verified index's repositories are these twelve.
TEST_SPLIT_REPOSITORIES = {
    "astropy/astropy": 95, "django/django": 850, "matplotlib/matplotlib": 184, "mwaskom/seaborn": 22,
    "pallets/flask": 11, "psf/requests": 44, "pydata/xarray": 110, "pylint-dev/pylint": 57, "pytest-dev/pytest": 119,
    "scikit-learn/scikit-learn": 229, "sphinx-doc/sphinx": 187, "sympy/sympy": 386,
}


def pytest_repository(repo: str) -> bool:
    """Whether every version of a SWE-bench repository runs its tests under pytest (swebench's specs)."""
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    return all(not container.scan_only({"repo": repo, "version": v}) for v in MAP_REPO_VERSION_TO_SPECS[repo])


def graded_by_pytest(rows: list[dict]) -> list[str]:
    """The instance ids among `rows` (records or index rows: repo and version) whose tests pytest runs, so that every
    layer of grading covers them; the others (django, sympy, sphinx) are graded by the tampering scan alone."""
    return [r["instance_id"] for r in rows if not container.scan_only(r)]


def lite_split(name: str) -> list[str]:
    """The instance ids of 004's fixed split of SWE-bench Lite's test split: "train" (197) or "test" (103).

    Rule (data/swebench-lite/splits/README.md): within each repository, by created_at, the latest third (rounded
    up) is test, the rest train; so every repository is in both and no test issue predates a train issue of its
    repository. Computed from the committed index lite-test.tsv; train.txt and test.txt hold the result."""
    if name not in ("train", "test"):
        raise ValueError(f"unknown split {name!r}: 'train' or 'test'")
    by_repo: dict[str, list[tuple[str, str]]] = {}
    for row in index("lite"):
        by_repo.setdefault(row["repo"], []).append((row["created_at"], row["instance_id"]))
    ids = []
    for rows in by_repo.values():
        rows.sort()
        cut = len(rows) - -(-len(rows) // 3)
        ids += [iid for _, iid in (rows[:cut] if name == "train" else rows[cut:])]
    return sorted(ids)


def _lite_pytest(name: str) -> list[str]:
    keep = set(lite_split(name))
    return graded_by_pytest([r for r in index("lite") if r["instance_id"] in keep])


# The named sources load_instances reads, each its instance ids: a half of 004's split of SWE-bench Lite, or its
# tasks whose tests pytest runs (tests/test_env_swebench.py)
LITE_SOURCES = {"lite:train": lambda: lite_split("train"), "lite:test": lambda: lite_split("test"),
                "lite:train:pytest": lambda: _lite_pytest("train"), "lite:test:pytest": lambda: _lite_pytest("test")}


def validate_instance(record: dict) -> dict:
    """The record itself if it has the 12 SWE-bench Lite fields with the right types; else ValueError."""
    if not isinstance(record, dict):
        raise ValueError(f"a record must be a dict, got {type(record).__name__}")
    iid = record.get("instance_id", "<no instance_id>")
    for field in tasks.SCHEMA_FIELDS:
        if field not in record:
            raise ValueError(f"{iid}: missing field {field!r}")
        if not isinstance(record[field], str):
            raise ValueError(f"{iid}: field {field!r} must be a string, got {type(record[field]).__name__}")
    for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        try:
            tests = json.loads(record[field])
        except ValueError:
            tests = None
        if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"{iid}: field {field!r} must be a JSON-encoded list of test ids (strings), "
                             f"got {record[field][:80]!r}")
    return record


def validate_prediction(pred: dict) -> dict:
    if not isinstance(pred, dict):
        raise ValueError(f"a prediction must be a dict, got {type(pred).__name__}")
    iid = pred.get("instance_id", "<no instance_id>")
    for field in PREDICTION_FIELDS:
        if field not in pred:
            raise ValueError(f"prediction {iid}: missing field {field!r}")
    if not isinstance(pred["instance_id"], str) or not isinstance(pred["model_name_or_path"], str):
        raise ValueError(f"prediction {iid}: instance_id and model_name_or_path must be strings")
    if pred["model_patch"] is not None and not isinstance(pred["model_patch"], str):
        raise ValueError(f"prediction {iid}: model_patch must be a string or null")
    return pred


def load_predictions(path: str | Path) -> list[dict]:
    """Validated predictions from a .jsonl, a .json list, or a .json dict keyed by instance id
    (what mini-swe-agent writes as preds.json)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        preds = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    else:
        data = json.loads(path.read_text())
        preds = list(data.values()) if isinstance(data, dict) else data
        if isinstance(data, dict) and any(not isinstance(p, dict) or p.get("instance_id") != k
                                          for k, p in data.items()):
            raise ValueError(f"{path}: a dict of predictions must be keyed by each prediction's instance_id")
    return [validate_prediction(p) for p in preds]


# --- evaluation -----------------------------------------------------------------------------


def evaluate(predictions: list[dict], instances: list[dict], *, run_id: str, max_workers: int = 1,
             timeout_s: float | None = None, flag_tampering: bool = True, grade_uncontained: bool = False,
             grade_scan_only: bool = False) -> dict:
    """Grade predictions against instances the way the SWE-bench harness does (see module doc).

    timeout_s: per test run; None: EVAL_TIMEOUT_S on embedded records, REAL_TIMEOUT_S (the harness's default) on
    real ones. flag_tampering: a prediction whose source changes tamper with the test run (see
    composer.env.defences.grading.scan) is not resolved; False grades it on its tests alone. Embedded records are
    refused (RuntimeError, before any is graded) in a containment mode whose test runs could read grading's files
    (sandbox.grading_refusal) unless grade_uncontained opts in for a smoke run; the summary's "grading" says which.
    Real records whose tests pytest does not run are refused likewise (container.scan_only_refusal) unless
    grade_scan_only opts in."""
    preds = {}
    for p in map(validate_prediction, predictions):
        if p["instance_id"] in preds:
            raise ValueError(f"two predictions for {p['instance_id']}")
        preds[p["instance_id"]] = p
    by_id = {validate_instance(i)["instance_id"]: i for i in instances}
    unknown = sorted(set(preds) - set(by_id))
    if unknown:
        raise ValueError(f"predictions for instances not in the dataset: {unknown[:5]}")
    embedded = [iid for iid in preds if not is_real(by_id[iid])]
    if embedded and (refused := sandbox.grading_refusal(grade_uncontained)):
        raise RuntimeError(f"cannot grade {embedded[0]}: {refused}")
    for iid in preds:
        if is_real(by_id[iid]):
            missing = real_missing(by_id[iid])
            if missing:
                raise RuntimeError(f"{iid} is a real SWE-bench instance, which is graded in a container, but "
                                   + "; and ".join(missing) + ".")
            if refused := container.scan_only_refusal(by_id[iid], grade_scan_only):
                raise RuntimeError(refused)
    with ThreadPoolExecutor(max(1, max_workers)) as pool:
        graded = pool.map(lambda i: _evaluate_one(preds[i], by_id[i], timeout_s, flag_tampering, grade_uncontained),
                          list(preds))
        reports = dict(zip(preds, graded, strict=True))
    return {**_summary(preds, list(by_id), reports, run_id),
            "grading": sandbox.grading_note(grade_uncontained) if embedded else "in containers (real instances)"}


def is_real(instance: dict) -> bool:
    """A real SWE-bench record (graded in its instance image), not an embedded one (graded in the sandbox)."""
    return not instance["repo"].startswith(tasks.REPO_PREFIX)


def scan_only_preflight(splits: dict[str, list[dict]], opt_in: bool = False) -> str | None:
    """Before anything is trained or graded: why task sets ({name: records}) must not run, because real tasks among
    them would be graded by the tampering scan alone (container.scan_only_refusal: counted per set, their
    repositories and the first refusal, which names the opt-in), or None."""
    found = {name: [t for t in split if is_real(t) and container.scan_only(t)] for name, split in splits.items()}
    every = [t for found_in in found.values() for t in found_in]
    refused = every and container.scan_only_refusal(every[0], opt_in)
    if not refused:
        return None
    counts = " and ".join(f"{len(found[name])} of the {len(split)} {name} tasks" for name, split in splits.items())
    return (f"{counts} ({', '.join(sorted({t['repo'] for t in every}))}) would be graded by the tampering scan alone; "
            f"the first: {refused}")


def with_probes(records: list[dict], n: int | None = None, opt_in: bool = False) -> tuple[list[dict], dict[str, str]]:
    """The first n of `records` (None: all) in order, passing over the real ones that have no held-out probes
    (container.probes_refusal: computed once per image and instance, then cached; a reward on them would stand
    without that layer), and {instance_id: why} of those passed over. Raises RuntimeError, naming what is missing,
    when a real record it reaches cannot run here (its image, the engine)."""
    kept, passed = [], {}
    for r in records:
        if n is not None and len(kept) == n:
            break
        if is_real(r) and not container.scan_only(r):
            if missing := real_missing(r):
                raise RuntimeError(f"cannot compute {r['instance_id']}'s held-out probes: " + "; and ".join(missing))
            if why := container.probes_refusal(r, opt_in):
                passed[r["instance_id"]] = why
                continue
        kept.append(r)
    return kept, passed


def real_missing(instance: dict) -> list[str]:
    """What grading a real record lacks here, in words (empty when it can run)."""
    missing = [] if importlib.util.find_spec("swebench") else [
        "the `swebench` package is not installed (pip install -e . installs the pinned one)"]
    return missing + container.problems(instance)


def _evaluate_one(pred: dict, instance: dict, timeout_s: float | None, flag_tampering: bool,
                  grade_uncontained: bool) -> dict:
    report = {"patch_is_None": pred["model_patch"] is None, "patch_exists": pred["model_patch"] is not None,
              "patch_successfully_applied": False, "resolved": False, "error": None,
              "tampering": {"reset": [], "flagged": [], "review": [], "forged": []}}
    if not (pred["model_patch"] or "").strip():
        return report
    test_paths = frozenset(patches.diff_paths(instance["test_patch"]))
    patch, reset = grading.source_only(pred["model_patch"], test_paths)
    if not reset and not patch.strip():  # no file in it at all: not a diff, an error instance as in the harness
        patch = pred["model_patch"]
    report["tampering"]["reset"] = reset
    if is_real(instance):
        graded = container.grade({**pred, "model_patch": patch}, instance, flag_tampering=flag_tampering,
                                 timeout_s=REAL_TIMEOUT_S if timeout_s is None else timeout_s)
        return {**graded, "tampering": {"reset": reset, **graded["tampering"]}}
    return _evaluate_embedded(patch, instance, report, EVAL_TIMEOUT_S if timeout_s is None else timeout_s,
                              flag_tampering, test_paths, grade_uncontained)


def _evaluate_embedded(patch: str, instance: dict, report: dict, timeout_s: float, flag_tampering: bool,
                       test_paths: frozenset[str], grade_uncontained: bool) -> dict:
    f2p, p2p = json.loads(instance["FAIL_TO_PASS"]), json.loads(instance["PASS_TO_PASS"])
    with tempfile.TemporaryDirectory(prefix="composer-eval-") as tmp:
        try:
            repo = tasks.materialize(instance, Path(tmp) / "repo", with_tests=False)
            known = grading.defined_classes(repo)
            named = {p: _text(repo, p) for p in (patches.diff_paths(patch) if patch.strip() else [])}
            # the files as patch wrote them, not as the headers read (apply_unified_diff refuses any it did not name)
            changed = patches.apply_unified_diff(repo, patch) if patch.strip() else []
            before = {p: named[p] for p in changed}
            report["patch_successfully_applied"] = True
            after = {p: _text(repo, p) for p in changed}
            report["tampering"].update(layers.scan(before, after, test_paths))
            patches.apply_unified_diff(repo, instance["test_patch"])
        except (ValueError, patches.SandboxError) as e:
            report["error"] = str(e)
            return report
        if report["tampering"]["flagged"] and flag_tampering:
            return report  # not resolved, and not run: the run's outcomes could not be trusted
        test_files = list(dict.fromkeys(t.split("::")[0] for t in f2p + p2p))
        planted = canaries.plant({f: (repo / f).read_text() for f in test_files if (repo / f).is_file()},
                                 f2p, p2p, random.Random(secrets.randbits(64)), probes.held_out(instance))
        for f, text in planted.files.items():
            (repo / f).write_text(text)
        run = sandbox.run_pytest(repo, planted.test_ids, timeout_s=timeout_s, grading=True, known_classes=known,
                                 changed=changed, uncontained_ok=grade_uncontained)
    outcomes, report["tampering"]["forged"], missed = planted.read(run.outcomes, missing=run.missing,
                                                                   timed_out=run.timed_out, properties=run.properties)
    report["probes"] = {"total": len(planted.probes), "missed": len(missed)}
    report["layers"] = layers.statuses(
        probes="on" if planted.probes else "none: no held-out probe for this task (probes.refusal)",
        read_only=sandbox.read_only_copy())
    report["error"] = run.error

    def split(ids):
        return {"success": [t for t in ids if outcomes[t]], "failure": [t for t in ids if not outcomes[t]]}

    status = {"FAIL_TO_PASS": split(f2p), "PASS_TO_PASS": split(p2p),
              "FAIL_TO_FAIL": {"success": [], "failure": []}, "PASS_TO_FAIL": {"success": [], "failure": []}}
    # a run that did not finish resolves nothing: its missing tests may be canaries that a forger kept from running
    report["resolved"] = run.error is None and not report["tampering"]["forged"] and not missed \
        and not status["FAIL_TO_PASS"]["failure"] and not status["PASS_TO_PASS"]["failure"]
    report["tests_status"] = status
    return report


def _text(repo: Path, rel: str) -> bytes | None:
    """A file's bytes for the scan layers, one past their limit at most (None: absent or not a regular file)."""
    return patches.read_regular(patches.safe_path(repo, rel), layers.SCAN_LIMIT + 1)


def _summary(preds: dict, dataset_ids: list[str], reports: dict, run_id: str) -> dict:
    empty = sorted(i for i, p in preds.items() if not (p["model_patch"] or "").strip())
    errors = sorted(i for i, r in reports.items() if i not in empty and not r["patch_successfully_applied"])
    completed = sorted(i for i in reports if i not in empty and i not in errors)
    resolved = sorted(i for i in completed if reports[i]["resolved"])
    return {
        "total_instances": len(dataset_ids),
        "submitted_instances": len(preds),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(completed) - len(resolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": completed,
        "incomplete_ids": sorted(set(dataset_ids) - set(preds)),
        "empty_patch_ids": empty,
        "submitted_ids": sorted(preds),
        "resolved_ids": resolved,
        "unresolved_ids": sorted(set(completed) - set(resolved)),
        "error_ids": errors,
        "schema_version": 2,
        "run_id": run_id,
        "instances": reports,
    }
