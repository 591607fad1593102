"""Held-out probes for real SWE-bench instances: a FAIL_TO_PASS test's call on an input no test shows, its value
the gold patch's.

    from composer.env.defences import real_probes

    made = real_probes.candidates(text, "tests/test_x.py::TestX::test_y", rng)  # Probe(..., expected="") per move
    held = composer.env.real.container.held_out(record)   # Held(probes=(Probe(..., expected="raise ValueError"), ...))
    text, named = real_probes.plant(text, list(held.probes), rng)   # each written in as a test of a fresh name
    missed = real_probes.missed(named, real_probes.recorded(log))   # those whose outcome is not the gold one

What composer.env.defences.probes does for embedded tasks, on a real test suite. A probe is the test's own code up to
one call (its setup statements, asserts left out), with one literal moved as composer.env.defences.canaries moves a
compared value: a literal argument of the call (or of a call inside it), or the literal a setup statement assigns to a
name the call reads. It records what the call gives (`record_property`), the value's repr or "raise <exception class
name>" (a call the fix makes raise, as `pytest.raises` tests expect), and asserts nothing; grading compares that
with the gold patch's value outside the test process. It runs where its test ran: a method of the test's class
(the class's fixtures are the probe's) or a module-level function, taking the test's fixtures.

The expected values come from running the instance itself, not from a generator: composer.env.real.container.held_out
runs the candidates once per image and instance on the gold patch (twice, so that a value that changes from run to
run is dropped) and on the base commit, keeps those whose gold value is a literal or a raise and where the base
gives another value or none, and caches them. A test that is parametrized or decorated (its arguments or marks
would not carry over), or that calls nothing with a literal input, gives no candidate.
"""

import ast
import copy
import json
import random
import textwrap
from dataclasses import dataclass

from composer.env.defences import canaries, literals, probes

VERSION = 1  # of how real probes are made and run: part of their cache key
MAX_CANDIDATES = 64  # tried per instance (each a test in the one-time runs)
TIMEOUT_S = 600.0  # a one-time run (the eval script's setup, or the candidates' tests) is cut after this
RAISED = "raise "  # a recorded outcome that is an exception: "raise ValueError" (a repr never starts so)


@dataclass(frozen=True)
class Probe:
    file: str  # the test file it goes into (its imports are the probe's)
    cls: str | None  # the test class it becomes a method of, or None: a module-level function
    args: tuple[str, ...]  # the fixtures its test takes
    setup: tuple[str, ...]  # the test's statements before the call, one literal perhaps moved
    expr: str  # the call
    expected: str  # the gold patch's recorded outcome: a literal's repr, or RAISED + the exception's class name


@dataclass(frozen=True)
class Held:
    probes: tuple[Probe, ...]  # what grading plants
    why: str | None  # why there are none, where there are none
    candidates: int  # tried when they were computed
    seconds: float  # the computation's wall time


def dumps(held: Held) -> str:
    return json.dumps({"probes": [[p.file, p.cls, list(p.args), list(p.setup), p.expr, p.expected]
                                  for p in held.probes], "why": held.why, "candidates": held.candidates,
                       "seconds": held.seconds})


def loads(text: str) -> Held:
    data = json.loads(text)
    return Held(tuple(Probe(f, cls, tuple(args), tuple(setup), expr, expected)
                      for f, cls, args, setup, expr, expected in data["probes"]),
                data["why"], data["candidates"], data["seconds"])


def source(probe: Probe, name: str) -> str:
    """The probe as a test function (unindented; a method where probe.cls): it records the outcome and asserts
    nothing."""
    params = ["self"] * bool(probe.cls) + ["record_property"] + [a for a in probe.args if a != "record_property"]
    body = "\n".join([*probe.setup, "try:", f"    recorded = repr({probe.expr})", "except Exception as raised:",
                      f"    recorded = {RAISED!r} + type(raised).__name__", "record_property('value', recorded)"])
    return f"def {name}({', '.join(params)}):\n" + textwrap.indent(body, "    ") + "\n"


def matches(probe: Probe, recorded) -> bool:
    """Whether a run's recorded outcome is the gold one: the same exception class name, or a value equal to it (==,
    as the tests compare)."""
    if probe.expected.startswith(RAISED):
        return recorded == probe.expected
    return probes.equal(ast.literal_eval(probe.expected), recorded)


def comparable(outcome) -> bool:
    """Whether a recorded outcome can be a probe's expected one: a raise, or the repr of a literal equal to itself
    (not NaN)."""
    if type(outcome) is str and outcome.startswith(RAISED):
        return True
    try:
        return probes.equal(ast.literal_eval(outcome), outcome)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def candidates(text: str, test_id: str, rng: random.Random, tries: int = probes.TRIES_PER_CASE) -> list[Probe]:
    """The probes one FAIL_TO_PASS test (`text`: its file after the test patch) could give, expected values not yet
    known: for each call statement of its body (`x = f(...)`, `f(...)`, `assert f(...) == v`, `assert f(...)`, the
    first statement of a `with pytest.raises(...)` block), up to `tries` moves of one literal input."""
    path, _, rest = test_id.partition("::")
    parts = rest.split("::")
    if not rest or "[" in rest or len(parts) > 2:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    cls = parts[0] if len(parts) == 2 else None
    scope = tree.body if cls is None else next(
        (n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), [])
    func = next((n for n in scope if isinstance(n, ast.FunctionDef) and n.name == parts[-1]), None)
    if func is None or func.decorator_list or func.args.vararg or func.args.kwarg or func.args.kwonlyargs \
            or func.args.posonlyargs or func.args.defaults:
        return []
    args = tuple(a.arg for a in func.args.args)[1 if cls else 0:]
    found, seen = [], set()
    for i, stmt in enumerate(func.body):
        if _call(stmt) is None:
            continue
        setup = [s for s in func.body[:i] if not isinstance(s, ast.Assert)]  # asserts only check
        for _ in range(tries if _slots(setup, _call(stmt)) else 0):
            moved = _moved(setup, stmt, rng)
            if moved and moved not in seen:
                seen.add(moved)
                found.append(Probe(path, cls, args, moved[0], moved[1], ""))
    return found


