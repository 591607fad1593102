"""The coding environment, on four floors; each imports only the floors below it (tests/test_layout.py checks).

    from composer.env.environment import CodingAction, CodingEnv, EnvConfig   # the environment itself
    python -m composer serve-env --tasks 20                                    # served over WebSocket (server.py)

- containment/  running untrusted code: the sandbox, a run's bounds, the patches the trusted side applies
- embedded/     making the embedded tasks: a template library, bug injection, SWE-bench-Lite-shaped records
- defences/     deciding what a run proves: what grading takes from a diff, canaries, held-out probes, the scan
- real/         real SWE-bench instances: records and predictions, a container per episode, the harness's grading
- here          environment.py (CodingEnv, its tools' results, rewards), tools.py (the tools on a repository copy),
                server.py (OpenEnv's WebSocket server), taskset.py (the environment as a verifiers v1 taskset)

Of the rest of composer, the floors import only files, paths and traces. Import the module you need
(`from composer.env.embedded import tasks`); no package here imports anything itself.
"""
