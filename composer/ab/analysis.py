"""Spike 004's statistics: two trained arms compared on the same held-out tasks, and the verdict rule.

    from composer.ab import analysis
    result = analysis.compare(a_outcomes, b_outcomes)   # each: seeds x tasks x samples of 0/1
    result["diff"]                 # CI of pass@1(B) - pass@1(A): crossed t, seeds and tasks both random
    result["verdict"]              # VALIDATED / INVALIDATED / INCONCLUSIVE by `verdict`
    result["mde"]                  # the true B - A this design detects (interval above 0) with 80% power,
                                   # the variance taken at that B - A
    result["tasks_needed"]         # when INCONCLUSIVE: tasks per seed at which the mde would be min_effect

Outcomes are paired three ways, as the A/B design makes them: seed i of every arm starts from the same
checkpoint with the same task order and generation seeds, every arm is evaluated on the same tasks, and
sample s of a task uses the same sampling seed in every arm. pass@1 of a (seed, task) cell is the mean
of its samples (the unbiased estimator with n samples, k = 1).

The interval: B - A per cell is modelled as mean + seed + task + residual, seeds and tasks both random draws (a
new training seed and a new task set are what a result must hold for), and the mean gets a t interval from the
design's two factor mean squares with Satterthwaite df (`stats.crossed_t_interval`). With 3 seeds its df are few,
and the t quantile is what keeps the coverage: a bootstrap over 3 seeds covered 82-84 % at a nominal 95 %, and
treating every cell as an independent pair understated the spread 1.3-2.9x. The minimum detectable effect and the
tasks (or seeds) needed come from the same variance components, projected onto another design and onto the effect
(`power.components_at`: the variance of B - A grows as B's pass rate moves toward 1/2, the arms' own rates say how much),
with the estimated standard error unbiased (`stats.crossed_detectable_effect_at`). The variance with no effect
promised 80 % power where simulated experiments at the reported mde detected it 68 % of the time (logistic model,
pass@1 ~0.12). Checked by simulation in tests/test_ab_analysis.py under an additive and a logistic generative
model: the low end above 0 in at most 3 % of experiments with no effect, and at least 78 % at the mean reported mde.

The rule: VALIDATED when the estimate is at least `min_effect` (2 points) and the interval's
low end is above 0; INVALIDATED when the interval's high end is below `min_effect`; else INCONCLUSIVE. A student with
no headroom cannot invalidate: when the reference arm's pass@1 is surely below HEADROOM_FLOOR (its Wilson interval's
high end), an INVALIDATED reading is INCONCLUSIVE instead (`read_with_headroom`): a student that solves (almost)
nothing shows no effect of anything, and that is not evidence against the channel. All-zero outcomes at 7 seeds x
2,294 tasks read INVALIDATED with an interval of +-0.0002 before this rule; at a 2.8 % base rate and no effect, 98 %
of simulated experiments did (tests/test_ab_analysis.py).
"""

import dataclasses
import math

import numpy as np

from composer import report, stats
from composer.costs import power
from composer.costs.power import components_at

MIN_EFFECT = 0.02  # the gate: B beats A by >= 2 points of pass@1
HEADROOM_FLOOR = power.HEADROOM_FLOOR  # below it a student is no evidence against the channel (the reason: there)


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


def detected(diff: dict) -> bool:
    """Whether a difference's interval (a CI dict) is above 0: the design saw an effect."""
    return diff["low"] > 0


def interval_text(diff: dict) -> str:
    """A difference (a CI dict) as the reports write it: "+0.013 [-0.044, +0.069]"."""
    return f"{diff['estimate']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]"


def read_after_positive_control(criterion: report.Criterion, positive: dict | None,
                                label: str = "the positive control") -> report.Criterion:
    """The treatment's criterion, left undecided when the design did not detect the positive control (arm B+,
    trained on pairs known to be informative; `positive`: its difference against the reference, a CI dict): a
    design that cannot see a known effect says nothing about the treatment, whatever its interval. None: no
    positive control in the design, the criterion as it is."""
    if positive is None or detected(positive):
        return criterion
    why = f"the design did not detect {label} ({interval_text(positive)})"
    return dataclasses.replace(criterion, undecided_why=why)