def _call(stmt) -> ast.Call | None:
    """The call a test statement makes, where it is one the probe can record (see candidates)."""
    if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call):
        return stmt.value
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return next((side for side in (test.left, test.comparators[0]) if isinstance(side, ast.Call)), None)
        return test if isinstance(test, ast.Call) else None
    if isinstance(stmt, ast.With) and stmt.body and not isinstance(stmt.body[0], ast.Assert) and any(
            isinstance(item.context_expr, ast.Call) and ast.unparse(item.context_expr.func) in ("pytest.raises",
                                                                                                 "raises")
            for item in stmt.items):
        return _call(stmt.body[0])
    return None


def _slots(setup: list, call: ast.Call) -> list[tuple[object, str, int | None]]:
    """Where the literal inputs of a call sit, as (parent node, field, index in the field's list or None): the
    literal arguments of the call and of calls inside it, and the last value each name the call reads was given in
    the setup, where that is a literal assignment."""
    movable = lambda node: literals.moved(literals.literal(node), random.Random(0)) is not None  # noqa: E731
    found = []
    for node in ast.walk(call):
        if isinstance(node, ast.Call):
            found += [(node, "args", j) for j, a in enumerate(node.args) if movable(a)]
            found += [(k, "value", None) for k in node.keywords if movable(k.value)]
    read = {n.id for n in ast.walk(call) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    last = {}
    for stmt in setup:  # a later statement that binds the name some other way wins over an earlier literal
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in read:
                last[n.id] = stmt
    for name, stmt in last.items():
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and movable(stmt.value):
            found.append((stmt, "value", None))
    return found


def _moved(setup: list, stmt, rng: random.Random) -> tuple[tuple[str, ...], str] | None:
    """(setup sources, the call's source) with one literal input of the call moved
    (composer.env.defences.literals.moved), on copies of the test's nodes; None where the draw gave nothing new."""
    setup, stmt = copy.deepcopy(setup), copy.deepcopy(stmt)
    call = _call(stmt)
    slots = _slots(setup, call)
    parent, field, index = slots[rng.randrange(len(slots))]
    node = getattr(parent, field) if index is None else getattr(parent, field)[index]
    new = literals.moved(literals.literal(node), rng)
    if new is None or new == literals.literal(node):
        return None
    replacement = ast.parse(repr(new), mode="eval").body
    if index is None:
        setattr(parent, field, replacement)
    else:
        getattr(parent, field)[index] = replacement
    return tuple(ast.unparse(s) for s in setup), ast.unparse(call)


def plant(text: str, held: list[Probe], rng: random.Random) -> tuple[str, dict[str, Probe]]:
    """`text` (a test file, canaries already planted) with each probe written in under a fresh name, before a
    randomly chosen test of its class or module or at its end; {name: probe}. A probe whose class the file lacks, or
    a file that does not parse, gets nothing written."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text, {}
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names = canaries._Names(rng)
    inserts: dict[int, list[str]] = {}
    planted = {}
    for probe in held:
        if probe.cls is None:
            body, indent, end = tree.body, "", len(lines)
        else:
            cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == probe.cls), None)
            if cls is None:
                continue
            body, indent, end = cls.body, " " * cls.body[0].col_offset, cls.end_lineno
        slots = [min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1 for n in body
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")]
        name = names.take(taken)
        planted[name] = probe
        inserts.setdefault(rng.choice([*slots, end]), []).append(
            "\n" + textwrap.indent(source(probe, name), indent) + "\n")
    out = []
    for i in range(len(lines) + 1):
        out += inserts.get(i, [])
        if i < len(lines):
            out.append(lines[i])
    return "".join(out), planted


def recorded(log: str) -> dict[str, list]:
    """{test function name: the values it recorded}, from the grading plugin's log (a JSON line per call that
    recorded properties: [node id, {name: value}])."""
    found: dict[str, list] = {}
    for line in log.splitlines():
        try:
            nodeid, props = json.loads(line)
            found.setdefault(nodeid.rsplit("::", 1)[-1].split("[")[0], []).append(props.get("value"))
        except (ValueError, TypeError, AttributeError):
            continue  # the run's uid can write the log: a line it mangled counts for nothing
    return found


def missed(planted: dict[str, Probe], values: dict[str, list]) -> list[str]:
    """What the probes say: those that recorded no value, more than one (guesses), or another than the gold one."""
    out = []
    for name, probe in planted.items():
        got = values.get(name, [])
        if len(got) != 1 or not matches(probe, got[0]):
            where = f"{probe.file}::{probe.cls + '::' if probe.cls else ''}{name}"
            what = repr(got[0]) if len(got) == 1 else f"{len(got)} values"
            out.append(f"probe {where} ({probe.expr}) recorded {what}, not the gold patch's outcome")
    return out
