"""Every spike notebook in notebooks/: hygiene of the committed file, and a smoke run with its defaults.

    .venv/bin/pytest tests/test_notebooks.py                 # all notebooks
    .venv/bin/pytest tests/test_notebooks.py -k 005          # one

The smoke run goes through composer.run (papermill + nbconvert) into tmp_path. Its defaults are sized for the
suite's budget of 60 s per notebook on 2 idle cores, kernel start included: the time is printed, not asserted.
"""

import ast
import functools
import re
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat
import papermill
import pytest

from composer import lab, report, run
from composer.paths import NOTEBOOKS, ROOT

# The smoke defaults are sized to run in under BUDGET_S on 2 idle cores; the time is printed with every run.
# Wall time on a shared machine is not a pass/fail signal (speed lives in benchmarks): a smoke run took 244 s
# beside other work, 4x its budget. Only a runaway default fails the test: papermill stops a cell that runs past
# RUNAWAY_S (a hang guard far above any loaded smoke run, which a default at report scale, 20-80 min for 002a-004,
# crosses) and the run raises; no elapsed time is asserted.
BUDGET_S = 60
RUNAWAY_S = 20 * BUDGET_S
NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("*.ipynb"))
ids = [p.stem for p in NOTEBOOK_FILES]


def test_there_are_notebooks():
    assert NOTEBOOKS.is_dir() and NOTEBOOK_FILES, f"no spike notebooks in {NOTEBOOKS}"


def _stored(path) -> str:
    """The notebook as git stores it (the index: through make install's notebook filter), where `path` is tracked;
    else the file. A notebook run and saved in JupyterLab keeps its outputs on disk, and is still clean."""
    done = subprocess.run(["git", "cat-file", "blob", f":{path.relative_to(ROOT)}"], cwd=ROOT, capture_output=True,
                          text=True)
    return done.stdout if done.returncode == 0 else path.read_text()


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=ids)
def test_hygiene(path):
    nb = nbformat.reads(_stored(path), as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), "the first cell is a markdown `# title`"
    assert nb.metadata.kernelspec.name == "composer", "the project's kernel (make lab registers it); papermill runs python3"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"cell {i} was committed with outputs"
    tagged = [cell for cell in nb.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0].cell_type == "code", "exactly one code cell tagged `parameters`"
    names = []
    for stmt in ast.parse(tagged[0].source).body:
        assert isinstance(stmt, (ast.Assign, ast.AnnAssign)), f"line {stmt.lineno}: the parameters cell holds assignments only"
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        assert len(targets) == 1 and isinstance(targets[0], ast.Name), f"line {stmt.lineno}: one plain name per assignment"
        ast.literal_eval(stmt.value)  # raises on anything but a literal
        names.append(targets[0].id)
    # papermill parses the cell with a regex: a line it cannot read (an "=" in the comment,
    # an `int | None` annotation) is silently not a parameter, and overrides of it are refused.
    assert list(papermill.inspect_notebook(str(path))) == names, "papermill must see every assignment as a parameter"


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=ids)
def test_no_notebook_rewards_embedded_tasks_without_probes(path):
    """A task set whose reward trains or evaluates comes from probes.rewarded (every task with held-out probes): on a
    task without them, a forger that reports its seen tests as passed gets reward 1.0 (tests/test_env_probes.py).
    tasks.generate alone makes such tasks (CodingEnv.reset refuses them, unless a run opts in), so no spike calls
    it."""
    code = "\n".join(c.source for c in nbformat.reads(_stored(path), as_version=4).cells if c.cell_type == "code")
    assert "tasks.generate(" not in code, "use probes.rewarded(n, ...)[0]: every task with held-out probes"


