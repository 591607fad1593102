"""Progress bars for long work: a bar in JupyterLab, a line in the log of `python -m composer run`, never a bar in
a rendered report.

    from composer.progress import bar
    for step in bar(range(n), desc="teacher replay", unit="step"): ...    # any tqdm argument
    with bar(total=n, desc="004 jobs", unit="job") as jobs: jobs.update()

Where the bar goes depends on the process that draws it:

- the kernel of a notebook opened in JupyterLab: tqdm.auto, into the cell's output (a widget where ipywidgets is
  installed, else a text bar redrawn in place);
- the kernel of `python -m composer run` (run.py sets ENV to "log"): the kernel's own stderr, i.e. the terminal or
  log that papermill's "Executing" bar writes to. ipykernel points the kernel's file descriptor 2 (and so
  sys.__stderr__ and every child process's stderr) at a pipe it copies into the notebook's outputs, which become the
  report; sys.stderr.fileno() is ipykernel's copy of the original descriptor, which is not copied anywhere;
- a composer command that is not a kernel (`python -m composer zoo`, which calls `command()`): stderr, a bar on a
  terminal, and in a file (`make reports > log 2>&1`) a line when the bar starts, at most one a minute
  (LOG_INTERVAL_S) while it runs, and one when it ends, so a log shows where a long phase is;
- any other process (a job worker a notebook spawned): tqdm on stderr when it is a terminal, none otherwise (a
  worker's stderr is the notebook's pipe).
The log of `composer run` gets the same lines when it is a file.

These bars draw whatever TQDM_DISABLE says: report.quiet() sets it to keep the libraries' own bars (checkpoint
loading, map(), trainers) out of the report, where they would write.
"""

import functools
import io
import os
import sys

from tqdm.auto import tqdm as notebook_tqdm
from tqdm.std import tqdm

ENV = "COMPOSER_PROGRESS"  # "log": this kernel runs under `python -m composer run`; "command": a composer command
LOG_INTERVAL_S = 60  # a bar in a log file writes a line at most this often


def bar(iterable=None, **kwargs) -> tqdm:
    """A tqdm bar drawn where it is seen and never into a rendered report (see the module doc); kwargs are tqdm's
    (an explicit `disable` wins)."""
    if _in_kernel():
        if os.environ.get(ENV) == "log":
            return tqdm(iterable, **{**into(log()), "disable": False, **kwargs})
        return notebook_tqdm(iterable, **{"disable": False, **kwargs})
    if os.environ.get(ENV) == "command":
        return tqdm(iterable, **{**into(sys.stderr), "disable": False, **kwargs})
    return tqdm(iterable, **{"file": sys.stderr, "disable": None, **kwargs})  # None: only on a terminal


def command() -> None:
    """Called by a composer command that is not a kernel: its bars write to its stderr, lines in a log file (the
    libraries' own loading bars stay out: transformers', whose per-model lines would drown them)."""
    import transformers

    os.environ[ENV] = "command"
    transformers.utils.logging.disable_progress_bar()


def into(file) -> dict:
    """tqdm's file arguments for `file`: as is on a terminal; in a file, redraws as lines at most every
    LOG_INTERVAL_S (a redraw's carriage return would pile a whole phase onto one line)."""
    if file.isatty():
        return {"file": file}
    return {"file": _Lines(file), "mininterval": LOG_INTERVAL_S, "ascii": True, "ncols": 100}


class _Lines(io.TextIOBase):
    """A text file that turns tqdm's redraws (carriage returns, cursor moves) into whole lines."""

    def __init__(self, out):
        self.out = out

    def write(self, text: str) -> int:
        lines = [line for line in text.replace("\x1b[A", "").replace("\r", "\n").split("\n") if line.strip()]
        if lines:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def _in_kernel() -> bool:
    iostream = sys.modules.get("ipykernel.iostream")
    return iostream is not None and isinstance(sys.stderr, iostream.OutStream)


@functools.cache
def log() -> io.TextIOWrapper:
    """The kernel's own stderr, as it inherited it from its launcher (see the module doc): a line written here reaches
    the terminal or log of `python -m composer run`, never the notebook."""
    try:
        fd = sys.stderr.fileno()  # ipykernel's copy of the original descriptor 2, where it captures descriptor 2
    except io.UnsupportedOperation:
        fd = sys.__stderr__.fileno()  # ipykernel left descriptor 2 alone (it does under pytest)
    return open(os.dup(fd), "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - open for the process's life
