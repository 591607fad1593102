"""Exact tests of the divergence and AUROC helpers added to composer.stats for spike 003."""

import math

import numpy as np
import pytest

from composer import stats

LOG2_3 = math.log2(3)


def test_entropy_hand_values():
    assert stats.entropy([0.5, 0.5], base=2) == pytest.approx(1.0)
    assert stats.entropy([1, 0]) == 0.0
    assert stats.entropy([1, 1, 2], base=2) == pytest.approx(1.5)  # normalized to [1/4, 1/4, 1/2]
    assert stats.entropy([1, 1, 1]) == pytest.approx(math.log(3))


def test_kl_hand_values():
    assert stats.kl_divergence([0.5, 0.5], [0.25, 0.75], base=2) == pytest.approx(1 - 0.5 * LOG2_3)
    assert stats.kl_divergence([0.2, 0.8], [0.2, 0.8]) == 0.0
    assert stats.kl_divergence([0.5, 0.5], [1.0, 0.0]) == math.inf
    assert stats.kl_divergence([1.0, 0.0], [0.5, 0.5], base=2) == pytest.approx(1.0)  # 0 log 0 = 0


def test_js_hand_values():
    assert stats.js_divergence([1, 0], [0, 1], base=2) == pytest.approx(1.0)
    assert stats.js_divergence([0.3, 0.7], [0.3, 0.7]) == 0.0
    # M = [3/4, 1/4]: H(M) = 0.811278 bits; H(P) = 0, H(Q) = 1
    h_m = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert stats.js_divergence([1, 0], [0.5, 0.5], base=2) == pytest.approx(h_m - 0.5)


def test_generalized_js_hand_values():
    eye = np.eye(3)
    assert stats.generalized_js_divergence(eye, base=2) == pytest.approx(LOG2_3)  # disjoint: the maximum log N
    assert stats.generalized_js_divergence([[0.2, 0.8]] * 3) == 0.0
    # weights 3:1 on disjoint point masses: H([3/4, 1/4]) - 0
    h_m = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert stats.generalized_js_divergence([[1, 0], [0, 1]], weights=[3, 1], base=2) == pytest.approx(h_m)
    # two agree, one differs: M = [2/3, 1/3]
    assert stats.generalized_js_divergence([[1, 0], [1, 0], [0, 1]], base=2) == pytest.approx(
        -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3)))


def test_divergences_refuse_bad_input():
    with pytest.raises(ValueError, match="negative"):
        stats.entropy([0.5, -0.5, 1])
    with pytest.raises(ValueError, match="sums to 0"):
        stats.entropy([0, 0])
    with pytest.raises(ValueError, match="same support"):
        stats.kl_divergence([1, 0], [1, 0, 0])
    with pytest.raises(ValueError, match="weights"):
        stats.generalized_js_divergence(np.eye(3), weights=[1, 1])


def test_auroc_hand_values():
    assert stats.auroc([3, 4], [1, 2]) == 1.0
    assert stats.auroc([1, 2], [3, 4]) == 0.0
    assert stats.auroc([1, 3], [2, 2]) == 0.5  # 2 of 4 comparisons won
    assert stats.auroc([1, 2, 3], [2]) == pytest.approx(0.5)  # 0 + 1/2 (tie) + 1 over 3
    assert stats.auroc([2, 3, 3], [1, 3]) == pytest.approx((1 + 0 + 1 + 0.5 + 1 + 0.5) / 6)


def test_auroc_statistic_matches_brute_force_vectorized():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, size=(7, 6)).astype(float), rng.integers(0, 5, size=(7, 4)).astype(float)
    got = stats._auroc_statistic(a, b, axis=-1)
    want = [np.mean([(x > y) + 0.5 * (x == y) for x in ra for y in rb]) for ra, rb in zip(a, b)]
    np.testing.assert_allclose(got, want)


def test_auroc_ci():
    ci = stats.auroc_ci([3, 4, 5], [1, 2])
    assert (ci.estimate, ci.low, ci.high, ci.method, ci.n) == (1.0, 1.0, 1.0, "degenerate", 5)
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(1, 1, 40), rng.normal(0, 1, 50)
    ci = stats.auroc_ci(pos, neg, seed=3)
    assert ci.estimate == pytest.approx(stats.auroc(pos, neg))
    assert 0 <= ci.low < ci.estimate < ci.high <= 1 and ci.n == 90
    assert ci == stats.auroc_ci(pos, neg, seed=3)  # seeded
    with pytest.raises(ValueError, match="at least 2"):
        stats.auroc_ci([1], [0, 1])
