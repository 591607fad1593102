"""Embedded SWE-bench-Lite-shaped coding tasks, generated offline and validated by running them.

    from composer.env.embedded import tasks

    records = tasks.generate(50, seed=0, split="train")            # list of SWE-bench Lite records
    tasks.save_jsonl(records, "train.jsonl"); records = tasks.load_jsonl("train.jsonl")
    repo = tasks.materialize(records[0], Path("work/repo"))         # buggy repo + its tests
    tasks.gold_repo(records[0], Path("work/gold"))                  # the same with the fix applied
    tasks.describe(records[0])   # {"family": "off_by_one", "module": "stats", "unit": "median", ...}

A task is a tiny package (`calc/ops.py`, `calc/stats.py`, ...) assembled from a library of
pure-function and small-class templates, with ONE bug injected by an AST mutation from
one of MUTATIONS, an issue-style problem statement that shows the symptom (a call, what it
returns, what it should return), pytest files (added by `test_patch`) and the gold fix
(`patch`). Records carry exactly the 12 SWE-bench Lite fields, so everything downstream
(agents, the swebench adapter, reports) treats embedded and real tasks alike.

Records carry no file contents, so `instance_id` encodes what rebuilds the repo:
`composer-embedded__calc-train-s123456-m1f3d0-xff` = package, split, task seed, modules,
functions per module, distractors, mutation families (bit mask over MUTATIONS). Rebuilding
is deterministic and checked against `base_commit` (a content hash of the buggy tree).

Validation: every emitted task was materialized buggy and gold and run with
`sandbox.run_pytest` (one pytest process per tree): FAIL_TO_PASS are exactly the tests
that fail buggy and pass gold (at least one, all in the mutated function), PASS_TO_PASS
the tests that pass both; a candidate with any test failing gold, a timeout, no failing
test, or a statement that quotes a changed line is dropped and the next seed tried.

Train/test disjointness: a bug site is (module template, function, family, site index),
each site belongs to exactly one split by a fixed hash (TEST_SHARE of them to "test"),
and a split only ever mutates its own sites. So no bug site (hence no gold patch) occurs
in both splits; the unmutated helper functions around it do recur, as real repos recur.
Task seeds come from a per-split stream, and instance ids carry the split.

Cost: about 0.5 s of CPU per candidate (two pytest runs and a probe, each ~0.25 s of
interpreter start-up); 50 tasks take ~25 s on 2 cores, ~7% of candidates being dropped
(equivalent mutants). The default Difficulty (one module, three tested functions, all
families) keeps the bug findable from the statement by a scripted expert that reads the
named function, while a policy that edits at random almost never passes FAIL_TO_PASS and
PASS_TO_PASS together. Output is deterministic unless a validation run hits its timeout
(10 s, far above the ~0.05 s the tests need), which only an overloaded host would cause.
"""

import ast
import difflib
import hashlib
import itertools
import json
import os
import random
import re
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from composer.env.containment import patches, sandbox
from composer.env.embedded import library
from composer.env.embedded.mutations import MUTATIONS, Site, catalogue
from composer.progress import bar

SCHEMA_FIELDS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
                 "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit")
GENERATOR_VERSION = "0.1"
REPO_PREFIX = "composer-embedded/"
SPLITS = ("train", "test")
VALIDATION_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Difficulty:
    n_modules: int = 1  # modules in the package, 1..len(library.LIBRARY)
    n_functions: int = 3  # tested functions/classes per module (capped at what a module has)
    families: tuple[str, ...] = MUTATIONS  # mutation families the bug is drawn from
    distractors: int = 0  # extra untested functions/classes mixed into the modules


# --- building a task from its spec -------------------------------------------------------------

_ID = re.compile(r"^composer-embedded__(?P<pkg>[a-z]+)-(?P<split>[a-z]+)-s(?P<seed>\d+)"
                 r"-m(?P<m>\d+)f(?P<f>\d+)d(?P<d>\d+)-x(?P<x>[0-9a-f]+)$")


@dataclass(frozen=True)
class _Spec:
    task_seed: int
    split: str
    difficulty: Difficulty


@dataclass
class _Task:
    spec: _Spec
    site: Site
    pkg: str
    base: dict[str, str]  # buggy tree without tests: path -> text
    gold_file: tuple[str, str]  # (path, fixed text)
    tests: dict[str, str]  # test files: path -> text
    cases: dict[str, tuple]  # node id -> (module, unit, setup, expr, expected)

    @property
    def instance_id(self) -> str:
        d = self.spec.difficulty
        mask = sum(1 << i for i, f in enumerate(MUTATIONS) if f in d.families)
        return (f"composer-embedded__{self.pkg}-{self.spec.split}-s{self.spec.task_seed}"
                f"-m{d.n_modules}f{d.n_functions}d{d.distractors}-x{mask:02x}")


