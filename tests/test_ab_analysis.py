"""Spike 004's statistics and verdict rule, on outcomes small enough to check by hand.

    .venv/bin/pytest tests/test_ab_analysis.py
"""

import numpy as np
import pytest
import scipy.optimize
from scipy.special import expit

from composer import stats
from composer.ab import analysis, dosing
from composer.costs import power


@pytest.mark.parametrize("estimate, low, high, expected", [
    (0.05, 0.01, 0.09, "VALIDATED"),       # >= 2 points and the interval above 0
    (0.02, 0.001, 0.04, "VALIDATED"),      # exactly 2 points counts
    (0.05, -0.01, 0.11, "INCONCLUSIVE"),   # big estimate, but 0 is inside
    (0.015, 0.005, 0.025, "INCONCLUSIVE"),  # above 0 but under 2 points, and 2 points not excluded
    (0.0, -0.03, 0.019, "INVALIDATED"),    # the whole interval under 2 points
    (-0.05, -0.09, -0.01, "INVALIDATED"),
])
def test_verdict_rule(estimate, low, high, expected):
    assert analysis.verdict(estimate, low, high) == expected


def test_the_gate_criterion_gives_the_same_verdict_through_the_report_rule():
    from composer import report

    grid = np.linspace(-0.06, 0.06, 13)
    for low, estimate, high in ((lo, e, hi) for lo in grid for e in grid for hi in grid if lo <= e <= hi):
        expected = ("VALIDATED" if estimate >= analysis.MIN_EFFECT and low > 0 else
                    "INVALIDATED" if high < analysis.MIN_EFFECT else "INCONCLUSIVE")
        assert report.decide_verdict([analysis.gate(estimate, low, high)]) == expected, (low, estimate, high)


def test_the_treatment_is_read_only_after_the_positive_control_was_detected():
    from composer import report

    passing = analysis.gate(0.05, 0.01, 0.09)
    assert report.decide_verdict([analysis.read_after_positive_control(passing, {"estimate": 0.2, "low": 0.1,
                                                                           "high": 0.3})]) == "VALIDATED"
    blind = analysis.read_after_positive_control(passing, {"estimate": 0.03, "low": -0.02, "high": 0.08}, "B+ - A")
    assert report.decide_verdict([blind]) == "INCONCLUSIVE"
    assert blind.undecided_why == "the design did not detect B+ - A (+0.030 [-0.020, +0.080])"
    failing = analysis.gate(0.0, -0.01, 0.01)  # INVALIDATED on its own, but the design could not have seen an effect
    assert report.decide_verdict([analysis.read_after_positive_control(failing, {"estimate": 0.0, "low": -0.1,
                                                                           "high": 0.1})]) == "INCONCLUSIVE"
    assert analysis.read_after_positive_control(passing, None) is passing


def test_verdict_refuses_an_estimate_outside_its_interval():
    with pytest.raises(ValueError, match="outside its interval"):
        analysis.verdict(0.1, 0.0, 0.05)


def test_design_needed_inverts_the_minimum_detectable_effect():
    components = {"seed": 0.0, "task": 0.002, "residual": 0.4, "seeds": 3, "tasks": 40}

    def detectable(seeds, tasks):
        return stats.crossed_detectable_effect(components, seeds, tasks)

    needed = analysis.design_needed(components, 0.05)
    n, s = needed["tasks_per_seed"], needed["seeds"]
    assert detectable(3, n) <= 0.05 < detectable(3, n - 1) and detectable(s, 40) <= 0.05 < detectable(s - 1, 40)
    # a seed variance that more tasks cannot average away at 3 seeds, and a task variance more seeds cannot
    assert analysis.design_needed({**components, "seed": 0.01}, 0.02)["tasks_per_seed"] is None
    assert analysis.design_needed({**components, "task": 0.01}, 0.02)["seeds"] is None
    with pytest.raises(ValueError, match="effect"):
        analysis.design_needed(components, 0.0)


