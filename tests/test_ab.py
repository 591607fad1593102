"""Spike 004's statistics and verdict rule, on outcomes small enough to check by hand.

    .venv/bin/pytest tests/test_ab.py
"""

import numpy as np
import pytest

from composer import ab, stats


@pytest.mark.parametrize("estimate, low, high, expected", [
    (0.05, 0.01, 0.09, "VALIDATED"),       # >= 2 points and the interval above 0
    (0.02, 0.001, 0.04, "VALIDATED"),      # exactly 2 points counts
    (0.05, -0.01, 0.11, "INCONCLUSIVE"),   # big estimate, but 0 is inside
    (0.015, 0.005, 0.025, "INCONCLUSIVE"),  # above 0 but under 2 points, and 2 points not excluded
    (0.0, -0.03, 0.019, "INVALIDATED"),    # the whole interval under 2 points
    (-0.05, -0.09, -0.01, "INVALIDATED"),
])
def test_verdict_rule(estimate, low, high, expected):
    assert ab.verdict(estimate, low, high) == expected


def test_the_gate_criterion_gives_the_same_verdict_through_the_report_rule():
    from composer import report

    grid = np.linspace(-0.06, 0.06, 13)
    for low, estimate, high in ((lo, e, hi) for lo in grid for e in grid for hi in grid if lo <= e <= hi):
        expected = ("VALIDATED" if estimate >= ab.MIN_EFFECT and low > 0 else
                    "INVALIDATED" if high < ab.MIN_EFFECT else "INCONCLUSIVE")
        assert report.decide_verdict([ab.gate(estimate, low, high)]) == expected, (low, estimate, high)


def test_verdict_refuses_an_estimate_outside_its_interval():
    with pytest.raises(ValueError, match="outside its interval"):
        ab.verdict(0.1, 0.0, 0.05)


def test_tasks_needed_inverts_the_minimum_detectable_effect():
    for discordance, effect, seeds in [(0.2, 0.02, 3), (0.05, 0.1, 1), (1.0, 0.3, 2)]:
        n = ab.tasks_needed(discordance, effect, seeds)
        assert stats.min_detectable_effect_paired_binary(seeds * n, discordance=discordance) <= effect
        assert stats.min_detectable_effect_paired_binary(seeds * (n - 1), discordance=discordance) > effect
    with pytest.raises(ValueError, match="discordance"):
        ab.tasks_needed(0.0, 0.02, 3)


def _outcomes(cells):
    """seeds x tasks lists of per-sample outcome lists -> array."""
    return np.array(cells, dtype=float)


def test_compare_by_hand():
    # 2 seeds x 4 tasks x 2 samples. B solves everything A solves, plus task 0 on both seeds (both samples)
    # and one sample of task 1 on seed 0.
    a = _outcomes([[[0, 0], [0, 0], [1, 1], [0, 0]], [[0, 0], [0, 0], [1, 1], [1, 0]]])
    b = _outcomes([[[1, 1], [1, 0], [1, 1], [0, 0]], [[1, 1], [0, 0], [1, 1], [1, 0]]])
    r = ab.compare(a, b, n_resamples=500)
    assert r["pass1"]["a"]["mean"] == pytest.approx(5 / 16) and r["pass1"]["b"]["mean"] == pytest.approx(10 / 16)
    assert r["pass1"]["b"]["wilson"] == stats.wilson_interval(10, 16).as_dict()
    assert r["diff"]["estimate"] == pytest.approx((1 + 0.5 + 1) / 8)  # cell differences averaged over 8 cells
    assert r["diff"]["low"] <= r["diff"]["estimate"] <= r["diff"]["high"] and r["diff"]["n"] == 8
    assert [s["estimate"] for s in r["per_seed"]] == pytest.approx([1.5 / 4, 1 / 4])
    assert r["mcnemar"] == stats.mcnemar_from_outcomes(a.ravel(), b.ravel())
    assert (r["mcnemar"]["b"], r["mcnemar"]["c"]) == (0, 5)  # A-only passes, B-only passes (samples)
    assert r["discordance"] == pytest.approx(3 / 8)
    assert r["mde"] == pytest.approx(stats.min_detectable_effect_paired_binary(8, discordance=3 / 8))
    assert r["verdict"] == ab.verdict(r["diff"]["estimate"], r["diff"]["low"], r["diff"]["high"])
    assert (r["tasks_needed"] is None) == (r["verdict"] != "INCONCLUSIVE")


def test_identical_arms_are_never_validated_and_say_how_many_tasks_would_be_needed():
    rng = np.random.default_rng(0)
    a = (rng.random((3, 20, 1)) < 0.3).astype(float)
    r = ab.compare(a, a.copy(), n_resamples=200)
    # No cell differs: a bootstrap would say [0, 0]; the exact bound on the discordance says +-5.96 points
    bound = 1 - 0.025 ** (1 / 60)
    assert r["diff"]["estimate"] == 0 and (r["diff"]["low"], r["diff"]["high"]) == pytest.approx((-bound, bound))
    assert r["verdict"] == "INCONCLUSIVE" and bound == pytest.approx(0.0596, abs=1e-4)
    assert r["mde"] == r["diff"]["high"]  # what the data can exclude, not the normal approximation's figure
    assert ab.cells_for_zero_discordance_bound(0.02) == 183  # 1 - 0.025 ** (1 / n) < 0.02 from n = 183
    assert ab.zero_discordance_interval(183).high < 0.02 <= ab.zero_discordance_interval(182).high
    assert r["tasks_needed"] == 61  # 183 cells over 3 seeds
    many = (rng.random((3, 200, 1)) < 0.3).astype(float)  # 600 agreeing cells bound it under 2 points
    assert ab.compare(many, many.copy(), n_resamples=50)["verdict"] == "INVALIDATED"
    # Two independent draws of the same 30% policy: 60 cells cannot tell 2 points from 0
    noisy = ab.compare(a, (rng.random((3, 20, 1)) < 0.3).astype(float), n_resamples=200)
    assert noisy["verdict"] == "INCONCLUSIVE" and noisy["diff"]["low"] < 0 < noisy["diff"]["high"]
    assert noisy["mde"] > ab.MIN_EFFECT
    assert noisy["tasks_needed"] == ab.tasks_needed(noisy["discordance"], ab.MIN_EFFECT, 3) > 20


@pytest.mark.parametrize("a, b, match", [
    (np.zeros((2, 3)), np.zeros((2, 3)), "seeds x tasks x samples"),
    (np.zeros((2, 3, 1)), np.zeros((2, 4, 1)), "same seeds, tasks and samples"),
    (np.full((2, 3, 1), 0.5), np.zeros((2, 3, 1)), "0/1"),
    (np.zeros((0, 3, 1)), np.zeros((0, 3, 1)), "non-empty"),
])
def test_bad_outcomes_are_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        ab.compare(a, b)
