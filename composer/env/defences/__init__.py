"""Deciding what a run proves: what of a submission grading takes, and the layers that catch forged outcomes.

    from composer.env.defences import canaries, grading, probes, tampering
    kept, reset = grading.source_only(diff, test_paths={"tests/test_ops.py"})   # tests and test config: the base's
    .venv/bin/pytest tests/test_env_grading.py tests/test_env_canaries.py tests/test_env_probes.py \
        tests/test_env_tampering.py

Owns grading (what of an agent's diff a grading run sees), canaries (tests planted at grading whose outcomes must
come out a certain way), probes (held-out inputs whose expected values never enter the test process), real_probes
(the same on a real test suite), literals (how canaries and probes move a literal), tampering (the syntax-tree
scan of changed source files) and layers (all of them in order: the one list both graders loop over). The layers against forged rewards and what still gets through, in one table:
README.md beside this file. tests/test_env_attacks.py plays the attacks through the environment's tools.

Imports composer.env.containment and composer.env.embedded (probes run the gold and buggy libraries in the
sandbox), composer.files and composer.paths; never composer.env.real or the environment, which use these layers.
"""