def test_the_variance_at_the_effect_by_hand():
    """Arms observed at 0.2 and 0.2: at B - A = 0.1, B is at 0.3. The residual (binomial) grows by
    (0.16 + 0.21) / (0.16 + 0.16), the seed and task terms (logit effects through the slope) by
    (0.16^2 + 0.21^2) / (2 x 0.16^2); each mean square by its residual's growth and its own term's."""
    c = {"seed": 0.001, "task": 0.004, "residual": 0.2, "seeds": 3, "tasks": 40, "ms_seed": 0.24, "ms_task": 0.212}
    at = power.components_at(c, 0.1, 0.2, 0.2)
    r, f = 0.37 / 0.32, (0.16 ** 2 + 0.21 ** 2) / (2 * 0.16 ** 2)
    assert at["residual"] == pytest.approx(0.2 * r) and at["seed"] == pytest.approx(0.001 * f)
    assert at["task"] == pytest.approx(0.004 * f)
    assert at["ms_seed"] == pytest.approx(0.24 + 0.2 * (r - 1) + 40 * 0.001 * (f - 1))
    assert at["ms_task"] == pytest.approx(0.212 + 0.2 * (r - 1) + 3 * 0.004 * (f - 1))
    assert power.components_at(c, 0.0, 0.2, 0.2) == c  # no effect: as observed
    assert power.components_at(c, 0.1, 0.5, 0.5) == c  # past 1/2 the variance would fall: it is kept
    # the mde is the effect at which the variance there gives 80 % power: a fixed point of the plain formula
    mde = stats.crossed_detectable_effect_at(lambda e: power.components_at(c, e, 0.2, 0.2))
    assert mde == pytest.approx(stats.crossed_detectable_effect(power.components_at(c, mde, 0.2, 0.2)), abs=1e-5)
    assert mde > stats.crossed_detectable_effect(c)  # larger than the variance with no effect says
    plain = stats.crossed_detectable_effect(c)
    assert stats.crossed_detectable_effect_at(lambda e: c) == pytest.approx(plain, abs=1e-5)
    # true components (a plan's): no c4 correction
    se, df = stats.crossed_standard_error(c)
    assert stats.crossed_detectable_effect_at(lambda e: c, estimated=False) == pytest.approx(
        stats.t_detectable_effect(se, df), abs=1e-5)
    # the tasks needed at the effect (3 seeds that do not differ) are more than the variance with no effect says
    quiet = {**c, "seed": 0.0}
    plain = analysis.design_needed(quiet, 0.1)["tasks_per_seed"]
    assert analysis.design_needed(quiet, 0.1, pass_rates=(0.2, 0.2))["tasks_per_seed"] > plain


def _outcomes(cells):
    """seeds x tasks lists of per-sample outcome lists -> array."""
    return np.array(cells, dtype=float)


def test_compare_by_hand():
    # 2 seeds x 4 tasks x 2 samples. B solves everything A solves, plus task 0 on both seeds (both samples)
    # and one sample of task 1 on seed 0.
    a = _outcomes([[[0, 0], [0, 0], [1, 1], [0, 0]], [[0, 0], [0, 0], [1, 1], [1, 0]]])
    b = _outcomes([[[1, 1], [1, 0], [1, 1], [0, 0]], [[1, 1], [0, 0], [1, 1], [1, 0]]])
    r = analysis.compare(a, b, n_resamples=500)
    assert r["pass1"]["a"]["mean"] == pytest.approx(5 / 16) and r["pass1"]["b"]["mean"] == pytest.approx(10 / 16)
    assert r["pass1"]["b"]["wilson"] == stats.wilson_interval(10, 16).as_dict()
    assert r["diff"]["estimate"] == pytest.approx((1 + 0.5 + 1) / 8)  # cell differences averaged over 8 cells
    assert r["diff"]["low"] <= r["diff"]["estimate"] <= r["diff"]["high"] and r["diff"]["n"] == 8
    assert [s["estimate"] for s in r["per_seed"]] == pytest.approx([1.5 / 4, 1 / 4])
    assert r["diff"] == stats.crossed_t_interval(b.mean(axis=2) - a.mean(axis=2)).as_dict()
    assert r["components"] == stats.crossed_components(b.mean(axis=2) - a.mean(axis=2))
    assert r["discordance"] == pytest.approx(3 / 8) and "mcnemar" not in r
    at = lambda effect: power.components_at(r["components"], effect, 5 / 16, 10 / 16)  # noqa: E731
    assert r["mde"] == pytest.approx(stats.crossed_detectable_effect_at(at))
    assert r["verdict"] == analysis.verdict(r["diff"]["estimate"], r["diff"]["low"], r["diff"]["high"])
    assert (r["tasks_needed"] is None) == (r["verdict"] != "INCONCLUSIVE")
    line = analysis.design_line(r)
    assert line == f"decided ({r['verdict']}) at 2 seeds x 4 tasks" or "would detect" in line