def headroom(reference, confidence: float = 0.95, floor: float = HEADROOM_FLOOR) -> str | None:
    """Why the reference arm (its seeds x tasks x samples of 0/1) leaves no headroom: its pass@1's interval lies
    wholly below `floor`; None when it may not. The interval is clustered by task (stats.clustered_wilson_interval):
    every seed solving the same few tasks is worth those tasks, not seeds x tasks independent runs."""
    x = _outcomes(reference, "reference")
    per_task = x.sum(axis=(0, 2))
    ci = stats.clustered_wilson_interval(per_task.astype(int), [x.shape[0] * x.shape[2]] * x.shape[1],
                                         confidence=confidence)
    if ci.high >= floor:
        return None
    return (f"no headroom: the reference's pass@1 is {ci.estimate:.3f} [{ci.low:.3f}, {ci.high:.3f}] ({ci.method}), "
            f"below the {floor:.0%} floor; a student that solves this little cannot show the channel failing")


def read_with_headroom(criterion: report.Criterion, reference, confidence: float = 0.95) -> report.Criterion:
    """The treatment's criterion, undecided where it would be INVALIDATED by a student without headroom
    (`headroom`); a pass stands (an effect seen from a low base rate is still an effect)."""
    why = headroom(reference, confidence)
    if why is None or report.decide_verdict([criterion]) != "INVALIDATED":
        return criterion
    return dataclasses.replace(criterion, undecided_why=why)


def zero_discordance_interval(n_cells: int, confidence: float = 0.95) -> stats.CI:
    """The interval of B - A when no (seed, task) cell differs between the arms, where every variance estimate is 0
    and a t interval would be [0, 0]: |mean difference| <= the share of discordant cells, whose exact
    (Clopper-Pearson) upper bound at 0 of n is 1 - ((1 - confidence) / 2) ** (1 / n)."""
    bound = 1 - ((1 - confidence) / 2) ** (1 / n_cells)
    return stats.CI(0.0, -bound, bound, confidence, "zero discordant cells: exact bound", n_cells)


def cells_for_zero_discordance_bound(effect: float, confidence: float = 0.95) -> int:
    """The fewest cells at which zero_discordance_interval lies inside (-effect, effect)."""
    return math.floor(math.log((1 - confidence) / 2) / math.log(1 - effect)) + 1


def _needed(detectable, effect: float, start: int, limit: int) -> int | None:
    """The smallest n in [start, limit] with detectable(n) <= effect (detectable falls as n grows), else None."""
    if detectable(limit) > effect:
        return None
    low, high = start - 1, limit  # detectable(high) <= effect; low is below the answer
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if detectable(mid) <= effect else (mid, high)
    return high


def design_needed(components: dict, effect: float, *, alpha: float = 0.05, power: float = 0.8,
                  pass_rates: tuple[float, float] | None = None) -> dict:
    """What would detect `effect` (the interval above 0 with `power`) given the observed variance components
    (stats.crossed_components), taken at the effect (power.components_at) when the arms' observed pass_rates (A, B) are
    given: tasks per seed at the current seeds, and seeds at the current tasks per seed; None where no number does
    (e.g. seed-to-seed variance that more tasks cannot average away)."""
    if effect <= 0:
        raise ValueError(f"effect must be > 0, got {effect}")
    if pass_rates is not None:
        components = components_at(components, effect, *pass_rates)

    def detectable(seeds: int, tasks: int) -> float:
        return stats.crossed_detectable_effect(components, seeds, tasks, alpha=alpha, power=power)

    seeds, tasks = components["seeds"], components["tasks"]
    return {"tasks_per_seed": _needed(lambda t: detectable(seeds, t), effect, 2, 10 ** 7),
            "seeds": _needed(lambda s: detectable(s, tasks), effect, 2, 10 ** 5)}


def difference(cells_a, cells_b, *, min_effect: float = MIN_EFFECT, confidence: float = 0.95) -> dict:
    """B - A over seeds x tasks cells of pass@1, compare's core (see its docstring): diff (a stats.CI), components,
    discordance and mde (at the variance of B - A at the mde: power.components_at, with the arms' observed pass@1)."""
    discordance = float(np.mean(cells_a != cells_b))
    if discordance == 0:  # nothing to estimate a variance from: the exact bound on the share of discordant cells
        diff = zero_discordance_interval(cells_a.size, confidence)
        return {"diff": diff, "components": None, "discordance": 0.0, "mde": diff.high}
    components = stats.crossed_components(cells_b - cells_a)
    rates = float(cells_a.mean()), float(cells_b.mean())
    return {"diff": stats.crossed_t_interval(cells_b - cells_a, confidence=confidence), "components": components,
            "discordance": discordance,
            "mde": stats.crossed_detectable_effect_at(lambda effect: components_at(components, effect, *rates),
                                                      alpha=1 - confidence)}


