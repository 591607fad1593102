"""Tests for composer.stats: hand-computed values, plus agreement with scipy/statsmodels."""

import json
import math
import warnings

import numpy as np
import pytest
import scipy.special
import scipy.stats
from statsmodels.stats.proportion import proportion_confint

from composer import stats

Z95 = 1.959963984540054  # Phi^-1(0.975)
Z80 = 0.8416212335729143  # Phi^-1(0.8)


# --- CI ---------------------------------------------------------------------------------


def test_ci_as_dict_is_plain_json():
    ci = stats.bootstrap_ci([1, 2, 3, 4], n_resamples=200)
    d = ci.as_dict()
    assert list(d) == ["estimate", "low", "high", "confidence", "method", "n"]
    assert d["estimate"] == 2.5 and d["n"] == 4 and d["method"] == "BCa"
    assert type(d["low"]) is float  # numpy scalars would still pass json, check the cast
    assert json.loads(json.dumps(d)) == d
    with pytest.raises(AttributeError):
        ci.low = 0.0  # frozen


# --- bootstrap_ci -----------------------------------------------------------------------


def test_bootstrap_ci_matches_scipy_bca():
    x = np.array([0.1, 0.4, 0.35, 0.8, 0.5, 0.2, 0.9, 0.3])
    ci = stats.bootstrap_ci(x, n_resamples=500, seed=3)
    ref = scipy.stats.bootstrap((x,), np.mean, n_resamples=500, method="BCa",
                                rng=np.random.default_rng(3)).confidence_interval
    assert (ci.low, ci.high) == (ref.low, ref.high)
    assert ci.estimate == pytest.approx(3.55 / 8)  # sum(x) = 3.55
    assert ci.method == "BCa" and ci.n == 8 and ci.confidence == 0.95


def test_bootstrap_ci_is_seeded():
    x = np.arange(10.0)
    a = stats.bootstrap_ci(x, n_resamples=200, seed=1)
    assert a == stats.bootstrap_ci(x, n_resamples=200, seed=1)
    assert a != stats.bootstrap_ci(x, n_resamples=200, seed=2)


def test_bootstrap_ci_percentile_hand_computed():
    # Resample mean of [0, 1] (n=2) is 0, 0.5 or 1 w.p. 1/4, 1/2, 1/4. With 2000
    # resamples ~25% are 0 and ~25% are 1, so the 2.5% and 97.5% quantiles are 0 and 1.
    ci = stats.bootstrap_ci([0, 1], method="percentile")
    assert (ci.estimate, ci.low, ci.high, ci.method) == (0.5, 0.0, 1.0, "percentile")


def test_bootstrap_ci_all_identical_is_degenerate():
    # Every resample of [3, 3, 3] is [3, 3, 3], so the bootstrap distribution is a point.
    ci = stats.bootstrap_ci([3, 3, 3])
    assert (ci.estimate, ci.low, ci.high, ci.method, ci.n) == (3, 3, 3, "degenerate", 3)


def test_bootstrap_ci_falls_back_to_percentile_when_bca_is_nan():
    x = np.array([1.0, 1, 1, 1, 5])
    # Precondition: scipy's BCa really is NaN here (all jackknife medians are 1, so the
    # acceleration is 0/0).
    with pytest.warns(scipy.stats.DegenerateDataWarning), np.errstate(invalid="ignore"):
        bca = scipy.stats.bootstrap((x,), np.median, n_resamples=500,
                                    rng=np.random.default_rng(0)).confidence_interval
    assert np.isnan(bca.low)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback must not leak scipy's warning
        ci = stats.bootstrap_ci(x, np.median, n_resamples=500)
    # A resample median is 5 iff >= 3 of the 5 draws are 5 (p = 0.2 each):
    # P = 10*.2^3*.8^2 + 5*.2^4*.8 + .2^5 = .0512 + .0064 + .00032 = 0.05792 > 2.5%,
    # so the 97.5% quantile is 5, and the 2.5% quantile is 1.
    assert (ci.estimate, ci.low, ci.high, ci.method) == (1.0, 1.0, 5.0, "percentile")
    ref = scipy.stats.bootstrap((x,), np.median, n_resamples=500, method="percentile",
                                rng=np.random.default_rng(0)).confidence_interval
    assert (ci.low, ci.high) == (ref.low, ref.high)