def test_identical_arms_are_never_validated_and_say_how_many_tasks_would_be_needed():
    rng = np.random.default_rng(0)
    a = (rng.random((3, 20, 1)) < 0.3).astype(float)
    r = analysis.compare(a, a.copy(), n_resamples=200)
    # No cell differs: a bootstrap would say [0, 0]; the exact bound on the discordance says +-5.96 points
    bound = 1 - 0.025 ** (1 / 60)
    assert r["diff"]["estimate"] == 0 and (r["diff"]["low"], r["diff"]["high"]) == pytest.approx((-bound, bound))
    assert r["verdict"] == "INCONCLUSIVE" and bound == pytest.approx(0.0596, abs=1e-4)
    assert r["mde"] == r["diff"]["high"]  # what the data can exclude, not the normal approximation's figure
    assert analysis.cells_for_zero_discordance_bound(0.02) == 183  # 1 - 0.025 ** (1 / n) < 0.02 from n = 183
    assert analysis.zero_discordance_interval(183).high < 0.02 <= analysis.zero_discordance_interval(182).high
    assert r["tasks_needed"] == 61  # 183 cells over 3 seeds
    assert analysis.design_line(r) == ("61 tasks per seed at 3 seeds would bound |B - A| under 0.02 if still no "
                                       "cell differed")
    many = (rng.random((3, 200, 1)) < 0.3).astype(float)  # 600 agreeing cells bound it under 2 points
    assert analysis.compare(many, many.copy(), n_resamples=50)["verdict"] == "INVALIDATED"
    # Two independent draws of the same 30% policy: 60 cells cannot tell 2 points from 0
    noisy = analysis.compare(a, (rng.random((3, 20, 1)) < 0.3).astype(float), n_resamples=200)
    assert noisy["verdict"] == "INCONCLUSIVE" and noisy["diff"]["low"] < 0 < noisy["diff"]["high"]
    assert noisy["mde"] > analysis.MIN_EFFECT
    # its seed variance (SD 0.06) alone keeps 3 seeds from detecting 2 points, whatever the tasks, and its task
    # variance 20 tasks, whatever the seeds
    assert noisy["components"]["seed"] > 0 and (noisy["tasks_needed"], noisy["seeds_needed"]) == (None, None)
    assert analysis.design_needed(noisy["components"], analysis.MIN_EFFECT) == {"tasks_per_seed": None, "seeds": None}
    assert analysis.design_line(noisy).startswith("neither more tasks at 3 seeds nor more seeds at 20 tasks")
    quiet = {**noisy["components"], "seed": 0.0, "ms_seed": noisy["components"]["residual"]}
    # with no seed variance, tasks do
    assert analysis.design_needed(quiet, analysis.MIN_EFFECT)["tasks_per_seed"] > 1000


@pytest.mark.parametrize("a, b, match", [
    (np.zeros((2, 3)), np.zeros((2, 3)), "seeds x tasks x samples"),
    (np.zeros((2, 3, 1)), np.zeros((2, 4, 1)), "same seeds, tasks and samples"),
    (np.full((2, 3, 1), 0.5), np.zeros((2, 3, 1)), "0/1"),
    (np.zeros((0, 3, 1)), np.zeros((0, 3, 1)), "non-empty"),
])
def test_bad_outcomes_are_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        analysis.compare(a, b)


def additive_cells(rng, seeds, tasks, samples, effect, seed_sd, task_sd=0.05, more=()):
    """pass@1 cells (seeds x tasks) of arms A and B on the probability scale: task base rates uniform in [0.2, 0.8],
    a seed shift shared by the arms (same checkpoint), B's effect varying by seed (seed_sd) and by task (task_sd),
    independent samples. `more`: the effects of further arms drawn like B (e.g. a positive control)."""
    base = rng.uniform(0.2, 0.8, tasks)[None, :] + rng.normal(0, 0.05, (seeds, 1))
    draw = lambda p: (rng.random((seeds, tasks, samples)) < p[..., None]).mean(axis=2)  # noqa: E731
    return [draw(np.clip(base, 0, 1))] + [draw(np.clip(
        base + e + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, task_sd, (1, tasks)), 0, 1))
        for e in (effect, *more)]


