"""composer/'s shape: its imports run one way (no circle, no import of a higher floor) and no module is too long.

    .venv/bin/pytest tests/test_layout.py

Every import statement counts, at module level or inside a function: an import deferred into a function still
ties the two modules together, and a circle hidden that way is still a circle. The floors are FLOORS below, lowest
first; each package's __init__ docstring says what it may import.
"""

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "composer"
MAX_LINES = 800
MAX_ENV_TOP = 6  # modules directly in composer/env/, besides __init__: the rest sits in its four sub-packages

# Lowest first. A module is on the floor whose name is the longest prefix of its own, and may import its own floor
# and the floors below. The first floor is what the environment may take from the rest of composer.
FLOORS = [
    ("composer.files", "composer.paths", "composer.progress", "composer.traces", "composer.threadsafe_ast"),
    ("composer.env.containment",),  # running untrusted code
    ("composer.env.embedded",),  # making the embedded tasks
    ("composer.env.defences",),  # deciding what a run proves
    ("composer.env.real",),  # real SWE-bench instances
    ("composer.env",),  # the environment: CodingEnv, its tools, server, taskset
    ("composer",),  # the shared library
    ("composer.costs",),  # what a live run costs and detects (the plan, the pilot)
    ("composer.collection",),  # 002: traces from two substrates
    ("composer.disagreement",),  # 003: pairs from teacher disagreement
    ("composer.ab.parameters",),  # 004's parameters, the typed config every step of 004 takes
    ("composer.ab.planting",),  # the planted checkpoint 004's positive control can start from
    ("composer.ab.preparation",),  # 004's inputs, below the plan and jobs made from them
    ("composer.ab",),  # 004: the A/B
    ("composer.bench",),
    ("composer.cli", "composer.__main__"),
]


def _modules() -> dict[str, Path]:
    """{dotted name: file} of every module under composer/ (a package by its __init__)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """The composer modules `name` imports, anywhere in its file; `from package import module` names the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package, one level up for each further dot
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # an attribute of a module, or a name from outside composer
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def floor(name: str) -> int:
    matches = [(len(prefix), i) for i, prefixes in enumerate(FLOORS) for prefix in prefixes
               if name == prefix or name.startswith(prefix + ".")]
    return max(matches)[1]


def upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
            for a, targets in sorted(graph.items()) for b in sorted(targets) if floor(b) > floor(a)]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circle():
    graph = _graph()
    found = [" <-> ".join(c) + ": " + "; ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a] & set(c)))
             for c in circles(graph)]
    assert not found, "import circles in composer/:\n" + "\n".join(found)


def test_no_import_from_a_lower_floor_to_a_higher_one():
    found = upward(_graph())
    assert not found, "imports against the floors (tests/test_layout.py FLOORS):\n" + "\n".join(found)


def test_no_module_over_800_lines():
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {path: n for path, n in lines.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split one along an idea): {long}"


def test_the_environment_keeps_few_modules_at_its_top():
    top = sorted(p.name for p in (PACKAGE / "env").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_ENV_TOP, f"composer/env/ holds {len(top)} modules at its top: {top}"


def test_the_checks_see_function_level_imports_circles_and_upward_imports():
    # What the checks exist to catch: an import inside a function (plan's of swebench), a circle, an upward import.
    modules = _modules()
    assert "composer.env.real.swebench" in _imports("composer.costs.plan", modules["composer.costs.plan"], modules)
    graph = {"composer.a": {"composer.b"}, "composer.b": {"composer.c"}, "composer.c": {"composer.a"},
             "composer.d": {"composer.a"}}
    assert circles(graph) == [["composer.a", "composer.b", "composer.c"]]
    assert upward({"composer.env.containment.limits": {"composer.env.defences.grading", "composer.files"},
                   "composer.traces": {"composer.zoo"}}) == [
        "composer.env.containment.limits (floor 1) imports composer.env.defences.grading (floor 3)",
        "composer.traces (floor 0) imports composer.zoo (floor 6)"]


def test_every_module_is_named_in_docs_layout():
    """docs/layout.md is where a reader finds where an idea lives: a module it does not name is one they cannot
    find."""
    page = (ROOT / "docs" / "layout.md").read_text()
    modules = [p for p in PACKAGE.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    missing = sorted(str(p.relative_to(PACKAGE)) for p in modules if p.name not in page)
    assert modules and not missing, f"docs/layout.md names no {missing}: add a line saying what each holds"


def aliased(source: str) -> list[str]:
    """The imports of composer's own modules or names under another name (`import x as y`), each `line: x as y`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            base = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            found += [f"{node.lineno}: {alias.name} as {alias.asname}" for alias in node.names
                      if alias.asname and (base or alias.name).split(".")[0] == "composer"]
    return found


def test_no_module_of_composer_is_imported_under_another_name():
    """A module's name is the one a reader searches for: one that needs an alias where it is imported collides with
    a parameter or variable, and the name to change is one of the two (the package, its tests and the notebooks)."""
    import nbformat

    sources = {str(p.relative_to(ROOT)): p.read_text() for folder in ("composer", "tests")
               for p in (ROOT / folder).rglob("*.py") if "fixtures" not in p.parts}
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = nbformat.read(path, as_version=4).cells
        sources[str(path.relative_to(ROOT))] = "\n".join(c.source for c in cells if c.cell_type == "code")
    found = [f"{path}:{line}" for path, source in sorted(sources.items()) for line in aliased(source)]
    assert not found, "imports of composer under another name:\n" + "\n".join(found)
    assert aliased("from composer import arms as ablib\nimport numpy as np\nfrom composer.x import y as z") == [
        "1: arms as ablib", "3: y as z"]
