"""Making the embedded tasks: small Python repositories with one injected bug each, as SWE-bench Lite records.

    from composer.env.embedded import tasks
    records = tasks.generate(50, seed=0, split="train")     # validated by running their tests in the sandbox
    # a reward that trains or evaluates needs held-out probes too: composer.env.defences.probes.rewarded
    .venv/bin/pytest tests/test_env_tasks.py tests/test_env_library.py tests/test_env_mutations.py

Owns library (the bug-free modules tasks are cut from), mutations (bug injection, the catalogue of bug sites) and
tasks (the generator: records, materialize, gold_repo).

Imports composer.env.containment (a task is validated in the sandbox) and nothing above it.
"""