def additive_truth(effect, seed_sd, task_sd=0.05, n=400_000):
    """E[p_B - p_A] over new seeds and tasks under additive_cells' model (the clip makes it differ from effect)."""
    rng = np.random.default_rng(123)
    base = rng.uniform(0.2, 0.8, n) + rng.normal(0, 0.05, n)
    return float(np.mean(np.clip(base + effect + rng.normal(0, seed_sd, n) + rng.normal(0, task_sd, n), 0, 1)
                         - np.clip(base, 0, 1)))


def logistic_cells(rng, seeds, tasks, samples, shift, seed_sd, interaction_sd=0.5, task_sd=1.5, mean=-1.0, more=()):
    """The same cells from a logistic model: logit p = task difficulty (N(mean, task_sd), pass@1 about 0.3) + a
    seed effect of each arm's own (each arm trains its own run from the seed) + a task x arm interaction + B's
    shift, so B - A varies by seed and by task on the probability scale and is heteroscedastic. `more`: the shifts
    of further arms."""
    difficulty = rng.normal(mean, task_sd, tasks)
    return [(rng.random((seeds, tasks, samples)) < expit(
        difficulty[None, :] + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, interaction_sd, (1, tasks))
        + arm_shift)[..., None]).mean(axis=2) for arm_shift in (0.0, shift, *more)]


def logistic_truth(shift, seed_sd, interaction_sd=0.5, task_sd=1.5, mean=-1.0, n=400_000):
    """E[p_B - p_A] over new seeds and tasks under logistic_cells' model."""
    rng = np.random.default_rng(123)
    difficulty = rng.normal(mean, task_sd, n)
    spread = lambda: rng.normal(0, seed_sd, n) + rng.normal(0, interaction_sd, n)  # noqa: E731
    return float(np.mean(expit(difficulty + spread() + shift) - expit(difficulty + spread())))


MODELS = {"additive": (additive_cells, additive_truth), "logistic": (logistic_cells, logistic_truth)}


REGIMES = [(model, *regime, {}) for model in MODELS for regime in (
    (3, 40, 1, 0.02),  # 3 seeds that barely differ
    (3, 40, 1, 0.3),  # 3 seeds that do differ
    (5, 60, 2, 0.1),
    (6, 40, 1, 0.1),  # 004's report design
)] + [("logistic", 3, 40, 1, 0.02, {"mean": -2.5, "task_sd": 1.0, "interaction_sd": 0.3})]  # pass@1 ~0.12: SWE-like


@pytest.mark.parametrize("model, seeds, tasks, samples, seed_sd, shape", REGIMES)
def test_the_interval_holds_its_level_and_the_mde_its_power(model, seeds, tasks, samples, seed_sd, shape):
    """600 simulated A/B experiments with no effect, then 600 at the mean reported mde, through analysis.difference (the
    notebook's compare() takes its interval and mde from it): the 95 % interval covers the true difference in at
    least 93 % of experiments, its low end is above 0 in at most 3 % of those with no effect (2.5 % nominal), and in
    at least 78 % of those whose true difference is the reported mde (80 % nominal; one Monte Carlo standard error
    of a power near 0.8 over 600 experiments is 1.6 points; the mde at the variance at the effect gives 0.82-0.93
    here, the variance at no effect gave 0.80-0.89, and 0.68 in the last regime, whose pass@1 of ~0.12 is
    SWE-bench's). The seed SDs are on each model's own scale: probability (additive), logit (logistic)."""
    cells, truth = MODELS[model]
    seed_sd = seed_sd / 6 if model == "additive" else seed_sd  # a logit SD of 0.3 moves p by about 0.05 near 0.3
    rng = np.random.default_rng(seeds * 1000 + tasks)
    null = [analysis.difference(*cells(rng, seeds, tasks, samples, 0.0, seed_sd, **shape)) for _ in range(600)]
    zero = truth(0.0, seed_sd, **shape)
    coverage = np.mean([r["diff"].low <= zero <= r["diff"].high for r in null])
    detected = np.mean([r["diff"].low > 0 for r in null])
    assert coverage >= 0.93 and detected <= 0.03, (coverage, detected)
    mde = float(np.mean([r["mde"] for r in null]))
    shift = scipy.optimize.brentq(lambda x: truth(x, seed_sd, **shape) - mde, 0.0, 8.0)  # its truth is the mde
    power = np.mean([analysis.difference(*cells(rng, seeds, tasks, samples, shift, seed_sd, **shape))["diff"].low > 0
                     for _ in range(600)])
    assert power >= 0.78, (mde, power)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("positive", [(0.5, 1.0, 1.5), (0.0, 0.0, 0.5)], ids=["rising", "barely"])