def test_bootstrap_ci_unvectorized_statistic_matches_vectorized():
    x = np.array([2.0, 4, 4, 5, 7, 9])
    vec = stats.bootstrap_ci(x, np.mean, n_resamples=300)
    loop = stats.bootstrap_ci(x, lambda v: float(np.mean(v)), n_resamples=300)
    assert (loop.low, loop.high) == pytest.approx((vec.low, vec.high))
    assert loop.estimate == vec.estimate == 31 / 6


@pytest.mark.parametrize("data, match", [
    ([], "empty"),
    ([1.0], "at least 2"),
    ([1.0, np.nan, 2.0], "NaN"),
    ([[1.0, 2.0], [3.0, 4.0]], "1-D"),
])
def test_bootstrap_ci_bad_data(data, match):
    with pytest.raises(ValueError, match=match):
        stats.bootstrap_ci(data)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, -0.1])
def test_bootstrap_ci_bad_confidence(confidence):
    with pytest.raises(ValueError, match="confidence"):
        stats.bootstrap_ci([1.0, 2.0, 3.0], confidence=confidence)


# --- paired_bootstrap_diff --------------------------------------------------------------


def test_paired_diff_direction_and_hand_computed_percentile():
    a = [0, 0, 0, 1]
    b = [1, 1, 1, 1]
    ci = stats.paired_bootstrap_diff(a, b, method="percentile")
    # estimate = mean(b) - mean(a) = 1 - 0.25 (b minus a, so positive).
    # Per resample, diff = 1 - k/4 with k ~ Binom(4, 1/4) ones drawn from a:
    # P(k=0) = .316 -> 97.5% quantile is diff 1; P(k=4) = .0039 < 2.5% but
    # P(k>=3) = .0508 > 2.5% -> 2.5% quantile is diff 0.25.
    assert (ci.estimate, ci.low, ci.high, ci.n) == (0.75, 0.25, 1.0, 4)
    flipped = stats.paired_bootstrap_diff(b, a, method="percentile")
    assert flipped.estimate == -0.75


def test_paired_diff_resamples_pairs_jointly():
    # b = a + 1 on every item: every joint resample has mean(b*) - mean(a*) = 1, however
    # spread out a is. Independent resampling would give a CI tens of units wide.
    a = np.array([0.0, 10, 20, 30, 40])
    ci = stats.paired_bootstrap_diff(a, a + 1, n_resamples=300)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((1, 1, 1))


def test_paired_diff_matches_scipy_paired():
    a = np.array([0.2, 0.5, 0.1, 0.7, 0.4, 0.6])
    b = np.array([0.3, 0.5, 0.4, 0.9, 0.4, 0.8])
    ci = stats.paired_bootstrap_diff(a, b, n_resamples=400, seed=7)
    ref = scipy.stats.bootstrap(
        (a, b), lambda x, y, axis: y.mean(axis) - x.mean(axis), paired=True,
        n_resamples=400, rng=np.random.default_rng(7)).confidence_interval
    assert (ci.low, ci.high) == pytest.approx((ref.low, ref.high))
    assert ci.estimate == pytest.approx(0.8 / 6)  # b - a = .1, 0, .3, .2, 0, .2
    assert ci.method == "BCa"


def test_paired_diff_identical_pairs_degenerate():
    ci = stats.paired_bootstrap_diff([1, 1, 1], [2, 2, 2])
    assert (ci.estimate, ci.low, ci.high, ci.method) == (1, 1, 1, "degenerate")


@pytest.mark.parametrize("a, b, match", [
    ([1, 2, 3], [1, 2], "same length"),
    ([1], [2], "at least 2"),
    ([], [], "empty"),
    ([1, 2], [1, np.nan], "NaN"),
])
def test_paired_diff_bad_input(a, b, match):
    with pytest.raises(ValueError, match=match):
        stats.paired_bootstrap_diff(a, b)


# --- crossed_components, crossed_standard_error, crossed_t_interval ---------------------

# 3 seeds x 3 tasks: seed effects 0, 3, 6, task effects 0, 1, 2, and a residual pattern whose row and column means
# are 0. By hand: seed means 1, 4, 7 -> MS_seed = 3 * 18 / 2 = 27; task means 3, 4, 5 -> MS_task = 3 * 2 / 2 = 3;
# residual SS = 4 * 0.01 on 4 df -> MS_res = 0.01.
CROSSED = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8]], float) + np.array([[.1, -.1, 0], [-.1, .1, 0], [0, 0, 0]])


