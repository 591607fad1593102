"""Small statistics helpers for comparing runs: CIs, paired tests, pass@k, power.

Usage::

    from composer import stats

    stats.bootstrap_ci(per_task_pass1)                 # CI of the mean (BCa)
    stats.paired_bootstrap_diff(base, treated)         # CI of treated minus base
    stats.crossed_t_interval(diffs)                    # diffs: seeds x tasks matrix, both random
    stats.wilson_interval(37, 50)                      # CI of a proportion
    stats.pass_at_k(n=20, c=3, k=5)                    # unbiased pass@k
    stats.t_detectable_effect(se, df)                  # 80% power at alpha 0.05
    stats.crossed_detectable_effect_at(at)             # the same, the variance at the effect: at(effect)
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
import scipy.optimize
import scipy.special
import scipy.stats


@dataclasses.dataclass(frozen=True)
class CI:
    """A point estimate with a confidence interval.

    Attributes:
        estimate: the statistic on the observed data.
        low, high: interval bounds.
        confidence: nominal two-sided coverage, e.g. 0.95.
        method: how the interval was obtained: "BCa", "percentile", "basic",
            "degenerate", "crossed t (...)" or "wilson".
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
    low, high = _wilson(successes / n, n, confidence)
    # At 0 (n) successes the bound is exactly 0 (1); computed, it can be 1e-17 (1 - 1e-16), which would leave
    # the estimate outside its own interval.
    return _make_ci(successes / n, 0.0 if successes == 0 else low, 1.0 if successes == n else high, confidence,
                    "wilson", n)


