"""Held-out probes: the task's own FAIL_TO_PASS calls on inputs no test shows, whose expected values never enter
the test process.

    from composer.env.defences import probes

    held = probes.held_out(instance)   # [Probe("tests/test_ops.py", (), "mean([1, 2, 4])", 2.3333333333333335), ...]
    records, dropped = probes.rewarded(50, seed=0, split="train")   # tasks that all have probes; the ids dropped
    probes.source(held[0], "test_qkzvhuemtr")   # the probe test grading plants (composer.env.defences.canaries)
    probes.matches(held[0], "2.3333333333333335")   # True: the value the run recorded equals the gold one

The tests a policy can read (its episode's copy, or the graded files while its code runs) fix their inputs and
expected values, so code that answers those inputs from the test files, or from what it saw, passes them with the
bug in place. A probe calls the buggy function on an input of its own (one literal argument of a FAIL_TO_PASS
case moved as composer.env.defences.canaries moves a compared value) and only records what comes back
(`record_property`); grading compares that with the gold library's value outside the test process. Code passes a
probe only by computing the function correctly on an input it has not seen. Probes are chosen where the base
commit's buggy code gives another value (or raises), so each one fails while the bug is in place; up to
PER_TASK of them, from every FAIL_TO_PASS case that calls the function with literal arguments. A task whose bug
shows on no moved input gets none, and is not used where a reward counts: `rewarded` makes the task sets whose
rewards train and evaluate (the zoo's splits, 002b's tasks, the pilot's embedded pool) of tasks with probes only,
and says how many candidates it dropped (about 1 in 5 before this rule: 75 of the report zoo's 380 tasks had none).

Embedded tasks: the expected values come from the task generator's gold library (a real SWE-bench instance's come
from its gold patch run in its image: composer.env.defences.real_probes). The probes of a task are fixed (drawn from a
generator seeded by its instance id), computed once (both libraries run in the sandbox,
composer.env.embedded.tasks.PROBE, since a mutated function may loop on an input it was never tried on: about 0.25 s a
task) and cached under the composer cache, never where a policy's code can write.
"""

import ast
import functools
import hashlib
import json
import logging
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from composer import files, paths
from composer.env.containment import sandbox
from composer.env.defences.literals import NOT_LITERAL, literal, moved
from composer.env.embedded import tasks

VERSION = 1  # of how probes are made: part of their cache key
PER_TASK = 4
TRIES_PER_CASE = 8
TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Probe:
    file: str  # the test file it goes into (its imports are the probe's)
    setup: tuple[str, ...]  # statements before the call (a class case builds its object)
    expr: str  # the call, one literal argument moved
    expected: object  # the gold library's value (a Python literal)


def source(probe: Probe, name: str) -> str:
    """The probe as a test function: it records the value and asserts nothing."""
    body = [f"    {line}" for line in probe.setup] + [f"    record_property('value', repr({probe.expr}))"]
    return f"def {name}(record_property):\n" + "\n".join(body) + "\n"


def matches(probe: Probe, recorded) -> bool:
    """Whether a run's recorded repr is the gold value (compared as the task's tests compare: ==)."""
    return equal(probe.expected, recorded)


def equal(expected, recorded) -> bool:
    """Whether `recorded` is a repr that spells a value equal to `expected` (==); real instances' probes compare so
    too (composer.env.defences.real_probes)."""
    try:
        return type(recorded) is str and ast.literal_eval(recorded) == expected
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


@functools.lru_cache(maxsize=1024)
def _cached(instance_json: str) -> tuple[Probe, ...]:
    """A task's probes, from the disk cache (content-addressed: the record and VERSION) or made and stored there:
    a training run's many episodes and 004's evaluation jobs, each a process, grade the same tasks."""
    folder = files.publish(Path(os.environ.get("COMPOSER_CACHE", paths.CACHE)) / "probes" /
                           files.config_hash(record=instance_json, version=VERSION),
                           lambda tmp: (tmp / "probes.json").write_text(json.dumps(
                               [[p.file, list(p.setup), p.expr, repr(p.expected)] for p in _make(instance_json)])))
    return tuple(Probe(f, tuple(setup), expr, ast.literal_eval(expected))
                 for f, setup, expr, expected in json.loads((folder / "probes.json").read_text()))


def _make(instance_json: str) -> list[Probe]:
    instance = json.loads(instance_json)
    task = tasks._build(tasks._spec_of(instance))
    rng = random.Random(hashlib.sha256(instance["instance_id"].encode()).digest())
    candidates = []
    for tid in json.loads(instance["FAIL_TO_PASS"]):
        module, unit, setup, expr, _ = task.cases[tid]
        call = ast.parse(expr, mode="eval").body
        if not isinstance(call, ast.Call):
            continue
        slots = [a for a in [*call.args, *(k.value for k in call.keywords)] if literal(a) is not NOT_LITERAL]
        for _ in range(TRIES_PER_CASE if slots else 0):
            new = _with_argument_moved(expr, rng.randrange(len(slots)), rng)
            if new and new != expr and (tid, new) not in [(t, e) for t, e, *_ in candidates]:
                candidates.append((tid, new, f"from {task.pkg}.{module} import {unit}", setup))
    if not candidates:
        return []
    gold, buggy = _evaluate(instance, candidates)
    found = []
    for (tid, expr, _, setup), g, b in zip(candidates, gold, buggy):
        value = _literal_of(g)
        if value is not _NONE and value == value and (b[0] != "ok" or _literal_of(b) != value):
            found.append(Probe(tid.split("::")[0], tuple(setup), expr, value))
    rng.shuffle(found)
    return found[:PER_TASK]