def _check(difficulty: Difficulty, split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    modules = len(library.LIBRARY)
    if not 1 <= difficulty.n_modules <= modules or difficulty.n_functions < 1 or difficulty.distractors < 0:
        raise ValueError(f"bad difficulty {difficulty}: need 1 <= n_modules <= {modules}, "
                         "n_functions >= 1, distractors >= 0")
    unknown = set(difficulty.families) - set(MUTATIONS)
    if unknown or not difficulty.families:
        raise ValueError(f"families must be a non-empty subset of {MUTATIONS}, got {difficulty.families}")


def _build(spec: _Spec) -> _Task:
    d = spec.difficulty
    rng = random.Random(spec.task_seed)
    pool = {f: [s for s in catalogue() if s.family == f and s.split == spec.split] for f in MUTATIONS}
    families = [f for f in MUTATIONS if f in d.families and pool[f]]
    site = rng.choice(pool[rng.choice(families)])
    others = [m for m in library.LIBRARY if m != site.module]
    modules = [m for m in library.LIBRARY if m in {site.module, *rng.sample(others, d.n_modules - 1)}]
    chosen = {}
    for m in modules:
        units = list(library.units(m))
        rest = [u for u in units if u != site.unit]
        k = min(d.n_functions, len(units)) - (m == site.module)
        picked = set(rng.sample(rest, k)) | ({site.unit} if m == site.module else set())
        chosen[m] = [u for u in units if u in picked]
    spare = [(m, u) for m in modules for u in library.units(m) if u not in chosen[m]]
    distract = set(rng.sample(spare, min(d.distractors, len(spare))))

    pkg = library.LIBRARY[site.module][0]
    base = {"README.md": f"# {pkg}\n\nSmall pure-Python helpers ({', '.join(modules)}).\n",
            "pyproject.toml": f'[project]\nname = "{pkg}"\nversion = "0.1.0"\n\n'
                              '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
            f"{pkg}/__init__.py": f'"""{pkg}: small pure-Python helpers."""\n'}
    tests, cases = {}, {}
    for m in modules:
        units = [u for u in library.units(m) if u in chosen[m] or (m, u) in distract]
        src = {u: library.units(m)[u] for u in units}
        path = f"{pkg}/{m}.py"
        if m == site.module:
            gold_text = _module_text(m, src)
            src[site.unit] = site.buggy
        base[path] = _module_text(m, src)
        text, file_cases = _test_file(pkg, m, chosen[m])
        tests[f"tests/test_{m}.py"] = text
        cases.update({f"tests/test_{m}.py::{name}": c for name, c in file_cases.items()})
    return _Task(spec, site, pkg, base, (f"{pkg}/{site.module}.py", gold_text), tests, cases)


def _module_text(module: str, units: dict[str, str]) -> str:
    return f'"""{library.LIBRARY[module][1]}"""\n\n\n' + "\n\n\n".join(units.values()) + "\n"


def library_sources() -> dict[str, str]:
    """{"package/module.py": correct source} of every library module, laid out as a task repo lays it out.

    The code every task is cut from, without bugs: the offline models' stand-in for the code a real
    base model saw in pretraining (composer.zoo). Tasks differ from it by their one injected bug."""
    return {f"{pkg}/{m}.py": _module_text(m, library.units(m)) for m, (pkg, _, _, _) in library.LIBRARY.items()}


def _test_file(pkg: str, module: str, units: list[str]) -> tuple[str, dict]:
    funcs, cases, uses_raises = [], {}, False
    for unit in units:
        expected = library.expected(module, unit)
        for k, (case, (kind, value)) in enumerate(zip(library.LIBRARY[module][3][unit], expected, strict=True), 1):
            setup, expr = library.split_case(case)
            name = f"test_{unit.lower()}_{k}"
            body = [f"    {s}" for s in setup]
            if kind == "raise":
                uses_raises = True
                body += [f"    with pytest.raises({value}):", f"        {expr}"]
            else:
                assert ast.literal_eval(repr(value)) == value, f"{module}.{unit} case {k}: not a literal"
                op = "is" if value is None or isinstance(value, bool) else "=="
                body.append(f"    assert {expr} {op} {value!r}")
            funcs.append(f"def {name}():\n" + "\n".join(body) + "\n")
            cases[name] = (module, unit, setup, expr, (kind, value))
    header = ("import pytest\n\n" if uses_raises else "") + f"from {pkg}.{module} import {', '.join(units)}\n"
    return header + "\n\n" + "\n\n".join(funcs), cases


# --- hashes and diffs -----------------------------------------------------------------------


def _tree_hash(files: dict[str, str]) -> str:
    h = hashlib.sha1()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()


def _blob(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _git_diff(old: dict[str, str], new: dict[str, str]) -> str:
    """A git-style unified diff (applies with `patch -p1` and `git apply`)."""
    out = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        if a is None:
            out.append(f"new file mode 100644\nindex 0000000..{_blob(b)}\n")
        elif b is None:
            out.append(f"deleted file mode 100644\nindex {_blob(a)}..0000000\n")
        else:
            out.append(f"index {_blob(a)}..{_blob(b)} 100644\n")
        old_name, new_name = "/dev/null" if a is None else f"a/{path}", "/dev/null" if b is None else f"b/{path}"
        out += difflib.unified_diff((a or "").splitlines(True), (b or "").splitlines(True), old_name, new_name)
    return "".join(out)


def _changed_lines(diff: str) -> list[str]:
    return [line[1:].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()]


# --- records ----------------------------------------------------------------------------------


def _bug(task: _Task) -> tuple[str, str]:
    """The task's bug as generate() tells repeats apart, and as its record carries it: base tree, gold patch."""
    path, gold = task.gold_file
    return _tree_hash(task.base), _git_diff({path: task.base[path]}, {path: gold})


def _record(task: _Task, f2p: list[str], p2p: list[str], statement: str) -> dict:
    base_commit, patch = _bug(task)
    created = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=task.spec.task_seed % (366 * 86400))
    rec = {
        "instance_id": task.instance_id,
        "repo": REPO_PREFIX + task.pkg,
        "base_commit": base_commit,
        "patch": patch,
        "test_patch": _git_diff({}, task.tests),
        "problem_statement": statement,
        "hints_text": "",
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "version": GENERATOR_VERSION,
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": hashlib.sha1(f"composer-embedded {GENERATOR_VERSION}".encode()).hexdigest(),
    }
    assert tuple(rec) == SCHEMA_FIELDS
    return rec


def _spec_of(instance: dict) -> _Spec:
    iid = instance.get("instance_id", "?")
    m = _ID.match(iid)
    if not str(instance.get("repo", "")).startswith(REPO_PREFIX) or not m:
        raise ValueError(f"{iid}: not an embedded task (repo {instance.get('repo')!r}); a real SWE-bench repo needs "
                         "its instance image: CodingEnv runs it in a container (composer.env.real.container)")
    families = tuple(f for i, f in enumerate(MUTATIONS) if int(m["x"], 16) >> i & 1)
    d = Difficulty(int(m["m"]), int(m["f"]), families, int(m["d"]))
    _check(d, m["split"])
    return _Spec(int(m["seed"]), m["split"], d)


def describe(instance: dict) -> dict:
    """What an embedded record's bug is (for per-family breakdowns; never show this to a policy)."""
    task = _build(_spec_of(instance))
    s = task.site
    return {"family": s.family, "module": s.module, "unit": s.unit, "site": s.key, "split": task.spec.split,
            "task_seed": task.spec.task_seed, "difficulty": task.spec.difficulty}


def _write(files: dict[str, str], dest: Path) -> None:
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def materialize(instance: dict, dest: Path, *, with_tests: bool = True) -> Path:
    """Write the repo at base_commit into dest (new or empty) and, with_tests, apply test_patch.

    with_tests=False gives what a SWE-bench agent sees (the harness adds the tests after the
    model patch). ValueError for a non-embedded record or one whose base_commit does not
    match the rebuilt tree (tampered, or made by another generator version)."""
    task = _build(_spec_of(instance))
    if _tree_hash(task.base) != instance.get("base_commit"):
        raise ValueError(f"{instance['instance_id']}: base_commit {instance.get('base_commit')} does not match the "
                         f"rebuilt tree {_tree_hash(task.base)} (tampered record or generator version mismatch)")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    _write(task.base, dest)
    if with_tests:
        patches.apply_unified_diff(dest, instance["test_patch"])
    return dest


def gold_repo(instance: dict, dest: Path) -> Path:
    """materialize + the gold patch."""
    materialize(instance, dest)
    patches.apply_unified_diff(dest, instance["patch"])
    return dest


def save_jsonl(instances, path) -> None:
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in instances))


