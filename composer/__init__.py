"""composer: does trace-replay multi-teacher distillation add signal on top of GRPO?

Run `python -m composer --help`; the notebooks in notebooks/ are the front door.
"""
