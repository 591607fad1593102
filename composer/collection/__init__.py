"""Spike 002: recording the student's agentic rollouts as traces, on two substrates, with the same checks.

- collect.py       002a: TRL GRPOTrainer's rollouts recorded as traces (two hooks, not a fork), the trainer driver
- prime.py         002b: verifiers rollouts against the local server, v1 traces into our schema, the substrate rule
- trace_checks.py  the substrate-neutral checks of collected traces (completeness, drift, tampering)

Imports the shared library, the environment and costs (a step's phase times); nothing of disagreement or ab
(tests/test_layout.py checks).
"""
