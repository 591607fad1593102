"""Small statistics helpers for comparing runs: CIs, paired tests, pass@k, power.

Usage::

    from composer import stats

    stats.bootstrap_ci(per_task_pass1)                 # CI of the mean (BCa)
    stats.paired_bootstrap_diff(base, treated)         # CI of treated minus base
    stats.two_level_bootstrap(diffs)                   # diffs: seeds x tasks matrix
    stats.mcnemar_from_outcomes(base_ok, treated_ok)   # {"b", "c", "p_value"}
    stats.wilson_interval(37, 50)                      # CI of a proportion
    stats.pass_at_k(n=20, c=3, k=5)                    # unbiased pass@k
    stats.min_detectable_effect_paired_binary(500, discordance=0.2)
    stats.binomial_test(14, 20, p=0.5)                 # {"p_value", "estimate", ...}

Every interval comes back as a `CI` (estimate, low, high, confidence, method, n);
`CI.as_dict()` gives plain Python values for JSON reports. `CI.method` says how the
interval was actually obtained, which can differ from the requested method (see
`bootstrap_ci`). The random functions take an integer `seed` and are deterministic
given it.

Bad input (empty arrays, NaN, confidence outside (0, 1), ...) raises ValueError with a
message naming the problem rather than returning a silent NaN.
"""

import dataclasses
import inspect
import math
import warnings

import numpy as np
import scipy.stats


@dataclasses.dataclass(frozen=True)
class CI:
    """A point estimate with a confidence interval.

    Attributes:
        estimate: the statistic on the observed data.
        low, high: interval bounds.
        confidence: nominal two-sided coverage, e.g. 0.95.
        method: how the interval was obtained: "BCa", "percentile", "basic",
            "degenerate", "two-level percentile" or "wilson".
        n: number of observations behind the estimate.
    """

    estimate: float
    low: float
    high: float
    confidence: float
    method: str
    n: int

    def as_dict(self):
        return dataclasses.asdict(self)


def _make_ci(estimate, low, high, confidence, method, n):
    # Cast numpy scalars so that as_dict() is JSON-serialisable as is.
    return CI(float(estimate), float(low), float(high), float(confidence), method, int(n))


def _check_unit_interval(value, name):
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")


def _as_finite_array(data, name, ndim):
    x = np.asarray(data, dtype=float)
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


def _check_count(value, name):
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _check_successes(successes, n):
    successes = _check_count(successes, "successes")
    n = _check_count(n, "n")
    if n == 0:
        raise ValueError("n must be positive, got 0")
    if successes > n:
        raise ValueError(f"successes ({successes}) must not exceed n ({n})")
    return successes, n


def _check_paired(a, b):
    x = _as_finite_array(a, "a", ndim=1)
    y = _as_finite_array(b, "b", ndim=1)
    if x.size != y.size:
        raise ValueError(f"a and b must have the same length (paired), got {x.size} and {y.size}")
    return x, y


def _accepts_axis(statistic):
    # The rule scipy applies for `vectorized=None`, except that callables without an
    # inspectable signature (some builtins) count as unvectorized instead of raising.
    try:
        return "axis" in inspect.signature(statistic).parameters
    except (TypeError, ValueError):
        return False


def _scipy_bootstrap(data, statistic, *, paired, confidence, n_resamples, method, seed):
    """scipy.stats.bootstrap, falling back to percentile when BCa is NaN.

    Returns (low, high, method actually used).
    """
    kwargs = dict(vectorized=_accepts_axis(statistic), paired=paired,
                  confidence_level=confidence)
    # scipy 1.17 signals a degenerate BCa interval with NaN bounds plus a
    # DegenerateDataWarning (it warns exactly when a bound is NaN). That happens when
    # all jackknife values are equal, making the acceleration 0/0: e.g. the median of
    # [1, 1, 1, 1, 5]. We handle it below and report the method used, so the warning,
    # and numpy's 0/0 RuntimeWarning before it, would only be noise.
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        res = scipy.stats.bootstrap(data, statistic, n_resamples=n_resamples, method=method,
                                    rng=np.random.default_rng(seed), **kwargs)
    low, high = res.confidence_interval
    if method.lower() == "bca" and (np.isnan(low) or np.isnan(high)):
        # Reuse the bootstrap distribution (n_resamples=0 adds no resamples): the result
        # is what method="percentile" with the same seed would give.
        res = scipy.stats.bootstrap(data, statistic, n_resamples=0, method="percentile",
                                    bootstrap_result=res, **kwargs)
        low, high = res.confidence_interval
        method = "percentile"
    return low, high, method