def _wilson(p, n, confidence, df=None):
    tail = 1 - (1 - confidence) / 2
    z = scipy.stats.norm.ppf(tail) if df is None else scipy.stats.t.ppf(tail, df)
    denom = 1 + z**2 / n
    center = (p + z**2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return center - half, center + half


def clustered_wilson_interval(successes, samples, *, confidence=0.95):
    """Wilson interval for a rate measured in clusters: tasks, each run `samples[i]` times with `successes[i]`
    successes. Samples of one task are correlated (an easy task is solved again and again), so the plain Wilson
    interval over all runs is too narrow when tasks differ. The design effect deff = 1 + (m - 1) ICC (m: the mean
    runs per task, ICC: the one-way ANOVA intraclass correlation of the 0/1 outcomes, floored at 0) shrinks the runs
    to an effective count n / deff, on which Wilson's interval is taken (Kish's effective sample size).

    The quantile is Student's t with (tasks - 1) degrees of freedom, as the design effect is itself estimated from
    the tasks. Simulated (tests/test_costs_pilot.py: Beta and two-point models of the tasks' rates, 20-100 tasks x 2-8
    runs): 0.935-0.958 coverage at a nominal 0.95, where the plain Wilson interval over runs covered 0.67-0.90. It
    under-covers (about 0.91) when nearly all successes come from two or three tasks (a Beta of concentration 1 at a
    3.6 % mean over 60 tasks): no interval over so few informative tasks is reliable; composer.costs.pilot says how many
    tasks were solved at least once.

    Returns:
        CI with estimate = sum(successes) / sum(samples), method "wilson, design effect D" and n the runs.
    """
    _check_unit_interval(confidence, "confidence")
    c = np.asarray(successes, dtype=float)
    m = np.asarray(samples, dtype=float)
    if c.ndim != 1 or c.shape != m.shape or not len(c):
        raise ValueError(f"successes and samples: two equal-length non-empty lists, got {c.shape} and {m.shape}")
    if (m < 1).any() or (c < 0).any() or (c > m).any() or (c % 1).any() or (m % 1).any():
        raise ValueError("each task needs whole counts with 0 <= successes <= samples and samples >= 1")
    n, k = m.sum(), len(m)
    p = c.sum() / n
    deff = 1.0
    if k > 1 and n > k:
        m0 = (n - (m**2).sum() / n) / (k - 1)  # the ANOVA's mean cluster size for unequal clusters
        between = ((c - m * p) ** 2 / m).sum() / (k - 1)
        within = (c - c**2 / m).sum() / (n - k)
        if between + (m0 - 1) * within > 0:
            icc = max(0.0, (between - within) / (between + (m0 - 1) * within))
            deff = 1 + (n / k - 1) * icc
    low, high = _wilson(p, n / deff, confidence, df=k - 1 if k > 1 else None)
    return _make_ci(p, 0.0 if c.sum() == 0 else low, 1.0 if c.sum() == n else high, confidence,
                    f"wilson, design effect {deff:.3g}", int(n))


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


def crossed_components(scores):
    """Variance components of a seeds x tasks matrix whose seeds and tasks are both random draws.

    `scores[i, j]` is the score (e.g. a pass@1 difference) of training seed i on task j, modelled as
    mean + seed_i + task_j + residual_ij with independent zero-mean terms: the two-way ANOVA without
    replication, estimated by the method of moments (expected mean squares), a negative estimate set to 0.
    With one seed (or one task) that factor's variance cannot be estimated: it is reported as None and the
    residual is folded into the other factor, so an interval built on it holds for this seed (these tasks) only.

    Returns:
        dict(seed=, task=, residual= variances, seeds=, tasks=, and with both factors estimated the two mean
        squares, ms_seed= and ms_task=, from which the design's own standard error is computed).
    """
    x = _as_finite_array(scores, "scores", ndim=2)
    seeds, tasks = x.shape
    if x.size < 2:
        raise ValueError(f"crossed_components needs at least 2 cells, got shape {x.shape}")
    if seeds == 1 or tasks == 1:
        one_way = float(np.var(x, ddof=1))
        return dict(seed=None if seeds == 1 else one_way, task=None if tasks == 1 else one_way, residual=0.0,
                    seeds=seeds, tasks=tasks)
    grand = x.mean()
    by_seed, by_task = x.mean(axis=1), x.mean(axis=0)
    ms_seed = tasks * np.sum((by_seed - grand) ** 2) / (seeds - 1)
    ms_task = seeds * np.sum((by_task - grand) ** 2) / (tasks - 1)
    residual = np.sum((x - by_seed[:, None] - by_task[None, :] + grand) ** 2) / ((seeds - 1) * (tasks - 1))
    return dict(seed=float(max(0.0, (ms_seed - residual) / tasks)), task=float(max(0.0, (ms_task - residual) / seeds)),
                residual=float(residual), seeds=seeds, tasks=tasks, ms_seed=float(ms_seed), ms_task=float(ms_task))


def crossed_standard_error(components, seeds=None, tasks=None):
    """Standard error of the grand mean of a seeds x tasks design and its Satterthwaite degrees of freedom.

    Var(mean) = seed / seeds + task / tasks + residual / (seeds * tasks). It is estimated by the two mean squares
    of the design's factors, (MS_seed + MS_task) / (seeds * tasks), whose expectation exceeds it by
    residual / (seeds * tasks): the unbiased MS_seed + MS_task - MS_res has a negative weight, which with few
    seeds made Satterthwaite's df too large and the interval too short (a low end above 0 in 3.5-5.7 % of
    simulated experiments with no effect, 2.5 % nominal), and pooling a small seed mean square into the residual
    did the same where seeds do differ. Two positive terms keep the df honest: with few seeds they stay close to
    seeds - 1 unless the task term dominates, and the t quantile, not the normal one, keeps the coverage.
    Checked by simulation in tests/test_ab_analysis.py under two generative models. `seeds`, `tasks`: another design to
    project onto (default: the components' own, whose observed mean squares are used as they are), e.g. for a
    power calculation: there each mean square is its expectation under the (non-negative) components.

    Returns:
        (standard error, degrees of freedom); (0.0, inf) when every component is 0.
    """
    own = seeds in (None, components["seeds"]) and tasks in (None, components["tasks"])
    seeds, tasks = seeds or components["seeds"], tasks or components["tasks"]
    seed, task, residual = (components[k] or 0.0 for k in ("seed", "task", "residual"))
    terms = ([(components["ms_seed"], seeds - 1), (components["ms_task"], tasks - 1)] if own and "ms_seed" in components
             else [(residual + tasks * seed, seeds - 1), (residual + seeds * task, tasks - 1)])  # (mean square, df)
    if components["seed"] is None or components["task"] is None:  # one seed or one task: the other factor alone
        terms = [(m, df) for (m, df), c in zip(terms, ("seed", "task")) if components[c] is not None]
    combined = sum(m for m, _ in terms)
    if combined <= 0:
        return 0.0, math.inf
    df = combined ** 2 / sum(m ** 2 / df for m, df in terms if m > 0)
    return float(math.sqrt(combined / (seeds * tasks))), float(df)


def crossed_detectable_effect(components, seeds=None, tasks=None, *, alpha=0.05, power=0.8):
    """The true mean a crossed t interval of level 1 - alpha (crossed_t_interval) excludes 0 with probability
    `power` in a seeds x tasks design (default: the components' own), from estimated components:
    t_detectable_effect at crossed_standard_error, the standard error divided by c4(df). An estimated standard
    error is short of the true one on average (E[sqrt(chi2_df / df)] = c4(df) < 1: 0.89 at 2 df), so the plain
    plug-in promised 80 % power where simulated experiments at that effect detected it 54-69 % of the time."""
    se, df = crossed_standard_error(components, seeds, tasks)
    return t_detectable_effect(se / _c4(df), df, alpha=alpha, power=power)


def _c4(df):
    """E[sqrt(chi2_df / df)]: how short an estimated standard error with df degrees of freedom is on average."""
    return 1.0 if math.isinf(df) else math.sqrt(2 / df) * math.exp(scipy.special.gammaln((df + 1) / 2)
                                                                   - scipy.special.gammaln(df / 2))


def crossed_detectable_effect_at(components_at, seeds=None, tasks=None, *, alpha=0.05, power=0.8, estimated=True):
    """The smallest true mean that a crossed t interval of level 1 - alpha excludes 0 at with probability `power`,
    the variance taken AT that mean: components_at(effect) gives the crossed components (crossed_components' keys)
    of a design whose true mean is `effect`. crossed_detectable_effect takes them as they are, which for a pass@1
    difference is the variance with no effect; at the effect it is larger (a rate moving toward 1/2 varies more),
    and the 80 % power it promised held in 68 % of simulated experiments at a pass@1 of ~0.12
    (tests/test_ab_analysis.py).

    The power at an effect d is P(t > t critical) for t noncentral with df and noncentrality d / se (the far tail
    ignored, as in t_detectable_effect), se and df crossed_standard_error's at components_at(d) in a seeds x tasks
    design (default: the components' own); with `estimated` (components estimated from data) the standard error is
    divided by c4(df) as in crossed_detectable_effect, otherwise (true components, a plan's) taken as it is. The
    answer is the effect where that power reaches `power` (Brent's method, to 1e-6). 0 when there is no variance."""
    _check_unit_interval(alpha, "alpha")
    _check_unit_interval(power, "power")

    def short(effect):  # power at `effect` minus the power wanted (scipy.special's t functions: planners call this
        se, df = crossed_standard_error(components_at(effect), seeds, tasks)  # thousands of times)
        if se == 0:
            return 1 - power
        se = se / _c4(df) if estimated else se
        if math.isinf(df):
            return scipy.special.ndtr(effect / se - scipy.special.ndtri(1 - alpha / 2)) - power
        return 1 - scipy.special.nctdtr(df, effect / se, scipy.special.stdtrit(df, 1 - alpha / 2)) - power

    se, _ = crossed_standard_error(components_at(0.0), seeds, tasks)
    if se == 0:
        return 0.0
    low, high = 0.0, se * (scipy.special.ndtri(1 - alpha / 2) + scipy.special.ndtri(power))  # the normal's answer
    while short(high) < 0:  # t's heavier tails and the variance growing with the effect: look further
        low, high = high, 2 * high
    return float(scipy.optimize.brentq(short, low, high, xtol=1e-6))


def crossed_t_interval(scores, *, confidence=0.95):
    """t interval for the grand mean of a seeds x tasks matrix, seeds and tasks both random (see
    `crossed_components` and `crossed_standard_error`): it covers the mean over new training seeds and a new
    task set at its nominal level with as few as 3 seeds, where a bootstrap over 3 seeds cannot (it sees at
    most 10 distinct seed draws and undercovers). Method "crossed t (Satterthwaite df=...)"; one seed or one
    task gives an interval conditional on it ("conditional on 1 seed")."""
    _check_unit_interval(confidence, "confidence")
    x = _as_finite_array(scores, "scores", ndim=2)
    components = crossed_components(x)
    se, df = crossed_standard_error(components)
    half = scipy.stats.t.ppf(1 - (1 - confidence) / 2, df) * se if se > 0 else 0.0
    condition = "; conditional on 1 seed" if x.shape[0] == 1 else "; conditional on 1 task" if x.shape[1] == 1 else ""
    return _make_ci(x.mean(), x.mean() - half, x.mean() + half, confidence,
                    f"crossed t (Satterthwaite df={df:.1f}{condition})", x.size)


def t_detectable_effect(se, df, *, alpha=0.05, power=0.8):
    """The smallest true mean a two-sided t interval of level 1 - alpha with this standard error and df
    excludes 0 with probability `power`: se * delta, delta the noncentrality at which the t statistic
    exceeds its critical value with that probability (scipy.stats.nct; the far tail is ignored); 0 when se is 0."""
    _check_unit_interval(alpha, "alpha")
    _check_unit_interval(power, "power")
    if not se >= 0 or not df > 0:
        raise ValueError(f"need se >= 0 and df > 0, got se={se!r}, df={df!r}")
    if se == 0:  # no variance: any effect is detected
        return 0.0
    critical = scipy.stats.t.ppf(1 - alpha / 2, df)
    if math.isinf(df):
        return float(se * (critical + scipy.stats.norm.ppf(power)))
    delta = scipy.optimize.brentq(lambda d: scipy.stats.nct.sf(critical, df, d) - power, 0.0, critical + 50)
    return float(se * delta)


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
