"""Substrate-neutral checks of collected traces, for 002a (TRL) and 002b (verifiers) alike: completeness, truncation,
schema drift, errors, tampering counts, and whether each reward agrees with a fresh grading.

    from composer.collection import trace_checks
    records, problems = trace_checks.read_file("runs/002a-trace-collection-trl/traces.jsonl")
    check = trace_checks.check_traces(records, expected_rollouts=260)   # the gate's counts and ids
    trace_checks.reward_alignment(records, trace_checks.embedded_verdict(instances))

All inputs are traces.StepRecord, all outputs plain JSON-able dicts:

  check_traces(records, *, expected_rollouts=None, expected_ids=None, require_tokens=False, problems=())
      One dict with five sections, each a count plus the offending ids/reasons:
      "completeness"  rollouts whose steps are 0..n-1 with no gap or duplicate, done only (and exactly) on the last
                      step, every step with messages and action text, every non-final step with an observation,
                      a final reward; with require_tokens, token_ids and mask on every action. Plus missing and
                      unexpected rollout ids against expected_ids / expected_rollouts.
      "truncation"    rollouts whose last step is truncated, by kind: the final record's
                      outcome["truncation"] (a list of kind names; a substrate that has none gets "truncated").
      "schema"        invalid lines (problems: TraceErrors from traces.read_traces(on_error="collect")) and drift:
                      a field seen with two JSON types, or differing key sets of meta / outcome / state.env
                      between records of the same position (final vs non-final steps), or several
                      schema_versions / sources in one file.
      "errored"       rollouts whose final record has `error` set (the environment crashed or timed out, the
                      run failed), with the reasons counted.
      "gate"          booleans: complete, no_truncation, no_schema_drift, (and enough rollouts when expected).
  truncation_kinds(final_record) -> list[str]
  reward_alignment(records, verdict) -> dict
      verdict(final_record) -> float | None is the environment's own judgement of the rollout (None: skip);
      the final record's reward must equal it. embedded_verdict(instances) re-grades the submitted patch
      (outcome["patch"]) with composer.env.real.swebench.evaluate, as submit() graded it; unsubmitted -> 0.0.
  read_file(path) -> (records, problems)   every valid record and a TraceError per bad line
"""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from composer import traces


def read_file(path) -> tuple[list[traces.StepRecord], list[traces.TraceError]]:
    """Every valid record of a trace file, and a TraceError ("file:line: why") per bad line."""
    reader = traces.read_traces(path, on_error="collect")
    records = list(reader)
    return records, list(reader.problems)


def truncation_kinds(final: traces.StepRecord) -> list[str]:
    """Why a rollout was cut short: outcome["truncation"] when the substrate names kinds, else ["truncated"]."""
    kinds = list((final.outcome or {}).get("truncation") or [])
    if final.truncated and not kinds:
        kinds = ["truncated"]
    return kinds


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _signature(record: traces.StepRecord) -> dict[str, str]:
    """JSON type of every top-level field, state/action subfield and meta/outcome/state.env key."""
    data = record.model_dump(mode="json")
    sig = {}
    for key, value in data.items():
        sig[key] = _json_type(value)
        if key in ("state", "action", "meta", "outcome") and isinstance(value, dict):
            for sub, v in value.items():
                sig[f"{key}.{sub}"] = _json_type(v)
                if key == "state" and sub == "env" and isinstance(v, dict):
                    for k2, v2 in v.items():
                        sig[f"state.env.{k2}"] = _json_type(v2)
    return sig


def schema_drift(records: list[traces.StepRecord]) -> list[str]:
    """Drift between records that each validate: a field with two non-null JSON types (integer vs number counts
    as one), key sets of meta / outcome / state.env that differ between records of the same position (final or
    not), several schema versions or sources in one file."""
    found = []
    types: dict[str, set] = {}
    keysets: dict[tuple, dict] = {}
    for r in records:
        sig = _signature(r)
        for path, t in sig.items():
            if t != "null":
                types.setdefault(path, set()).add("number" if t == "integer" else t)
        for part in ("meta", "outcome", "state.env"):
            keys = tuple(sorted(p for p in sig if p.startswith(part + ".") and p.count(".") == part.count(".") + 1))
            if part == "outcome" and not r.done:
                continue
            keysets.setdefault((part, r.done), {}).setdefault(keys, r.trace_id)
    for path, seen in sorted(types.items()):
        if len(seen) > 1:
            found.append(f"{path}: several types {sorted(seen)}")
    for (part, final), variants in sorted(keysets.items()):
        if len(variants) > 1:
            where = "final" if final else "non-final"
            shown = "; ".join(f"{list(k)} (e.g. {tid})" for k, tid in list(variants.items())[:3])
            found.append(f"{part} keys differ between {where} steps: {shown}")
    versions = {r.schema_version for r in records}
    sources = {r.source for r in records}
    if len(versions) > 1:
        found.append(f"several schema versions: {sorted(versions)}")
    if len(sources) > 1:
        found.append(f"several sources: {sorted(sources)}")
    return found


def _step_problems(steps: list[traces.StepRecord], require_tokens: bool) -> list[str]:
    out = []
    for r in steps:
        final = r is steps[-1]
        if not r.state.messages:
            out.append(f"step {r.step}: no state messages")
        if not isinstance(r.action.text, str):
            out.append(f"step {r.step}: no action text")
        if require_tokens and (not r.action.token_ids or r.action.mask is None):
            out.append(f"step {r.step}: no token ids / loss mask")
        if not final and r.observation is None:
            out.append(f"step {r.step}: no observation before the next step")
    if steps[-1].reward is None:
        out.append("the final step has no reward")
    if not steps[-1].done:
        out.append("the last step is not done: the rollout was cut off")
    return out