def bootstrap_ci(data, statistic=np.mean, *, confidence=0.95, n_resamples=2000,
                 method="BCa", seed=0):
    """Bootstrap confidence interval of `statistic` over 1-D `data`.

    A thin wrapper over `scipy.stats.bootstrap`; the statistic is evaluated vectorized
    when it accepts an `axis` argument (np.mean, np.median, ...).

    Args:
        data: 1-D array-like of at least 2 finite numbers.
        statistic: function of a 1-D array returning a scalar.
        confidence: two-sided coverage, in (0, 1).
        n_resamples: number of bootstrap resamples.
        method: "BCa", "percentile" or "basic", as in scipy.
        seed: seed for `np.random.default_rng`.

    Returns:
        CI with n = len(data). `method` is the one actually used: "BCa" falls back to
        "percentile" when scipy cannot compute it (NaN bounds, e.g. the median of data
        with few distinct values). All-identical data gives low == high == estimate
        with method "degenerate", since every resample is then the same.
    """
    _check_unit_interval(confidence, "confidence")
    x = _as_finite_array(data, "data", ndim=1)
    if x.size < 2:
        raise ValueError(f"bootstrap needs at least 2 observations, got {x.size}")
    estimate = statistic(x)
    if np.all(x == x[0]):
        return _make_ci(estimate, estimate, estimate, confidence, "degenerate", x.size)
    low, high, used = _scipy_bootstrap((x,), statistic, paired=False, confidence=confidence,
                                       n_resamples=n_resamples, method=method, seed=seed)
    return _make_ci(estimate, low, high, confidence, used, x.size)


def paired_bootstrap_diff(a, b, statistic=np.mean, *, confidence=0.95, n_resamples=2000,
                          method="BCa", seed=0):
    """Bootstrap CI of statistic(b) - statistic(a) over paired observations.

    Direction: b minus a. Pass the baseline as `a` and the treatment as `b`; a positive
    estimate then means the treatment scores higher. a[i] and b[i] must describe the
    same unit (task, prompt, ...): pairs are resampled jointly (`paired=True` in scipy),
    which keeps between-unit variation out of the difference.

    Arguments, fallback and the "degenerate" case (all pairs identical) are as in
    `bootstrap_ci`.

    Returns:
        CI with estimate = statistic(b) - statistic(a) and n = number of pairs.
    """
    _check_unit_interval(confidence, "confidence")
    x, y = _check_paired(a, b)
    if x.size < 2:
        raise ValueError(f"bootstrap needs at least 2 pairs, got {x.size}")
    estimate = statistic(y) - statistic(x)
    if np.all(x == x[0]) and np.all(y == y[0]):
        return _make_ci(estimate, estimate, estimate, confidence, "degenerate", x.size)
    if _accepts_axis(statistic):
        def diff(a_, b_, axis=-1):
            return statistic(b_, axis=axis) - statistic(a_, axis=axis)
    else:
        def diff(a_, b_):
            return statistic(b_) - statistic(a_)
    low, high, used = _scipy_bootstrap((x, y), diff, paired=True, confidence=confidence,
                                       n_resamples=n_resamples, method=method, seed=seed)
    return _make_ci(estimate, low, high, confidence, used, x.size)