def load_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# --- generation with validation -------------------------------------------------------------


PROBE = """import json, sys
out = []
for imp, setup, expr in json.loads(sys.argv[1]):
    ns = {}
    try:
        exec(imp, ns)
        for stmt in setup:
            exec(stmt, ns)
        out.append(["ok", repr(eval(expr, ns))])
    except Exception as e:
        out.append(["raise", type(e).__name__, str(e)])
print()
print(json.dumps(out))
"""


def _validate(spec: _Spec, accept=None) -> tuple[dict | None, bool]:
    """The task's record if it validates in the sandbox, else None; and whether `accept` (if any) takes it."""
    record = _validated(spec)
    return record, record is not None and (accept is None or bool(accept(record)))


def _validated(spec: _Spec) -> dict | None:
    task = _build(spec)
    provisional = _record(task, [], [], "")
    with tempfile.TemporaryDirectory(prefix="composer-task-") as tmp:
        buggy = materialize(provisional, Path(tmp) / "buggy")
        gold = gold_repo(provisional, Path(tmp) / "gold")
        runs = [sandbox.run_pytest(repo, [], timeout_s=VALIDATION_TIMEOUT_S) for repo in (buggy, gold)]
        if any(r.error for r in runs) or set(runs[1].outcomes) != set(task.cases) or not all(runs[1].outcomes.values()):
            return None
        ids = list(task.cases)
        f2p = [t for t in ids if not runs[0].outcomes.get(t, False)]
        p2p = [t for t in ids if runs[0].outcomes.get(t, False)]
        if not f2p or any(task.cases[t][1] != task.site.unit for t in f2p):
            return None
        probe = [(f"from {task.pkg}.{task.site.module} import {task.site.unit}", list(task.cases[t][2]),
                  task.cases[t][3]) for t in f2p[:2]]
        rc, out, timed_out = sandbox.run_python(buggy, ["-c", PROBE, json.dumps(probe)],
                                                timeout_s=VALIDATION_TIMEOUT_S)
        if rc != 0 or timed_out:
            return None
        actual = json.loads(out.strip().splitlines()[-1])
    statement = _statement(task, [task.cases[t] for t in f2p[:2]], actual)
    record = _record(task, f2p, p2p, statement)
    if any(len(line) >= 4 and line in statement for line in _changed_lines(record["patch"])):
        return None
    return record


