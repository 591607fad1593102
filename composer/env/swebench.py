"""SWE-bench records and predictions: load, validate, evaluate (embedded in-process, real via the harness).

    from composer.env import swebench

    instances = swebench.load_instances("lite.jsonl")            # .json / .jsonl / .parquet / HF name
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

Embedded records ("composer-embedded/..." repos) are evaluated here like the harness does
it, but stricter about what the model patch may change (composer.env.grading): the repo at
base_commit, then the model patch without its tests and test-run configuration (conftest.py,
pytest.ini, pyproject.toml, *.pth, ...: listed in the report's `tampering["reset"]`), then
test_patch, then FAIL_TO_PASS + PASS_TO_PASS in one cold pytest run in a fresh sandbox; a model
patch whose added source lines tamper with the test run (`tampering["flagged"]`) is not resolved
unless flag_tampering=False. A model patch that does not apply is an error instance, an empty one an
empty-patch instance (never run), as in the harness.
Real records need the `swebench` package and a running Docker daemon (`python -m
swebench.harness.run_evaluation`); without them `evaluate` raises before running anything.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from composer.env import grading, sandbox, tasks

PREDICTION_FIELDS = ("instance_id", "model_name_or_path", "model_patch")
EVAL_TIMEOUT_S = 60.0


def _offline() -> bool:
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def load_instances(source: str | Path, *, split: str = "test") -> list[dict]:
    """Validated records from a .json list, a .jsonl, a .parquet, or a Hugging Face dataset name."""
    path = Path(source)
    if path.suffix in (".json", ".jsonl", ".parquet") or path.exists():
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        elif path.suffix == ".parquet":
            import pyarrow.parquet  # comes with `datasets`
            records = pyarrow.parquet.read_table(path).to_pylist()
        elif path.suffix == ".json":
            records = json.loads(path.read_text())
            if not isinstance(records, list):
                raise ValueError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
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
        raise FileNotFoundError(f"{source}: no such file, and not a Hugging Face dataset name (owner/name)")
    return [validate_instance(r) for r in records]


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


def harness_missing() -> list[str]:
    """What the real SWE-bench harness lacks here, in words (empty when it can run)."""
    missing = []
    if importlib.util.find_spec("swebench") is None:
        missing.append("the `swebench` package is not installed (pip install swebench)")
    docker = shutil.which("docker")
    if docker is None:
        missing.append("the docker CLI is not installed (https://docs.docker.com/engine/install/)")
    else:
        try:
            info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=20)
            if info.returncode != 0:
                err = (info.stderr.strip().splitlines() or ["no output"])[-1]
                missing.append(f"the docker CLI is present but no daemon answers ({err}); start dockerd "
                               "(or Docker Desktop) or point DOCKER_HOST at one")
        except subprocess.TimeoutExpired:
            missing.append("`docker info` did not answer within 20 s (daemon hung or unreachable)")
    return missing


def evaluate(predictions: list[dict], instances: list[dict], *, run_id: str, max_workers: int = 1,
             timeout_s: float = EVAL_TIMEOUT_S, flag_tampering: bool = True) -> dict:
    """Grade predictions against instances the way the SWE-bench harness does (see module doc).

    flag_tampering: an embedded prediction whose source changes tamper with the test run (see
    composer.env.grading.scan) is not resolved; False grades it on its tests alone."""
    preds = {}
    for p in map(validate_prediction, predictions):
        if p["instance_id"] in preds:
            raise ValueError(f"two predictions for {p['instance_id']}")
        preds[p["instance_id"]] = p
    by_id = {validate_instance(i)["instance_id"]: i for i in instances}
    unknown = sorted(set(preds) - set(by_id))
    if unknown:
        raise ValueError(f"predictions for instances not in the dataset: {unknown[:5]}")
    real = [i for i in preds if not by_id[i]["repo"].startswith(tasks.REPO_PREFIX)]
    if real:
        missing = harness_missing()
        if missing:
            raise RuntimeError(f"{len(real)} prediction(s) are for real SWE-bench repos (e.g. {real[0]}), which need "
                               "the SWE-bench harness, but " + "; and ".join(missing) + ".")
    embedded = [i for i in preds if i not in real]
    with ThreadPoolExecutor(max(1, max_workers)) as pool:
        graded = pool.map(lambda i: _evaluate_embedded(preds[i], by_id[i], timeout_s, flag_tampering), embedded)
        reports = dict(zip(embedded, graded, strict=True))
    if real:
        reports.update(_evaluate_real([preds[i] for i in real], [by_id[i] for i in real], run_id, max_workers))
    return _summary(preds, list(by_id), reports, run_id)


def _evaluate_embedded(pred: dict, instance: dict, timeout_s: float, flag_tampering: bool) -> dict:
    report = {"patch_is_None": pred["model_patch"] is None, "patch_exists": pred["model_patch"] is not None,
              "patch_successfully_applied": False, "resolved": False, "error": None,
              "tampering": {"reset": [], "flagged": []}}
    if not (pred["model_patch"] or "").strip():
        return report
    patch, reset = grading.source_only(pred["model_patch"], frozenset(sandbox.diff_paths(instance["test_patch"])))
    if not reset and not patch.strip():  # no file in it at all: not a diff, an error instance as in the harness
        patch = pred["model_patch"]
    flagged = grading.scan(patch)
    report["tampering"] = {"reset": reset, "flagged": flagged}
    f2p, p2p = json.loads(instance["FAIL_TO_PASS"]), json.loads(instance["PASS_TO_PASS"])
    with tempfile.TemporaryDirectory(prefix="composer-eval-") as tmp:
        try:
            repo = tasks.materialize(instance, Path(tmp) / "repo", with_tests=False)
            if patch.strip():
                sandbox.apply_unified_diff(repo, patch)
            report["patch_successfully_applied"] = True
            sandbox.apply_unified_diff(repo, instance["test_patch"])
        except (ValueError, sandbox.SandboxError) as e:
            report["error"] = str(e)
            return report
        if flagged and flag_tampering:
            return report  # not resolved, and not run: the run's outcomes could not be trusted
        run = sandbox.run_pytest(repo, f2p + p2p, timeout_s=timeout_s)
    report["error"] = run.error

    def split(ids):
        return {"success": [t for t in ids if run.outcomes[t]], "failure": [t for t in ids if not run.outcomes[t]]}

    status = {"FAIL_TO_PASS": split(f2p), "PASS_TO_PASS": split(p2p),
              "FAIL_TO_FAIL": {"success": [], "failure": []}, "PASS_TO_FAIL": {"success": [], "failure": []}}
    report["resolved"] = not status["FAIL_TO_PASS"]["failure"] and not status["PASS_TO_PASS"]["failure"]
    report["tests_status"] = status
    return report


def _evaluate_real(preds: list[dict], instances: list[dict], run_id: str, max_workers: int) -> dict:
    """Per-instance reports from `python -m swebench.harness.run_evaluation` (logs stay in a temp dir)."""
    work = Path(tempfile.mkdtemp(prefix=f"composer-swebench-{run_id}-"))
    (work / "instances.jsonl").write_text("".join(json.dumps(i) + "\n" for i in instances))
    (work / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    subprocess.run([sys.executable, "-m", "swebench.harness.run_evaluation", "--dataset_name",
                    str(work / "instances.jsonl"), "--predictions_path", str(work / "preds.jsonl"),
                    "--max_workers", str(max_workers), "--run_id", run_id], cwd=work, check=True)
    reports = {}
    for p in preds:
        path = work / "logs" / "run_evaluation" / run_id / p["model_name_or_path"].replace("/", "__") / \
            p["instance_id"] / "report.json"
        if path.exists():
            reports[p["instance_id"]] = {**json.loads(path.read_text())[p["instance_id"]], "error": None}
        elif (p["model_patch"] or "").strip():
            reports[p["instance_id"]] = {"patch_is_None": False, "patch_exists": True, "resolved": False,
                                         "patch_successfully_applied": False, "error": f"no report; logs in {work}"}
    return reports


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