def two_level_bootstrap(scores, *, statistic=np.mean, confidence=0.95, n_resamples=2000,
                        seed=0):
    """Percentile CI that resamples both training seeds and tasks.

    `scores[i, j]` is the score (e.g. a pass@1 difference) of training seed i on task j.
    Each resample draws seeds with replacement, then tasks with replacement, and
    evaluates `statistic` on all cells of the resampled matrix (the grand mean by
    default). The interval so covers both a new training seed and a new task set.

    Args:
        scores: 2-D array-like, seeds x tasks, of finite numbers; at least 2 cells.
        statistic: function of a 1-D array returning a scalar; it is applied to the
            flattened (resampled) matrix.
        confidence: two-sided coverage, in (0, 1).
        n_resamples: number of bootstrap resamples.
        seed: seed for `np.random.default_rng`.

    Returns:
        CI with estimate = statistic of all observed cells, method
        "two-level percentile" and n = number of cells (seeds x tasks).
    """
    _check_unit_interval(confidence, "confidence")
    x = _as_finite_array(scores, "scores", ndim=2)
    if x.size < 2:
        raise ValueError(f"two_level_bootstrap needs at least 2 cells, got shape {x.shape}")
    if _check_count(n_resamples, "n_resamples") == 0:
        raise ValueError("n_resamples must be positive, got 0")
    n_seeds, n_tasks = x.shape
    rng = np.random.default_rng(seed)
    seed_idx = rng.integers(n_seeds, size=(n_resamples, n_seeds))
    # One task draw per replicate, shared by all seeds: every seed was evaluated on the
    # same tasks, so a task that is easy for one seed tends to be easy for all of them.
    # Drawing tasks independently per seed would average that task effect away across
    # seeds and give intervals that are too narrow.
    task_idx = rng.integers(n_tasks, size=(n_resamples, n_tasks))
    vectorized = _accepts_axis(statistic)
    # Gather ~4M cells (32 MB) at a time so big matrices fit in memory. The indices are
    # drawn above, in one go, so the chunk size does not change the result.
    chunk = max(1, 2**22 // x.size)
    dist = []
    for start in range(0, n_resamples, chunk):
        s = seed_idx[start:start + chunk, :, None]
        t = task_idx[start:start + chunk, None, :]
        cells = x[s, t].reshape(len(s), -1)
        if vectorized:
            dist.append(statistic(cells, axis=-1))
        else:
            dist.append([statistic(row) for row in cells])
    dist = np.concatenate(dist)
    alpha = 1 - confidence
    # np.quantile's default "linear" rule is the one scipy's percentile method uses.
    low, high = np.quantile(dist, [alpha / 2, 1 - alpha / 2])
    return _make_ci(statistic(x.ravel()), low, high, confidence, "two-level percentile",
                    x.size)


def mcnemar_exact(b, c):
    """Two-sided exact McNemar p-value from the discordant-pair counts.

    Args:
        b: number of pairs where A passes and B fails.
        c: number of pairs where A fails and B passes.

    Returns:
        min(1, 2 * BinomCDF(min(b, c); b + c, 0.5)), the value of statsmodels'
        `mcnemar(table, exact=True).pvalue`; 1.0 when b + c == 0, since without
        discordant pairs there is no evidence either way.
    """
    b = _check_count(b, "b")
    c = _check_count(c, "c")
    if b + c == 0:
        return 1.0
    return float(min(1.0, 2 * scipy.stats.binom.cdf(min(b, c), b + c, 0.5)))


def mcnemar_from_outcomes(a, b):
    """Exact McNemar test from per-item pass/fail outcomes of systems A and B.

    Args:
        a, b: 1-D bool (or 0/1) arrays; a[i] and b[i] are the same item.

    Returns:
        dict(b=#(A passes, B fails), c=#(A fails, B passes), p_value=mcnemar_exact(b, c)).
    """
    x, y = _check_paired(a, b)
    for name, v in (("a", x), ("b", y)):
        if not np.all((v == 0) | (v == 1)):
            raise ValueError(f"{name} must hold booleans or 0/1 values")
    x, y = x.astype(bool), y.astype(bool)
    n_b, n_c = int(np.sum(x & ~y)), int(np.sum(~x & y))
    return dict(b=n_b, c=n_c, p_value=mcnemar_exact(n_b, n_c))


def wilson_interval(successes, n, *, confidence=0.95):
    """Wilson score interval for a binomial proportion.

    With z = Phi^-1(1 - (1 - confidence) / 2) and p = successes / n:
        center = (p + z^2 / (2n)) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
    Unlike the normal (Wald) interval it stays inside [0, 1] and does not collapse to a
    point at 0 or n successes.

    Returns:
        CI with estimate = successes / n, method "wilson".
    """
    _check_unit_interval(confidence, "confidence")
    successes, n = _check_successes(successes, n)
    z = scipy.stats.norm.ppf(1 - (1 - confidence) / 2)
    p = successes / n
    denom = 1 + z**2 / n
    center = (p + z**2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    # The clip only removes rounding error at 0 or n successes (e.g. -1e-17).
    return _make_ci(p, max(0.0, center - half), min(1.0, center + half), confidence,
                    "wilson", n)


def pass_at_k(n, c, k):
    """Unbiased pass@k estimator of Chen et al. (2021), "Evaluating Large Language
    Models Trained on Code".

    Given n samples of which c are correct: the probability that k samples drawn
    without replacement include a correct one, 1 - C(n-c, k) / C(n, k). It is computed
    as 1 - prod_{i=n-c+1}^{n} (1 - k / i), which avoids huge binomial coefficients.
    Returns 1.0 when n - c < k (every k-subset then holds a correct sample).
    """
    n, c, k = (_check_count(v, name) for v, name in ((n, "n"), (c, "c"), (k, "k")))
    if c > n:
        raise ValueError(f"c ({c}) must not exceed n ({n})")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def min_detectable_effect_paired_binary(n_pairs, *, discordance, alpha=0.05, power=0.8):
    """Minimum detectable difference in success rates for a paired binary design.

    For n_pairs items scored pass/fail under both conditions and compared with a
    two-sided McNemar test at level alpha: the smallest |p_B - p_A| detected with the
    given power, by the normal approximation

        MDE = (z_{1 - alpha/2} + z_{power}) * sqrt(discordance / n_pairs),

    where discordance = p01 + p10 is the expected fraction of discordant pairs. This is
    the paired-proportion sample-size formula of Connor (1987), "Sample size for testing
    differences in proportions for the paired-sample design", Biometrics 43:207-211,

        n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2,

    (psi = discordance, delta = effect) solved for delta after dropping the -delta^2
    term; that makes the MDE slightly conservative (larger). With several training
    seeds, the caller passes n_pairs = seeds x items, treating them as independent.

    Since |p10 - p01| <= discordance, a result above `discordance` means that no effect
    is detectable with n_pairs pairs.
    """
    if not n_pairs > 0:
        raise ValueError(f"n_pairs must be positive, got {n_pairs!r}")
    if not 0 < discordance <= 1:
        raise ValueError(f"discordance must be in (0, 1], got {discordance!r}")
    _check_unit_interval(alpha, "alpha")
    _check_unit_interval(power, "power")
    z = scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(power)
    return float(z * math.sqrt(discordance / n_pairs))


def binomial_test(successes, n, p=0.5, alternative="greater", *, confidence=0.95):
    """Exact binomial test (`scipy.stats.binomtest`) with a Wilson CI.

    The CI follows `alternative`, as scipy's `proportion_ci` does: a one-sided test
    gives a one-sided interval, e.g. ci_high = 1.0 for "greater".

    Returns:
        dict(p_value, estimate=successes / n, ci_low, ci_high).
    """
    _check_unit_interval(confidence, "confidence")
    successes, n = _check_successes(successes, n)
    res = scipy.stats.binomtest(successes, n, p, alternative=alternative)
    ci = res.proportion_ci(confidence_level=confidence, method="wilson")
    return dict(p_value=float(res.pvalue), estimate=float(res.statistic),
                ci_low=float(ci.low), ci_high=float(ci.high))


# -----------------------------------------------------------------------------
# Divergences between discrete distributions, and AUROC (spike 003's statistics)


def _as_distribution(p, name):
    x = _as_finite_array(p, name, ndim=1)
    if np.any(x < 0):
        raise ValueError(f"{name} has negative entries")
    total = x.sum()
    if not total > 0:
        raise ValueError(f"{name} sums to 0")
    return x / total


def entropy(p, *, base=math.e):
    """Shannon entropy -sum p log p of a discrete distribution (normalized first; 0 log 0 = 0)."""
    x = _as_distribution(p, "p")
    nz = x[x > 0]
    return float(-(nz * np.log(nz)).sum() / math.log(base))


def kl_divergence(p, q, *, base=math.e):
    """KL(p || q) = sum p log(p / q) over a shared support (both normalized first); inf when q is 0 where p
    is not. Smooth the inputs (e.g. add a pseudo-count) before calling if that is not wanted."""
    x, y = _as_distribution(p, "p"), _as_distribution(q, "q")
    if x.size != y.size:
        raise ValueError(f"p and q must have the same support size, got {x.size} and {y.size}")
    mask = x > 0
    if np.any(y[mask] == 0):
        return math.inf
    return float((x[mask] * np.log(x[mask] / y[mask])).sum() / math.log(base))


def generalized_js_divergence(distributions, weights=None, *, base=math.e):
    """Generalized Jensen-Shannon divergence of N distributions over a shared support:
    H(sum_i w_i P_i) - sum_i w_i H(P_i), with equal weights by default.

    `distributions` is N x K (one row per distribution, each normalized first). It is 0 when all rows
    agree and at most log(N) (in `base`; reached by N distributions with disjoint supports and equal
    weights). With N = 2 it is the ordinary JS divergence."""
    x = _as_finite_array(distributions, "distributions", ndim=2)
    rows = np.stack([_as_distribution(row, f"distributions[{i}]") for i, row in enumerate(x)])
    if weights is None:
        w = np.full(len(rows), 1 / len(rows))
    else:
        w = _as_distribution(weights, "weights")
        if w.size != len(rows):
            raise ValueError(f"weights has {w.size} entries for {len(rows)} distributions")
    mixture = w @ rows
    value = entropy(mixture, base=base) - sum(wi * entropy(r, base=base) for wi, r in zip(w, rows))
    return max(0.0, float(value))  # rounding can leave -1e-17


def js_divergence(p, q, *, base=math.e):
    """Jensen-Shannon divergence of two distributions: generalized_js_divergence([p, q])."""
    x, y = _as_distribution(p, "p"), _as_distribution(q, "q")
    if x.size != y.size:
        raise ValueError(f"p and q must have the same support size, got {x.size} and {y.size}")
    return generalized_js_divergence(np.stack([x, y]), base=base)


def auroc(positives, negatives):
    """Area under the ROC curve of scores: P(a positive scores above a negative) + 0.5 P(tie), i.e. the
    Mann-Whitney U statistic of `positives` divided by n_pos * n_neg."""
    x = _as_finite_array(positives, "positives", ndim=1)
    y = _as_finite_array(negatives, "negatives", ndim=1)
    u = scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic").statistic
    return float(u / (x.size * y.size))


def _auroc_statistic(a, b, axis=-1):
    """U / (n_a n_b) from mid-ranks of the pooled sample (ties count one half), vectorized along `axis`."""
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    na, nb = a.shape[-1], b.shape[-1]
    ranks = scipy.stats.rankdata(np.concatenate([a, b], axis=-1), axis=-1)
    return (ranks[..., :na].sum(axis=-1) - na * (na + 1) / 2) / (na * nb)


def auroc_ci(positives, negatives, *, confidence=0.95, n_resamples=2000, method="BCa", seed=0):
    """`auroc` with a bootstrap interval that resamples positives and negatives independently (two
    samples, scipy.stats.bootstrap with paired=False); method as in `bootstrap_ci`, including the
    percentile fallback and the "degenerate" case (every resample gives the same AUROC: all positives
    above all negatives, or all scores equal).

    Returns:
        CI with estimate = auroc(positives, negatives), n = n_pos + n_neg.
    """
    _check_unit_interval(confidence, "confidence")
    x = _as_finite_array(positives, "positives", ndim=1)
    y = _as_finite_array(negatives, "negatives", ndim=1)
    if x.size < 2 or y.size < 2:
        raise ValueError(f"auroc_ci needs at least 2 positives and 2 negatives, got {x.size} and {y.size}")
    estimate = auroc(x, y)
    if x.min() > y.max() or x.max() < y.min() or (np.all(x == x[0]) and np.all(y == x[0])):
        return _make_ci(estimate, estimate, estimate, confidence, "degenerate", x.size + y.size)

    low, high, used = _scipy_bootstrap((x, y), _auroc_statistic, paired=False, confidence=confidence,
                                       n_resamples=n_resamples, method=method, seed=seed)
    return _make_ci(estimate, low, high, confidence, used, x.size + y.size)