def _as_jupyterlab_saves_it(path):
    """The notebook at `path` run and saved: outputs, execution counts, the kernel's language_info and the cell
    timings JupyterLab records (what made a tracked file grow 16 KB -> 215 KB when its autosave wrote it)."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                    "codemirror_mode": {"name": "ipython", "version": 3}}
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = n + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran cell {n}\n"),
                        nbformat.v4.new_output("display_data", data={"text/plain": "a chart"})]
        cell.metadata["execution"] = {"iopub.execute_input": "2026-12-05T10:00:00.000Z",
                                      "shell.execute_reply": "2026-12-05T10:00:01.000Z"}
    nbformat.write(nb, path)


def test_running_and_saving_a_notebook_leaves_git_status_clean(tmp_path):
    """make install's notebook-filter (nbstripout as git's clean filter) in a repository of the notebooks as
    committed: git stores each one exactly as it is (so a fresh checkout is already clean); after every notebook is
    run and saved and make lab's post-save hook has run, git status shows nothing to commit while the files on disk
    keep their outputs; a real edit still shows."""
    repo = tmp_path / "repo"
    shutil.copytree(NOTEBOOKS, repo / "notebooks")

    def git(*args):
        done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    git("init", "-q")
    made = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "notebook-filter", f"PY={sys.executable}",
                           "-o", ".venv/.installed"], cwd=repo, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    git("add", "notebooks")
    git("commit", "-qm", "notebooks")
    for path in NOTEBOOK_FILES:
        stored = git("show", f"HEAD:notebooks/{path.name}")
        assert stored == path.read_text(), f"{path.name}: not as the filter stores it (run make install, then git add)"
        _as_jupyterlab_saves_it(repo / "notebooks" / path.name)
        assert "ran cell 0" in (repo / "notebooks" / path.name).read_text()
    assert git("diff", "--no-textconv") == ""  # what git would store: nothing changed
    for path in NOTEBOOK_FILES:  # as jupyter_server calls make lab's hook after each save
        lab.post_save(os_path=str(repo / "notebooks" / path.name), model={"type": "notebook"})
    assert git("status", "--porcelain") == ""
    edited = repo / "notebooks" / NOTEBOOK_FILES[0].name
    nb = nbformat.read(edited, as_version=4)
    nb.cells[0].source += "\nA researcher's note."
    nbformat.write(nb, edited)
    assert not lab.refresh(edited) and git("status", "--porcelain") == f" M notebooks/{edited.name}\n"


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=ids)
def test_smoke(path, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(papermill, "execute_notebook",
                        functools.partial(papermill.execute_notebook, execution_timeout=RUNAWAY_S))
    t0 = time.time()
    code = run.run(path.stem, reports_dir=tmp_path)
    elapsed = time.time() - t0
    captured = capsys.readouterr()
    with capsys.disabled():
        print(f"\n{path.stem}: {elapsed:.1f} s (budget {BUDGET_S} s{', over' if elapsed > BUDGET_S else ''})")
    assert code == 0, captured.err
    results = report.read_results(tmp_path / path.stem / "executed.ipynb")
    assert results["spike"] == path.stem and results["verdict"] in report.VERDICTS
    assert results["criteria"] and all(c["comparator"] in report.COMPARATORS for c in results["criteria"])
    assert results["backend"] == "offline", "the default parameters run offline"
    nb = nbformat.read(tmp_path / path.stem / "executed.ipynb", as_version=4)
    first = next(out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert results["verdict"] in first.get("data", {}).get("text/html", ""), "the first output is the verdict banner"
    page = (tmp_path / f"{path.stem}.html").read_text() + (tmp_path / f"{path.stem}.json").read_text()
    here = "|".join(re.escape(p) for p in (str(ROOT), tempfile.gettempdir() + "/"))
    leaked = sorted(set(re.findall(rf"(?:{here})[^\s\"'<>]*", page)))
    assert not leaked, f"absolute paths of this machine in the report (use composer.paths.shown): {leaked[:5]}"
    bar = re.search(r".{0,40}\d+/\d+ \[\d\d:\d\d<", page)  # "steps: 100%|███| 3/3 [00:01<00:00, ..."
    assert not bar, f"a progress bar in the report (composer.progress sends them to the run's log): {bar[0]!r}"