def test_crossed_components_hand_computed():
    c = stats.crossed_components(CROSSED)
    assert c["seed"] == pytest.approx((27 - 0.01) / 3) and c["task"] == pytest.approx((3 - 0.01) / 3)
    assert c["residual"] == pytest.approx(0.01) and (c["seeds"], c["tasks"]) == (3, 3)
    se, df = stats.crossed_standard_error(c)
    # Var(mean) estimated by (MS_seed + MS_task) / 9; Satterthwaite: 30^2 / (27^2/2 + 3^2/2)
    assert se == pytest.approx(math.sqrt(30 / 9)) and df == pytest.approx(30 ** 2 / (364.5 + 4.5))
    # projected onto the same design from the components, each mean square is its expectation: the same here
    assert stats.crossed_standard_error({k: v for k, v in c.items() if not k.startswith("ms_")}, 3, 3) == \
        pytest.approx((se, df))
    # the detectable effect unbiases the estimated standard error by c4(df)
    c4 = math.sqrt(2 / df) * math.gamma((df + 1) / 2) / math.gamma(df / 2)
    assert stats.crossed_detectable_effect(c) == pytest.approx(stats.t_detectable_effect(se / c4, df))
    ci = stats.crossed_t_interval(CROSSED)
    half = scipy.stats.t.ppf(0.975, df) * se
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((4.0, 4.0 - half, 4.0 + half))
    assert ci.method == "crossed t (Satterthwaite df=2.4)" and ci.n == 9


def test_crossed_components_recover_known_variances():
    rng = np.random.default_rng(0)
    x = 1 + rng.normal(0, 0.3, (300, 1)) + rng.normal(0, 0.2, (1, 400)) + rng.normal(0, 0.5, (300, 400))
    c = stats.crossed_components(x)
    assert (c["seed"], c["task"], c["residual"]) == pytest.approx((0.09, 0.04, 0.25), rel=0.2)


def test_a_seed_mean_square_of_zero_adds_no_seed_term():
    # seed means exactly equal: MS_seed = 0, so the seed variance is 0 and the df are the tasks' alone
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (3, 40))
    x -= x.mean(axis=1, keepdims=True)
    c = stats.crossed_components(x)
    assert c["seed"] == 0.0 and c["residual"] > 0
    assert stats.crossed_standard_error(c)[1] > 20  # the df are the residual's and the tasks', not 2


def test_crossed_interval_with_one_seed_is_the_t_interval_over_tasks():
    x = [[0.0, 1.0, 1.0, 0.0, 1.0]]
    ci = stats.crossed_t_interval(x)
    low, high = scipy.stats.t.interval(0.95, 4, loc=0.6, scale=scipy.stats.sem(x[0]))
    assert (ci.low, ci.high) == pytest.approx((low, high)) and ci.method.endswith("conditional on 1 seed)")
    assert stats.crossed_components(x)["seed"] is None


def test_crossed_projection_and_degenerate_input():
    c = stats.crossed_components(CROSSED)
    more = stats.crossed_standard_error(c, seeds=30, tasks=300)
    assert more[0] < stats.crossed_standard_error(c)[0] and more[1] > 2.4
    assert stats.crossed_standard_error(stats.crossed_components(np.full((3, 4), 0.25))) == (0.0, math.inf)
    ci = stats.crossed_t_interval(np.full((3, 4), 0.25))
    assert (ci.estimate, ci.low, ci.high) == (0.25, 0.25, 0.25)


