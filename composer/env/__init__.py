"""The coding environment: `tasks` generates embedded SWE-bench-Lite-shaped tasks (a small
Python repo at a commit, an issue, tests) offline and deterministically, `sandbox` runs
untrusted code and task tests under limits, and `swebench` loads, validates and evaluates
real SWE-bench records and predictions with the same schema. Import the submodule you
need (`from composer.env import tasks`); this package imports nothing heavy itself.
"""