def rewarded(n: int, **generate) -> tuple[list[dict], list[str]]:
    """n embedded tasks whose reward may train or evaluate: tasks.generate's, each with held-out probes (a task
    without any would leave its reward to the layers an in-process forger can rewrite: the outcome channel lives in
    the test process), and the instance ids of the validated candidates dropped for having none, for the task set
    to say how many. `generate`: tasks.generate's keywords (seed, split, difficulty, workers)."""
    dropped: list[str] = []
    return tasks.generate(n, accept=held_out, refused=dropped, **generate), dropped


GRADE_WITHOUT = "COMPOSER_GRADE_WITHOUT_PROBES"  # "1": grade tasks that have no held-out probes (smoke runs)


def refusal(instance: dict, opt_in: bool = False) -> str | None:
    """Why a reward on this embedded task must not be graded, or None: it has no held-out probes, so code appended
    to the library can rewrite the outcome channel to pass just the tests it saw (the canaries it never saw fail as
    they must) and nothing else stands. Fails closed: graded anyway only on an explicit opt-in (`opt_in`:
    EnvConfig.grade_without_probes; or COMPOSER_GRADE_WITHOUT_PROBES=1). Real instances: container.probes_refusal."""
    if opt_in or os.environ.get(GRADE_WITHOUT) == "1" or held_out(instance):
        return None
    return refusal_text(instance["instance_id"], "no moved input of its FAIL_TO_PASS calls shows the bug",
                        "probes.rewarded makes embedded task sets of them")


def opted_in_note(opt_in: bool = False) -> str:
    """What a reward graded without held-out probes on the opt-in is fit for, for the submit's info.grading; logged
    once a process."""
    how = "EnvConfig(grade_without_probes=True)" if opt_in else f"{GRADE_WITHOUT}=1"
    note = (f"WITHOUT HELD-OUT PROBES (opted in by {how}): a submission that answers only the inputs its tests show "
            "could forge this reward; fit for a smoke run only")
    _warn(note)
    return note


@functools.cache
def _warn(note: str) -> None:
    logging.getLogger(__name__).warning("grading rewards %s", note)


def refusal_text(instance_id: str, why: str, where: str) -> str:
    """The refusal's words, the same for embedded and real tasks: what is missing, why it matters, the way out."""
    return (f"refusing to grade {instance_id}: it has no held-out probes ({why}), so a submission that answers only "
            f"the inputs its tests show could forge its reward. Use tasks with probes ({where}), or, for a run whose "
            f"report says so, opt in: {GRADE_WITHOUT}=1 or EnvConfig(grade_without_probes=True)")


def held_out(instance: dict) -> list[Probe]:
    """The task's probes (see the module docstring); [] for a record the generator did not make."""
    if not instance["repo"].startswith(tasks.REPO_PREFIX):
        return []
    return list(_cached(json.dumps({k: instance[k] for k in tasks.SCHEMA_FIELDS}, sort_keys=True)))


_NONE = object()


def _literal_of(result):
    if result[0] != "ok":
        return _NONE
    try:
        return ast.literal_eval(result[1])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NONE


def _with_argument_moved(expr: str, slot: int, rng) -> str | None:
    """The call `expr` with its slot-th literal argument moved (composer.env.defences.literals.moved), or None."""
    tree = ast.parse(expr, mode="eval")
    call = tree.body
    nodes = [a for a in [*call.args, *(k.value for k in call.keywords)] if literal(a) is not NOT_LITERAL]
    new = moved(literal(nodes[slot]), rng)
    if new is None:
        return None
    replacement = ast.parse(repr(new), mode="eval").body
    for i, a in enumerate(call.args):
        if a is nodes[slot]:
            call.args[i] = replacement
    for k in call.keywords:
        if k.value is nodes[slot]:
            k.value = replacement
    return ast.unparse(tree)


def _evaluate(instance: dict, candidates: list) -> tuple[list, list]:
    """Each candidate's result under the gold and the buggy library, each run in the sandbox."""
    triples = json.dumps([(imp, list(setup), expr) for _, expr, imp, setup in candidates])
    results = []
    with tempfile.TemporaryDirectory(prefix="composer-probes-") as tmp:
        for build, name in ((tasks.gold_repo, "gold"), (tasks.materialize, "buggy")):
            repo = build(instance, Path(tmp) / name)
            rc, out, timed_out = sandbox.run_python(repo, ["-c", tasks.PROBE, triples], timeout_s=TIMEOUT_S)
            rows = json.loads(out.strip().splitlines()[-1]) if rc == 0 and not timed_out else None
            results.append(rows if rows and len(rows) == len(candidates) else [["raise", "none"]] * len(candidates))
    return results[0], results[1]
