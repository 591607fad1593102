"""Spike 004's dose-response: the same A/B at several doses that every arm gets alike (a higher learning rate,
more steps, more pairs a step), B+ - A and B - A at each, and the dose at which B is read: the first at which the
design detects its positive control (a planted one: the last, where it must still be detected).

    from composer.ab import dosing
    dose = {"steps": 6, "trainer_config": {"num_iterations": 3}}  # 3 optimizer steps on each generation's rollouts
    at = dosing.apply(parameters, dose)                          # the ABParameters at that dose
    dosing.labels(parameters, [{}, dose])                        # ["steps=2, num_iterations=1", "steps=6, ..."]
    dosing.read_at([{"low": -0.01}, {"low": 0.02}, {"low": 0.04}])  # 1: B is read at the first detected dose
    dosing.read_at([{"low": 0.2}, {"low": 0.2}], planted=True)    # 1: a planted control's, the last if detected
    dosing.nested_labels(6, [2, 4])                              # ["step 2 of 6", "step 4 of 6", "step 6 of 6"]
    dosing.trainings(parameters)                # checkpoints [2, 4]: ([parameters], [2, 4, None], those labels)

Nested doses (the notebook's `checkpoints`) are checkpoints of one training per arm and seed, each evaluated like
its last step (composer.ab.training): a dose-response over training length for the price of evaluations, each checkpoint
with the whole run's learning-rate schedule and data order (not what a shorter run would give). Doses here are each
a training of their own.

A dose never touches the arms: A, B, control and B+ still differ only in their pairs, so raising it cannot favour
B+ alone. It cannot change what the inputs are made with either (the student, the splits, the screening's
rollouts, the evaluation): those are the design, set by the parameters themselves.

Reading B at the first dose that detects B+ picks a dose by an interval that shares A's outcomes with B - A.
Simulated under tests/test_ab_analysis.py's two generative models at the report's 6 seeds x 40 tasks, the low end of
B - A is above 0 at no effect in at most 1 % of all experiments. Among the experiments that do read B the rate is
0-2 % there, but it reached 10 % (8 of 80) in one where B+ was detected at its last dose only, in 8 % of
experiments: a B read at a dose where B+ was barely detected is weaker evidence than its interval says.
"""

import dataclasses

from composer.ab import analysis
from composer.ab.parameters import ABParameters

# the GRPO budget every arm shares; trainer_config entries (e.g. trace_replay_batch_size) are merged key by key
DOSE_KEYS = ("steps", "prompts_per_step", "learning_rate", "trainer_config")
# channel weights make the arms; in trainer_config they would reach every arm, A included
ARM_FIELDS = ("trace_replay_weight", "hint_distill_weight", "hint_source")


def apply(parameters: ABParameters, dose: dict) -> ABParameters:
    """The parameters at `dose` (a dict of DOSE_KEYS), checked again; a ValueError names a key that is not a dose and
    says why."""
    bad = sorted(set(dose) - set(DOSE_KEYS))
    if bad:
        raise ValueError(f"dose {dose}: {bad} cannot be dosed; a dose sets only {list(DOSE_KEYS)}, which every arm "
                         "gets alike (the arms, the screening's generations and temperature, and the evaluation are "
                         "the design: set those parameters themselves)")
    config = dose.get("trainer_config", {})
    if not isinstance(config, dict):
        raise ValueError(f"dose {dose}: trainer_config must be a dict of GRPOConfig fields, got {config!r}")
    arm_level = sorted(set(config) & set(ARM_FIELDS))
    if arm_level:
        raise ValueError(f"dose {dose}: {arm_level} belong to the arms (in trainer_config they would reach A too); "
                         "dose what every arm gets alike, e.g. learning_rate or steps")
    return dataclasses.replace(parameters, **{**dose, "trainer_config": {**parameters.trainer_config, **config}})


def _settings(parameters: ABParameters, dose: dict) -> dict:
    at = apply(parameters, dose)
    return {**{k: getattr(at, k) for k in DOSE_KEYS if k != "trainer_config"}, **at.trainer_config}


def _default(key: str):
    """The value a trainer_config key has where no dose sets it: its GRPOConfig (ComposerConfig) default."""
    from composer.trainer import ComposerConfig

    found = {f.name: f.default for f in dataclasses.fields(ComposerConfig)}
    return found.get(key)


def labels(parameters: ABParameters, doses: list[dict]) -> list[str]:
    """A short name for each dose: the settings that differ between the doses, at their values in that dose."""
    settings = [_settings(parameters, d) for d in doses]
    keys = list(dict.fromkeys(k for s in settings for k in s))
    settings = [{k: s[k] if k in s else _default(k) for k in keys} for s in settings]
    varying = [k for k in keys if len({repr(s[k]) for s in settings}) > 1]
    return [", ".join(f"{k}={s[k]:g}" if isinstance(s[k], float) else f"{k}={s[k]}" for k in varying)
            or "as set" for s in settings]


def nested_labels(steps: int, checkpoints: list[int]) -> list[str]:
    """The names of nested doses: each checkpoint of one `steps`-step training (composer.ab.training's
    checkpoints), then its last step."""
    return [f"step {c} of {steps}" for c in [*checkpoints, steps]]


def trainings(parameters: ABParameters) -> tuple[list[ABParameters], list, list[str]]:
    """The dose-response of the parameters' `doses` or `checkpoints` (nested doses; never both, which ABParameters
    refuses): the parameters of each training it needs (one per dose, or the one nested doses share), the optimizer
    step at which each dose is read (None: its training's last) and each dose's label."""
    if parameters.checkpoints:
        return [parameters], [*parameters.checkpoints, None], nested_labels(parameters.steps, parameters.checkpoints)
    doses = parameters.doses or [{}]
    return [apply(parameters, dose) for dose in doses], [None] * len(doses), labels(parameters, doses)


def read_at(positives: list[dict | None], *, planted: bool = False) -> int | None:
    """The index of the dose at which B is read: the first whose positive control (a diff with estimate, low, high)
    the design detected; for a planted control (a checkpoint's difference, there before any training, so its
    detection says nothing about the dose) the last, if detected there: B is read after the most training. None
    where no such dose is (or there is no positive control)."""
    if planted:
        return len(positives) - 1 if positives and positives[-1] is not None and analysis.detected(positives[-1]) \
            else None
    return next((i for i, diff in enumerate(positives) if diff is not None and analysis.detected(diff)), None)
