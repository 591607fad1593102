"""Spike 004's statistics: two trained arms compared on the same held-out tasks, and the verdict rule.

    from composer import ab
    result = ab.compare(a_outcomes, b_outcomes)   # each: seeds x tasks x samples of 0/1
    result["diff"]                 # CI of pass@1(B) - pass@1(A): two-level bootstrap over seeds and tasks
    result["verdict"]              # VALIDATED / INVALIDATED / INCONCLUSIVE by `verdict`
    result["tasks_needed"]         # when INCONCLUSIVE: tasks per seed that would detect min_effect

Outcomes are paired three ways, as the A/B design makes them: seed i of every arm starts from the same
checkpoint with the same task order and generation seeds, every arm is evaluated on the same tasks, and
sample s of a task uses the same sampling seed in every arm. pass@1 of a (seed, task) cell is the mean
of its samples (the unbiased estimator with n samples, k = 1).

The rule (issue 7): VALIDATED when the estimate is at least `min_effect` (2 points) and the interval's
low end is above 0; INVALIDATED when the interval's high end is below `min_effect`; else INCONCLUSIVE.
"""

import math

import numpy as np
import scipy.stats

from composer import report, stats

MIN_EFFECT = 0.02  # the gate: B beats A by >= 2 points of pass@1


def _outcomes(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 3 or 0 in a.shape:
        raise ValueError(f"{name} must be a non-empty seeds x tasks x samples array of 0/1, got shape {a.shape}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(f"{name} must hold only 0/1 outcomes (one per sample)")
    return a


def gate(estimate: float, low: float, high: float, min_effect: float = MIN_EFFECT, *,
         name: str = "pass@1(B) - pass@1(A)") -> report.Criterion:
    """The rule as a report criterion: estimate >= min_effect with the interval above 0 passes (VALIDATED),
    an interval wholly below min_effect fails (INVALIDATED), anything else is undecided (INCONCLUSIVE)."""
    if not low <= estimate <= high:
        raise ValueError(f"the estimate {estimate} is outside its interval [{low}, {high}]")
    return report.Criterion(name, threshold=min_effect, comparator=">=", estimate=estimate, ci_low=low,
                            ci_high=high, null=0.0)


def verdict(estimate: float, low: float, high: float, min_effect: float = MIN_EFFECT) -> str:
    """VALIDATED / INVALIDATED / INCONCLUSIVE for a difference B - A with its interval [low, high]."""
    return report.decide_verdict([gate(estimate, low, high, min_effect)])


def zero_discordance_interval(n_cells: int, confidence: float = 0.95) -> stats.CI:
    """The interval of B - A when no (seed, task) cell differs between the arms, where a bootstrap collapses to
    [0, 0]: |mean difference| <= the share of discordant cells, whose exact (Clopper-Pearson) upper bound at 0
    of n is 1 - ((1 - confidence) / 2) ** (1 / n)."""
    bound = 1 - ((1 - confidence) / 2) ** (1 / n_cells)
    return stats.CI(0.0, -bound, bound, confidence, "zero discordant cells: exact bound", n_cells)


def cells_for_zero_discordance_bound(effect: float, confidence: float = 0.95) -> int:
    """The fewest cells at which zero_discordance_interval lies inside (-effect, effect)."""
    return math.floor(math.log((1 - confidence) / 2) / math.log(1 - effect)) + 1


def tasks_needed(discordance: float, effect: float, seeds: int, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Tasks per seed for which stats.min_detectable_effect_paired_binary(seeds * tasks, discordance) <= effect:
    the same formula solved for n. `discordance`: the share of (seed, task) cells whose outcome differs
    between the arms, in (0, 1]."""
    if effect <= 0 or seeds < 1 or not 0 < discordance <= 1:
        raise ValueError(f"need effect > 0, seeds >= 1 and discordance in (0, 1]; got {effect}, {seeds}, {discordance}")
    z = scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(power)
    return math.ceil((z / effect) ** 2 * discordance / seeds)


def compare(a, b, *, min_effect: float = MIN_EFFECT, confidence: float = 0.95, n_resamples: int = 2000,
            seed: int = 0) -> dict:
    """B against A, paired: the difference, its intervals, the tests and the verdict (see the module docstring).

    Keys: pass1 (per arm: mean and Wilson interval over all samples), diff (two-level bootstrap CI of the mean
    of B - A over seeds x tasks cells; with no discordant cell, `zero_discordance_interval`), per_seed (paired bootstrap CI over tasks, one per seed), mcnemar (exact,
    on sample outcomes paired by seed, task and sample), discordance (share of cells whose pass@1 differs; with
    none, half a cell: the data cannot size it), mde (min_detectable_effect_paired_binary at seeds x tasks
    cells; with no discordant cell, the exact bound), verdict, tasks_needed (None unless INCONCLUSIVE; with no
    discordant cell, the tasks per seed at which the exact bound would fall under min_effect)."""
    a, b = _outcomes(a, "a"), _outcomes(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must be evaluated on the same seeds, tasks and samples: {a.shape} vs {b.shape}")
    n_seeds, n_tasks, _ = a.shape
    cells_a, cells_b = a.mean(axis=2), b.mean(axis=2)
    n_cells = n_seeds * n_tasks
    discordant = cells_a != cells_b
    discordance = max(float(np.mean(discordant)), 0.5 / n_cells)
    if discordant.any():
        diff = stats.two_level_bootstrap(cells_b - cells_a, confidence=confidence, n_resamples=n_resamples,
                                         seed=seed)
        mde = stats.min_detectable_effect_paired_binary(n_cells, discordance=discordance)
        needed = tasks_needed(discordance, min_effect, n_seeds)
    else:  # the bootstrap and the normal approximation have nothing to work with: the exact bound, and when
        diff = zero_discordance_interval(n_cells, confidence)
        mde = diff.high
        needed = math.ceil(cells_for_zero_discordance_bound(min_effect, confidence) / n_seeds)
    per_seed = [stats.paired_bootstrap_diff(cells_a[i], cells_b[i], confidence=confidence, n_resamples=n_resamples,
                                            seed=seed) for i in range(n_seeds)] if n_tasks >= 2 else []
    decided = verdict(diff.estimate, diff.low, diff.high, min_effect)
    return {
        "pass1": {arm: {"mean": float(x.mean()), "wilson": stats.wilson_interval(int(x.sum()), x.size,
                                                                                  confidence=confidence).as_dict()}
                  for arm, x in (("a", a), ("b", b))},
        "diff": diff.as_dict(),
        "per_seed": [ci.as_dict() for ci in per_seed],
        "mcnemar": stats.mcnemar_from_outcomes(a.ravel(), b.ravel()),
        "discordance": discordance,
        "mde": mde,
        "min_effect": min_effect,
        "verdict": decided,
        "tasks_needed": needed if decided == "INCONCLUSIVE" else None,
    }
