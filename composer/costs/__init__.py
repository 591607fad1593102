"""What a live run costs and what it can detect, before any GPU is rented: the cost model, the power of a design, the
plan in the live profiles' headers, the API pilot that measures the student, and a run's own phase times.

    python -m composer plan                    # the live profiles' tables; --budget-usd, --from-run, --from-pilot
    python -m composer pilot --dry-run         # the student through an API on SWE-bench instances, priced first

- compute.py      GPU memory per device and a step's seconds by phase, from stated assumptions
- power.py        a design's mde and dollars; the best design within a budget
- plan.py         the tables in params/live headers, the budget search's output, --from-run and --from-pilot
- calibration.py  compute's model against published runs at their own layouts (plan --published)
- pilot.py        the student's base rate, discordance, turns and tokens, measured through an API
- phases.py       a training step's measured seconds by phase (what --from-run reads), written while training

Imports the shared library (composer's top floor) and the environment; nothing of collection, disagreement or ab
(tests/test_layout.py checks).
"""
