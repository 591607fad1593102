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
- any other process (a terminal's CLI, a job worker a notebook spawned): tqdm on stderr when it is a terminal, none
  otherwise (a worker's stderr is the notebook's pipe).

These bars draw whatever TQDM_DISABLE says: report.quiet() sets it to keep the libraries' own bars (checkpoint
loading, map(), trainers) out of the report, where they would write.
"""

import functools
import io
import os
import sys

from tqdm.auto import tqdm as notebook_tqdm
from tqdm.std import tqdm

ENV = "COMPOSER_PROGRESS"  # "log": this kernel runs under `python -m composer run`; bars go to its log


def bar(iterable=None, **kwargs) -> tqdm:
    """A tqdm bar drawn where it is seen and never into a rendered report (see the module doc); kwargs are tqdm's
    (an explicit `disable` wins)."""
    if not _in_kernel():
        return tqdm(iterable, **{"file": sys.stderr, "disable": None, **kwargs})  # None: only on a terminal
    if os.environ.get(ENV) == "log":
        return tqdm(iterable, **{"file": log(), "disable": False, **kwargs})
    return notebook_tqdm(iterable, **{"disable": False, **kwargs})


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
