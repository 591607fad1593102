"""composer: does trace-replay multi-teacher distillation add signal on top of GRPO?

Run `python -m composer --help`; the notebooks in notebooks/ are the front door.
"""
from composer import threadsafe_ast  # noqa: F401  (before any thread parses: see its docstring)