@pytest.mark.parametrize("scores, kwargs, match", [
    ([1.0, 2.0], {}, "2-D"),
    (np.empty((0, 3)), {}, "empty"),
    ([[1.0]], {}, "at least 2"),
    ([[1.0, np.nan]], {}, "NaN"),
    ([[1.0, 2.0]], {"confidence": 1.0}, "confidence"),
])
def test_crossed_bad_input(scores, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stats.crossed_t_interval(scores, **kwargs)


# --- t_detectable_effect ----------------------------------------------------------------


def test_t_detectable_effect():
    # infinite df: the normal formula (1.959964 + 0.841621) * se
    assert stats.t_detectable_effect(0.1, math.inf) == pytest.approx((Z95 + Z80) * 0.1, rel=1e-9)
    for df in (2, 5.5, 40):
        mde = stats.t_detectable_effect(0.1, df)
        assert scipy.stats.nct.sf(scipy.stats.t.ppf(0.975, df), df, mde / 0.1) == pytest.approx(0.8)
        assert mde > (Z95 + Z80) * 0.1  # few df need a bigger effect
    assert stats.t_detectable_effect(0.0, math.inf) == 0.0
    for se, df, match in [(-1, 3, "se >= 0"), (0.1, 0, "df > 0"), (np.nan, 3, "se >= 0")]:
        with pytest.raises(ValueError, match=match):
            stats.t_detectable_effect(se, df)


# --- wilson_interval --------------------------------------------------------------------


def test_wilson_hand_computed():
    # 5/10, z = 1.959964, z^2 = 3.841459: center = 0.5 (symmetric);
    # half = z / (1 + z^2/10) * sqrt(.5*.5/10 + z^2/400)
    #      = 1.959964 / 1.3841459 * sqrt(0.025 + 0.0096036) = 0.2634069.
    ci = stats.wilson_interval(5, 10)
    assert (ci.low, ci.high) == pytest.approx((0.2365931, 0.7634069), abs=1e-7)
    assert (ci.estimate, ci.method, ci.n) == (0.5, "wilson", 10)
    # 0/10: low = 0, high = 2 * center = 2 * (z^2/20) / (1 + z^2/10) = 0.2775328.
    ci = stats.wilson_interval(0, 10)
    assert ci.low == 0.0 and ci.high == pytest.approx(0.2775328, abs=1e-7)


def test_wilson_matches_statsmodels():
    for successes, n, conf in [(0, 1, .95), (1, 1, .95), (3, 17, .9), (37, 50, .99),
                               (120, 164, .95), (1, 1000, .8)]:
        ci = stats.wilson_interval(successes, n, confidence=conf)
        ref = proportion_confint(successes, n, alpha=1 - conf, method="wilson")
        assert (ci.low, ci.high) == pytest.approx(ref, abs=1e-12), (successes, n, conf)


def test_wilson_keeps_the_estimate_inside_at_0_and_n_successes():
    for n in range(1, 300):
        for confidence in (0.8, 0.95, 0.99):
            none, every = stats.wilson_interval(0, n, confidence=confidence), stats.wilson_interval(n, n,
                                                                                                  confidence=confidence)
            assert none.low == 0.0 == none.estimate and every.high == 1.0 == every.estimate, (n, confidence)


@pytest.mark.parametrize("successes, n, kwargs, match", [
    (0, 0, {}, "n must be positive"),
    (5, 4, {}, "must not exceed"),
    (-1, 4, {}, "non-negative"),
    (1, 4, {"confidence": 1.2}, "confidence"),
])
def test_wilson_bad_input(successes, n, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stats.wilson_interval(successes, n, **kwargs)


# --- pass_at_k --------------------------------------------------------------------------


def test_pass_at_k_hand_computed():
    assert stats.pass_at_k(5, 2, 1) == pytest.approx(0.4)  # = c/n for k=1
    assert stats.pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert stats.pass_at_k(5, 0, 3) == 0.0
    assert stats.pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset has a pass


def test_pass_at_k_matches_binomial_formula():
    for n in (1, 7, 20, 200):
        for c in sorted({0, 1, n // 3, n - 1, n}):
            for k in sorted({1, min(2, n), max(1, n // 2), n}):
                exact = 1 - scipy.special.comb(n - c, k, exact=True) / scipy.special.comb(
                    n, k, exact=True)
                assert stats.pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n, c, k, match", [
    (5, 2, 6, "k must be in"),
    (5, 2, 0, "k must be in"),
    (5, 6, 1, "must not exceed"),
    (5, -1, 1, "non-negative"),
])
def test_pass_at_k_bad_input(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        stats.pass_at_k(n, c, k)


# --- binomial_test ----------------------------------------------------------------------


def test_binomial_test_hand_computed():
    # P(X >= 8), X ~ Binom(10, .5) = (45 + 10 + 1) / 1024.
    res = stats.binomial_test(8, 10)
    assert res["p_value"] == pytest.approx(56 / 1024)
    assert res["estimate"] == 0.8
    # One-sided "greater" CI: the lower bound is that of a two-sided 90% Wilson interval.
    assert res["ci_high"] == 1.0
    assert res["ci_low"] == pytest.approx(stats.wilson_interval(8, 10, confidence=0.9).low)


def test_binomial_test_two_sided_ci_is_wilson():
    res = stats.binomial_test(8, 10, alternative="two-sided")
    assert res["p_value"] == pytest.approx(2 * 56 / 1024)
    ci = stats.wilson_interval(8, 10)
    assert (res["ci_low"], res["ci_high"]) == pytest.approx((ci.low, ci.high))


@pytest.mark.parametrize("successes, n, match", [(0, 0, "n must be positive"),
                                                 (3, 2, "must not exceed")])
def test_binomial_test_bad_input(successes, n, match):
    with pytest.raises(ValueError, match=match):
        stats.binomial_test(successes, n)