_TAMPERING = ("reset", "flagged", "forged")


def check_traces(records: list[traces.StepRecord], *, expected_rollouts: int | None = None,
                 expected_ids=None, require_tokens: bool = False, problems=()) -> dict:
    """The checks of spikes 002a/002b over one collection's records; see the module docstring."""
    records = list(records)
    groups = traces.group_traces(records, on_error="collect")
    broken = {p.reason.split("'")[1] if "'" in p.reason else p.reason: p.reason for p in groups.problems}
    incomplete = {tid: reason for tid, reason in broken.items()}
    for tid, steps in groups.items():
        bad = _step_problems(steps, require_tokens)
        if bad:
            incomplete[tid] = "; ".join(bad)
    ids = set(groups) | set(broken)
    missing, unexpected = [], []
    if expected_ids is not None:
        expected_ids = set(expected_ids)
        missing, unexpected = sorted(expected_ids - ids), sorted(ids - expected_ids)
    elif expected_rollouts is not None and len(ids) < expected_rollouts:
        missing = [f"{expected_rollouts - len(ids)} rollouts short of {expected_rollouts}"]
    finals = [steps[-1] for steps in groups.values()]
    kinds = Counter(k for f in finals for k in truncation_kinds(f))
    truncated = sorted(f.trace_id for f in finals if truncation_kinds(f))
    errored = {f.trace_id: f.error for f in finals if f.error}
    tampering = {f.trace_id: (f.outcome or {}).get("tampering") or {} for f in finals}
    drift = schema_drift(records)
    invalid = [str(p) for p in problems]
    n = len(ids)
    complete = n - len(incomplete)
    out = {
        "rollouts": n, "steps": len(records),
        "completeness": {"complete": complete, "incomplete": dict(sorted(incomplete.items())),
                         "missing": missing, "unexpected": unexpected, "expected": expected_rollouts,
                         "steps_per_rollout": sorted(len(s) for s in groups.values())},
        "truncation": {"rollouts": len(truncated), "by_kind": dict(sorted(kinds.items())), "ids": truncated},
        "schema": {"invalid_lines": invalid, "drift": drift, "valid_records": len(records)},
        "errored": {"rollouts": len(errored), "reasons": dict(Counter(_reason(e) for e in errored.values())),
                    "ids": sorted(errored)},
        # submissions whose grading reset test files or configuration to the base (composer.env.defences.grading), whose
        # source changes the scan flagged as decisive (composer.env.defences.tampering), or whose canaries said forged
        # (composer.env.defences.canaries); "review": those the scan named for review only (they scored as graded)
        "tampering": {"rollouts": sum(any(t.get(k) for k in _TAMPERING) for t in tampering.values()),
                      **{k: sum(bool(t.get(k)) for t in tampering.values()) for k in _TAMPERING},
                      "review": sum(bool(t.get("review")) for t in tampering.values()),
                      "ids": sorted(tid for tid, t in tampering.items() if any(t.get(k) for k in _TAMPERING))},
    }
    out["gate"] = {
        "enough_rollouts": expected_rollouts is None or n >= expected_rollouts,
        "complete": not incomplete and not missing and not unexpected and n > 0,
        "no_truncation": not truncated,
        "no_schema_drift": not invalid and not drift,
    }
    return out


def _reason(error: str) -> str:
    """An error message without its specifics (the reason class), for counting."""
    head = error.split(":")[0].strip()
    return head if len(head) <= 60 else head[:57] + "..."


def reward_alignment(records: list[traces.StepRecord], verdict: Callable[[traces.StepRecord], float | None],
                     *, tol: float = 1e-9, workers: int = 1) -> dict:
    """Compare each rollout's final reward with verdict(final record), the environment's own re-judgement;
    `workers` rollouts re-judged at once (real instances: each a container of its own)."""
    groups = traces.group_traces(records, on_error="collect")
    finals = {tid: steps[-1] for tid, steps in groups.items()}
    with ThreadPoolExecutor(max(1, workers)) as pool:
        verdicts = dict(zip(finals, pool.map(verdict, finals.values()), strict=True))
    checked, skipped, mismatches = 0, 0, []
    for tid, final in finals.items():
        expected = verdicts[tid]
        if expected is None:
            skipped += 1
            continue
        checked += 1
        if final.reward is None or abs(final.reward - expected) > tol:
            mismatches.append({"trace_id": tid, "recorded": final.reward, "verdict": expected})
    return {"checked": checked, "aligned": checked - len(mismatches), "skipped": skipped, "mismatches": mismatches}


def embedded_verdict(instances: list[dict], *, timeout_s: float = 20.0,
                     real_timeout_s: float = 1800.0) -> Callable[[traces.StepRecord], float]:
    """verdict() for reward_alignment on the environment: re-grade the submitted patch like submit()
    (swebench.evaluate on a fresh copy, or a fresh container for a real instance, with EnvConfig's test_timeout_s
    and real_test_timeout_s); an unsubmitted or errored rollout earns 0.0."""
    from composer.env.real import swebench

    by_id = {r["instance_id"]: r for r in instances}

    def verdict(final: traces.StepRecord) -> float | None:
        outcome = final.outcome or {}
        if final.task_id not in by_id:
            return None
        if not outcome.get("submitted"):  # also an errored rollout that never submitted
            return 0.0
        pred = {"instance_id": final.task_id, "model_name_or_path": "reward-alignment",
                "model_patch": outcome.get("patch") or ""}
        record = by_id[final.task_id]
        report = swebench.evaluate([pred], [record], run_id=f"align-{final.trace_id}", timeout_s=real_timeout_s
                                   if swebench.is_real(record) else timeout_s)["instances"][final.task_id]
        return 1.0 if report["resolved"] else 0.0

    return verdict
