"""composer.progress: bars in the log of `python -m composer run`, never in its report; none in a worker's pipe.

    .venv/bin/pytest tests/test_progress.py
"""

import io
import re

import nbformat
import pytest

from composer import progress, run

# A drawn tqdm bar: "steps: 100%|██████████| 3/3 [00:00<00:00, 9.1step/s]"
DRAWN = re.compile(r"\d+/\d+ \[\d\d:\d\d<")


def test_outside_a_kernel_a_bar_draws_on_a_terminal_only():
    """A job worker's stderr is the notebook's pipe: no bar there; an explicit disable=False still wins."""
    pipe = io.StringIO()
    for _ in progress.bar(range(3), file=pipe, desc="steps"):
        pass
    assert pipe.getvalue() == ""
    for _ in progress.bar(range(3), file=pipe, desc="steps", disable=False):
        pass
    assert DRAWN.search(pipe.getvalue())


def _spike(folder):
    """A spike whose cell counts steps through a progress bar, tqdm imported after report.quiet() turned it off."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Progress"),
        nbformat.v4.new_code_cell('backend = "offline"\nsteps = 3', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("from composer import report\n\nreport.quiet()\nfrom composer.progress import bar\n\n"
                                  'started = report.banner("Progress", backend=backend)'),
        nbformat.v4.new_code_cell('for _ in bar(range(steps), desc="counted steps", unit="step"):\n'
                                  '    print("a step")'),
        nbformat.v4.new_code_cell('report.record("005-progress", title="Progress", criteria=[report.Criterion('
                                  '"steps", threshold=1, comparator=">=", estimate=steps)], metrics={}, '
                                  'params=dict(backend=backend, steps=steps), backend=backend, seed=0, '
                                  'started=started)'),
    ])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder.mkdir()
    nbformat.write(nb, folder / "005-progress.ipynb")
    return folder


def test_under_composer_run_a_bar_reaches_the_log_and_not_the_report(tmp_path, capfd, monkeypatch):
    # ipykernel leaves descriptor 2 alone under pytest; without the variable it copies it into the notebook, as it
    # does in a terminal: where sys.__stderr__ (and any child process's stderr) writes into the report
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    code = run.run("005", notebooks_dir=_spike(tmp_path / "notebooks"), reports_dir=tmp_path / "reports")
    log = capfd.readouterr().err
    assert code == 0, log[-2000:]
    assert re.search(r"counted steps: 100%\|.*\| 3/3 \[", log), log[-2000:]
    page = (tmp_path / "reports" / "005-progress.html").read_text()
    assert "a step" in page  # the cell's own output is there
    assert "counted steps" not in page and not DRAWN.search(page)


@pytest.mark.parametrize("where", ["log", None])
def test_in_a_kernel_the_bar_goes_to_the_log_or_the_cell(where, monkeypatch):
    """In the kernel of `composer run` the bar writes to the kernel's own stderr (progress.log()); in JupyterLab's
    kernel to the cell (tqdm.auto on sys.stderr)."""
    from ipykernel import iostream

    class Kernel(iostream.OutStream):
        def __init__(self):  # an OutStream that draws nothing: no session, no I/O thread
            self.text = io.StringIO()

        def write(self, text):
            return self.text.write(text)

        def flush(self):
            pass

    kernel, own = Kernel(), io.StringIO()
    monkeypatch.setattr("sys.stderr", kernel)
    monkeypatch.setattr(progress, "log", lambda: own)
    if where:
        monkeypatch.setenv(progress.ENV, where)
    else:
        monkeypatch.delenv(progress.ENV, raising=False)
    for _ in progress.bar(range(3), desc="steps"):
        pass
    drawn, other = (own, kernel.text) if where else (kernel.text, own)
    assert DRAWN.search(drawn.getvalue()) and other.getvalue() == ""


def test_a_commands_bar_in_a_log_file_is_whole_lines_not_a_redrawn_line(monkeypatch):
    """`make reports > log`: the zoo's bars (progress.command()) write a line when they start, at most one a minute,
    and one when they end; no carriage return piles a phase onto one line, and a terminal still gets its bar."""
    log = io.StringIO()
    monkeypatch.setenv(progress.ENV, "command")
    monkeypatch.setattr("sys.stderr", log)
    for _ in progress.bar(range(200), desc="zoo student", unit="step"):
        pass
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert 2 <= len(lines) <= 3 and lines[0].startswith("zoo student:   0%") and "200/200 [" in lines[-1]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    for _ in progress.bar(range(3), desc="zoo student"):
        pass
    assert "\r" in terminal.getvalue()  # redrawn in place


def test_without_the_command_mark_a_non_kernel_process_draws_nothing_in_a_pipe(monkeypatch):
    """A job worker inherits the kernel's "log" mark (or none in JupyterLab): its stderr is the notebook's pipe."""
    for mark in ("log", None):
        if mark:
            monkeypatch.setenv(progress.ENV, mark)
        else:
            monkeypatch.delenv(progress.ENV, raising=False)
        pipe = io.StringIO()
        monkeypatch.setattr("sys.stderr", pipe)
        for _ in progress.bar(range(3), desc="steps"):
            pass
        assert pipe.getvalue() == ""
