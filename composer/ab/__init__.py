"""Spike 004: the A/B of GRPO against GRPO + trace-replay DPO, from inputs to verdict.

    from composer.ab import analysis, preparation, training
    from composer.ab.parameters import ABParameters
    parameters = ABParameters(student="zoo:report", seeds=6)  # the notebook's parameters, typed and checked
    inputs = preparation.prepare(parameters, "runs/004")
    done = training.run(training.plan_from_parameters(parameters, inputs), "runs/004", workers=2)

- parameters.py   ABParameters: 004's parameters as one typed, frozen config (notebook, profiles, tests, bench ab)
- planting.py     the planted checkpoint a positive control may start from (a difference there by construction)
- preparation.py  what the plan is made from: the student, its splits, pairs with reference log-probs, screening,
                  the planted checkpoint
- training.py     the plan, each arm trained from one checkpoint and evaluated on held-out tasks, jobs cached by hash
- dosing.py       the dose-response: what a dose may change, nested doses, the dose at which B is read
- analysis.py     the paired statistics (crossed t interval, mde, the design needed) and the verdict rule
- cluster.py      the jobs on a SLURM cluster through submitit

The top spike floor: imports the shared library, the environment, costs, collection and disagreement; parameters.py
imports none of them, planting.py none here, and preparation.py none here but those two (the plan and jobs are made
from its inputs, not the other way round) (tests/test_layout.py checks).
"""