def compare(a, b, *, min_effect: float = MIN_EFFECT, confidence: float = 0.95, n_resamples: int = 2000,
            seed: int = 0) -> dict:
    """B against A, paired: the difference, its intervals, the design's power and the verdict (see the module
    docstring).

    Keys: pass1 (per arm: mean and Wilson interval over all samples), diff (stats.crossed_t_interval of B - A over
    the seeds x tasks cells; with no discordant cell, `zero_discordance_interval`), components (the variance
    components behind it), per_seed (paired bootstrap CI over tasks, one per seed, conditional on it),
    discordance (share of cells whose pass@1 differs), mde (stats.crossed_detectable_effect_at this design, the
    variance at the effect: `difference`; with no discordant cell, the exact bound), verdict (`read_with_headroom`),
    headroom (None, or why A leaves none), seeds, tasks,
    tasks_needed and seeds_needed (None unless INCONCLUSIVE, or when no number would do: design_needed at the
    variance at min_effect; with no discordant cell, the tasks per seed at which the exact bound would fall under
    min_effect).
    No McNemar test: pooled over seeds its p-value ignores the seed clusters (p < 0.05 in 7-20 % of null runs)."""
    a, b = _outcomes(a, "a"), _outcomes(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must be evaluated on the same seeds, tasks and samples: {a.shape} vs {b.shape}")
    n_seeds, n_tasks, _ = a.shape
    cells_a, cells_b = a.mean(axis=2), b.mean(axis=2)
    core = difference(cells_a, cells_b, min_effect=min_effect, confidence=confidence)
    diff = core["diff"]
    per_seed = [stats.paired_bootstrap_diff(cells_a[i], cells_b[i], confidence=confidence, n_resamples=n_resamples,
                                            seed=seed) for i in range(n_seeds)] if n_tasks >= 2 else []
    decided = report.decide_verdict([read_with_headroom(gate(diff.estimate, diff.low, diff.high, min_effect), a,
                                                        confidence)])
    needed = {"tasks_per_seed": None, "seeds": None}
    if decided == "INCONCLUSIVE":
        needed = (design_needed(core["components"], min_effect, alpha=1 - confidence,
                                pass_rates=(float(a.mean()), float(b.mean()))) if core["components"] else
                  {"tasks_per_seed": math.ceil(cells_for_zero_discordance_bound(min_effect, confidence) / n_seeds),
                   "seeds": None})
    return {
        "pass1": {arm: {"mean": float(x.mean()), "wilson": stats.wilson_interval(int(x.sum()), x.size,
                                                                                  confidence=confidence).as_dict()}
                  for arm, x in (("a", a), ("b", b))},
        "diff": diff.as_dict(),
        "components": core["components"],
        "per_seed": [ci.as_dict() for ci in per_seed],
        "discordance": core["discordance"],
        "mde": core["mde"],
        "min_effect": min_effect,
        "verdict": decided,
        "headroom": headroom(a, confidence),
        "seeds": n_seeds,
        "tasks": n_tasks,
        "tasks_needed": needed["tasks_per_seed"],
        "seeds_needed": needed["seeds"],
    }


def design_line(result: dict) -> str:
    """compare's answer to "what would decide it?" in one sentence."""
    if result["verdict"] != "INCONCLUSIVE":
        return f"decided ({result['verdict']}) at {result['seeds']} seeds x {result['tasks']} tasks"
    effect, options = result["min_effect"], []
    if result["components"] is None:  # no cell differed: the exact bound, not a power calculation
        return (f"{result['tasks_needed']} tasks per seed at {result['seeds']} seeds would bound |B - A| under "
                f"{effect:.2f} if still no cell differed")
    if result["tasks_needed"]:
        options.append(f"{result['tasks_needed']} tasks per seed at {result['seeds']} seeds")
    if result["seeds_needed"]:
        options.append(f"{result['seeds_needed']} seeds at {result['tasks']} tasks")
    if options:
        return f"{' or '.join(options)} would detect {effect:.2f} with 80% power"
    return (f"neither more tasks at {result['seeds']} seeds nor more seeds at {result['tasks']} tasks would detect "
            f"{effect:.2f} with 80% power, given the observed variance components: both must grow")