def _statement(task: _Task, cases: list[tuple], actual: list[list]) -> str:
    rng = random.Random(f"statement/{task.spec.task_seed}")
    module, unit = task.site.module, task.site.unit
    qual = f"{task.pkg}.{module}.{unit}"

    def clip(text):
        return text if len(text) <= 200 else text[:200] + "..."

    def phrases(case, got):
        _, _, setup, expr, (kind, value) = case
        want = f"raise `{value}`" if kind == "raise" else f"return `{clip(repr(value))}`"
        have = f"returns `{clip(got[1])}`" if got[0] == "ok" else f"raises `{got[1]}: {clip(got[2])}`"
        repro = [f">>> from {task.pkg}.{module} import {unit}"] + [f">>> {s}" for s in setup] + [f">>> {expr}"]
        repro += [clip(got[1])] if got[0] == "ok" else ["Traceback (most recent call last):", "  ...",
                                                         f"{got[1]}: {clip(got[2])}"]
        return expr, want, have, "\n".join(repro)

    expr, want, have, repro = phrases(cases[0], actual[0])
    title = rng.choice([f"`{qual}` gives a wrong result", f"Wrong result from `{qual}`",
                        f"{qual}: unexpected behaviour for some inputs", f"Bug in `{qual}`"])
    lead = rng.choice([f"`{expr}` {have}, but it should {want}.",
                       f"I expected `{expr}` to {want}, but it {have}.",
                       f"When I call `{expr}` it {have}. It should {want}."])
    parts = [title, "", lead, "", "```python", repro, "```"]
    if len(cases) > 1:
        expr2, want2, have2, _ = phrases(cases[1], actual[1])
        parts += ["", f"Another example: `{expr2}` {have2}; it should {want2}."]
    parts += ["", rng.choice(["Seen with the current main branch.", "Python 3.11, latest release.",
                              "Found while writing a small script on top of the package."])]
    return "\n".join(parts) + "\n"


def _task_seed(seed: int, split: str, i: int) -> int:
    return int(hashlib.sha256(f"{seed}/{split}/{i}".encode()).hexdigest(), 16) % 10**9