def test_reading_b_at_the_first_dose_that_detects_the_positive_control_keeps_its_level(model, positive):
    """004's dose rule (composer.ab.dosing.read_at) through the same analysis.difference: 400 simulated experiments at the
    report's 6 seeds x 40 tasks and 3 doses, each dose its own trainings (fresh A, B and B+ draws), B without an
    effect and B+ with a dose-response in units of the design's mde (the model's shift whose true difference is the
    mean reported mde). B's interval is above 0 in at most 3 % of all experiments; where B+ rises to 1 and 1.5 mde,
    the rule reads B in at least 75 % of them."""
    cells, truth = MODELS[model]
    seed_sd = 0.1 / 6 if model == "additive" else 0.1
    rng = np.random.default_rng(7)
    mde = float(np.mean([analysis.difference(*cells(rng, 6, 40, 1, 0.0, seed_sd))["mde"] for _ in range(100)]))
    unit = scipy.optimize.brentq(lambda x: truth(x, seed_sd) - mde, 0.0, 5.0)
    read = false_positive = 0
    for _ in range(400):
        at_doses = [cells(rng, 6, 40, 1, 0.0, seed_sd, more=(p * unit,)) for p in positive]
        index = dosing.read_at([analysis.difference(a, plus)["diff"].as_dict() for a, _, plus in at_doses])
        if index is not None:
            read += 1
            a, b, _ = at_doses[index]
            false_positive += analysis.difference(a, b)["diff"].low > 0
    assert false_positive / 400 <= 0.03, (read, false_positive)
    if positive[0] > 0:
        assert read / 400 >= 0.75, (read, false_positive)


def test_a_student_that_solves_nothing_does_not_invalidate():
    """All-zero outcomes at 7 seeds x 2,294 tasks: the exact bound is +-0.0002, INVALIDATED before the headroom rule."""
    zeros = np.zeros((7, 2294, 1))
    result = analysis.compare(zeros, zeros)
    assert result["diff"]["high"] < 0.001 and result["verdict"] == "INCONCLUSIVE"
    assert result["headroom"].startswith("no headroom: the reference's pass@1 is 0.000")


def test_no_effect_at_a_low_base_rate_reads_inconclusive_and_a_real_effect_still_passes():
    rng = np.random.default_rng(0)
    low = [analysis.compare(rng.random((3, 300, 4)) < 0.028, rng.random((3, 300, 4)) < 0.028)["verdict"]
           for _ in range(40)]
    assert "INVALIDATED" not in low  # 98 % of such experiments read INVALIDATED before the rule
    seen = analysis.compare(rng.random((3, 300, 4)) < 0.01, rng.random((3, 300, 4)) < 0.12)
    assert seen["verdict"] == "VALIDATED" and seen["headroom"] is not None  # an effect from a low base is an effect
    # with headroom, no effect still invalidates
    room = analysis.compare(rng.random((5, 2000, 4)) < 0.3, rng.random((5, 2000, 4)) < 0.3)
    assert room["headroom"] is None and room["verdict"] == "INVALIDATED"


def test_read_with_headroom_leaves_every_other_reading_alone():
    from composer import report

    none = np.zeros((2, 100, 4))
    failing, passing = analysis.gate(0.0, -0.01, 0.01), analysis.gate(0.05, 0.01, 0.09)
    open_ = analysis.gate(0.01, -0.02, 0.04)
    assert report.decide_verdict([analysis.read_with_headroom(failing, none)]) == "INCONCLUSIVE"
    assert analysis.read_with_headroom(passing, none) is passing and analysis.read_with_headroom(open_, none) is open_
    assert analysis.read_with_headroom(failing, np.ones((2, 100, 4)) * (np.arange(4) < 1)) is failing  # 25 %: room