def generate(n: int, *, seed: int = 0, split: str = "train", difficulty: Difficulty | None = None,
             workers: int | None = None, accept=None, refused: list | None = None) -> list[dict]:
    """n validated tasks; the same arguments give byte-identical records.

    Candidates are validated `workers` at a time (default: the usable CPUs) but accepted
    strictly in seed order, so parallelism never changes the output. `accept(record) -> bool`, when given, is a
    further test a validated record must pass, run in the workers (a layer above supplies it: tasks whose reward
    counts need held-out probes, composer.env.defences.probes.rewarded); `refused`, when given, gets the instance id
    of each distinct bug it refused and never took (the same bug may come again with other tests, and be taken
    then), in the order they were met."""
    difficulty = difficulty or Difficulty()
    _check(difficulty, split)
    # Built here, before the threads: CPython 3.11's ast.parse is not thread-safe ("AST constructor recursion
    # depth mismatch"), and a cold catalogue() would otherwise be parsed by every worker at once.
    sites = sum(s.split == split and s.family in difficulty.families for s in catalogue())
    if (difficulty.n_modules, difficulty.n_functions, difficulty.distractors) == (1, 1, 0) and n > sites:
        # Each task is then one bug site alone in its module: no more distinct tasks exist than sites (fewer, as
        # ~7% are equivalent mutants). Without this check the loop below would validate 20 * n candidates first.
        raise ValueError(f"{n} tasks asked, but the {split} split has only {sites} bug sites for {difficulty}, and "
                         "with one function per module each task is one site: ask for fewer, or raise n_functions, "
                         "n_modules or distractors")
    workers = workers or len(os.sched_getaffinity(0))
    specs = (_Spec(_task_seed(seed, split, j), split, difficulty) for j in itertools.count())
    records, seen, pending, tried, left_out = [], set(), deque(), 0, {}
    # validating a candidate runs its tests (and accept's probes): the report zoo's 380 take minutes to say nothing
    with ThreadPoolExecutor(workers) as pool, bar(total=n, desc=f"{split} tasks", unit="task") as taken:
        while len(records) < n:
            while len(pending) < 2 * workers:
                if tried > 20 * n + 50:
                    raise RuntimeError(f"only {len(records)}/{n} tasks validated after {tried} candidates "
                                       f"({difficulty})")
                spec = next(specs)
                tried += 1
                key = _bug(_build(spec))  # no run needed
                if key not in seen:  # a bug already taken would be skipped as a repeat: not validated
                    pending.append((key, pool.submit(_validate, spec, accept)))
            key, job = pending.popleft()
            rec, accepted = job.result()
            if rec and key not in seen:
                if accepted:  # a refused bug may come again with other tests, which accept may take
                    seen.add(key)
                    records.append(rec)
                    taken.update()
                    left_out.pop(key, None)
                else:
                    left_out.setdefault(key, rec["instance_id"])
        for _, job in pending:
            job.cancel()
    if refused is not None:
        refused.extend(left_out.values())
    return records


def candidates(positions, *, seed: int = 0, split: str = "train", difficulty: Difficulty | None = None,
               workers: int | None = None, accept=None) -> list[dict | None]:
    """The candidates at these positions of generate()'s sequence (same seed, split, difficulty and accept), each
    validated as generate() validates it: its record, or None where it does not validate or accept refuses it.

    generate(n) keeps, in position order, the first n that validate and differ from those kept before, so positions
    drawn below the last kept one's are a sample of its n tasks, without building the other n - 1 (a position that
    repeats a kept task is that task under another instance id). `position` maps a record back."""
    difficulty = difficulty or Difficulty()
    _check(difficulty, split)
    catalogue()  # parsed before the threads, as in generate()
    specs = [_Spec(_task_seed(seed, split, j), split, difficulty) for j in positions]
    with ThreadPoolExecutor(workers or len(os.sched_getaffinity(0))) as pool:
        return [rec if accepted else None for rec, accepted in pool.map(_validate, specs, [accept] * len(specs))]


def position(record: dict, *, seed: int = 0, limit: int = 100_000) -> int:
    """Where in generate()'s sequence (seed, and the record's own split) a task's candidate stands."""
    spec = _spec_of(record)
    for j in range(limit):
        if _task_seed(seed, spec.split, j) == spec.task_seed:
            return j
    raise ValueError(f"{record['instance_id']} is not among the first {limit} candidates of seed {seed}")
