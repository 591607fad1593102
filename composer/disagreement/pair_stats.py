"""The statistics spike 003 judges pairs by: pairs per trace against the gate, real against random margins, the
held-out teacher's agreement, grounding in outcomes, and where in a trace pairs come from.

    from composer.disagreement import pair_stats, pairs
    counts = pair_stats.pairs_per_trace(ex.rows, trace_ids)
    pair_stats.count_summary(counts.values(), threshold=5)     # mean pairs per trace with its interval, and the gate
    pair_stats.margin_distance(real_margins, random_margins)   # how far the real pairs' margins sit from random ones
    pair_stats.leave_one_teacher_out(ex)                       # does a held-out teacher prefer chosen?
"""

from collections import Counter, defaultdict

import numpy as np

from composer import stats
from composer.actions import canonical_action
from composer.disagreement.pairs import RULES, Extraction, step_pairs


def pairs_per_trace(rows: list[dict], trace_ids) -> dict[str, int]:
    """{trace_id: number of pairs} for every trace in trace_ids (zeros included)."""
    counts = Counter(r["trace_id"] for r in rows)
    return {t: counts.get(t, 0) for t in trace_ids}


def count_summary(counts, *, threshold: float = 5, confidence: float = 0.95, seed: int = 0) -> dict:
    """Median, mean and a bootstrap CI of the mean pairs per trace; `meets_threshold`: the CI's lower bound
    >= threshold (None when undecidable: fewer than two traces)."""
    x = np.asarray(list(counts), dtype=float)
    if x.size == 0:
        return {"n": 0, "median": None, "mean": None, "ci_low": None, "ci_high": None, "method": None,
                "meets_threshold": None}
    if x.size < 2:
        return {"n": 1, "median": float(x[0]), "mean": float(x[0]), "ci_low": None, "ci_high": None,
                "method": None, "meets_threshold": None}
    ci = stats.bootstrap_ci(x, np.mean, confidence=confidence, seed=seed)
    return {"n": int(x.size), "median": float(np.median(x)), "mean": ci.estimate, "ci_low": ci.low,
            "ci_high": ci.high, "method": ci.method, "meets_threshold": bool(ci.low >= threshold)}


def position_bucket(step: int, n_steps: int, bins: int = 5) -> int:
    """The step's place in its trace: bucket 0 .. bins-1 of step / n_steps."""
    return min(bins - 1, int(step * bins // max(n_steps, 1)))


def breakdown(rows: list[dict], *, bins: int = 5) -> dict:
    """Pairs by rule, and by rule and step position bucket."""
    by_rule = Counter(r["rule"] for r in rows)
    by_position = defaultdict(Counter)
    for r in rows:
        by_position[position_bucket(r["step"], r["n_steps"], bins)][r["rule"]] += 1
    return {"by_rule": dict(by_rule),
            "by_position": {b: dict(by_position.get(b, {})) for b in range(bins)}}


def margin_histograms(real, random_, *, bins: int = 10, value_range=(-1.0, 1.0)) -> tuple[np.ndarray, np.ndarray,
                                                                                           np.ndarray]:
    """Counts of the two margin samples on shared bins (edges returned third)."""
    edges = np.linspace(value_range[0], value_range[1], bins + 1)
    clip = lambda v: np.clip(np.asarray(v, dtype=float), value_range[0], value_range[1])  # noqa: E731
    return np.histogram(clip(real), edges)[0], np.histogram(clip(random_), edges)[0], edges


def margin_distance(real, random_, *, bins: int = 10, value_range=(-1.0, 1.0), pseudo_count: float = 0.5,
                    confidence: float = 0.95, seed: int = 0) -> dict:
    """How far real pairs' margins sit from random pairs': KL(real || random) and JS (bits) between their
    histograms on shared bins (each bin + pseudo_count, so KL stays finite), and the Mann-Whitney AUROC
    P(real margin > random margin) with a bootstrap CI. Values are None where a sample is too small."""
    real, random_ = np.asarray(real, dtype=float), np.asarray(random_, dtype=float)
    out = {"n_real": int(real.size), "n_random": int(random_.size), "kl_real_random_bits": None, "js_bits": None,
           "auroc": None, "auroc_ci_low": None, "auroc_ci_high": None, "auroc_method": None}
    if real.size and random_.size:
        h_real, h_rand, _ = margin_histograms(real, random_, bins=bins, value_range=value_range)
        p, q = h_real + pseudo_count, h_rand + pseudo_count
        out["kl_real_random_bits"] = stats.kl_divergence(p, q, base=2)
        out["js_bits"] = stats.js_divergence(p, q, base=2)
        out["auroc"] = stats.auroc(real, random_)
    if real.size >= 2 and random_.size >= 2:
        ci = stats.auroc_ci(real, random_, confidence=confidence, seed=seed)
        out.update(auroc_ci_low=ci.low, auroc_ci_high=ci.high, auroc_method=ci.method)
    return out


def leave_one_teacher_out(ex: Extraction, *, confidence: float = 0.95) -> dict:
    """For each teacher h: pairs built from the other teachers only (same params, same student actions); does
    h prefer chosen over rejected (p_h(chosen) > p_h(rejected))? Ties and steps where h gave no distribution
    are left out and counted. Pooled over teachers: a one-sided exact binomial test of wins > 50% with a
    Wilson CI (pairs of different held-out teachers share states, so the pooled test treats them as
    independent; the per-teacher rows do not mix). Rule 3's pairs are left out: no teacher proposes a malformed
    call, so the held-out teacher would prefer their chosen by construction."""
    per_teacher = {}
    teachers = sorted({t for d in ex.distributions.values() for t in d})
    for held in teachers:
        wins = losses = ties = absent = 0
        for trace_id, steps in ex.traces.items():
            for record in steps:
                dists = ex.distributions.get((trace_id, record.step), {})
                others = {t: d for t, d in dists.items() if t != held}
                found, _ = step_pairs(canonical_action(record.action), others, ex.params)
                for p in found:
                    if held not in dists:
                        absent += 1
                        continue
                    a, b = dists[held].get(p["chosen_action"], 0.0), dists[held].get(p["rejected_action"], 0.0)
                    wins += a > b
                    losses += a < b
                    ties += a == b
        per_teacher[held] = {"wins": wins, "losses": losses, "ties": ties, "absent": absent,
                             **_binomial(wins, wins + losses, confidence)}
    wins = sum(v["wins"] for v in per_teacher.values())
    losses = sum(v["losses"] for v in per_teacher.values())
    return {"per_teacher": per_teacher,
            "pooled": {"wins": wins, "losses": losses, "ties": sum(v["ties"] for v in per_teacher.values()),
                       "absent": sum(v["absent"] for v in per_teacher.values()),
                       **_binomial(wins, wins + losses, confidence)}}


def _binomial(successes: int, n: int, confidence: float) -> dict:
    if n == 0:
        return {"n": 0, "estimate": None, "p_value": None, "ci_low": None, "ci_high": None}
    test = stats.binomial_test(successes, n, 0.5, alternative="greater", confidence=confidence)
    two_sided = stats.wilson_interval(successes, n, confidence=confidence)
    return {"n": n, "estimate": test["estimate"], "p_value": test["p_value"], "ci_low": two_sided.low,
            "ci_high": two_sided.high}


def grounding(rows: list[dict], *, confidence: float = 0.95) -> dict:
    """Against what happened: in traces with a known outcome, how often the action the agent actually took
    is the chosen one vs the rejected one, split by resolved / unresolved (Wilson CI of the share chosen among
    pairs holding the agent's action; pairs of one trace are not independent, so the intervals are optimistic)."""
    out = {}
    for label, value in (("resolved", True), ("unresolved", False), ("unknown", None)):
        group = [r for r in rows if r.get("outcome_resolved") is value]
        chosen = sum(r["chosen_action"] == r["student_action"] for r in group)
        rejected = sum(r["rejected_action"] == r["student_action"] for r in group)
        ci = stats.wilson_interval(chosen, chosen + rejected, confidence=confidence) if chosen + rejected else None
        out[label] = {"pairs": len(group), "traces": len({r["trace_id"] for r in group}),
                      "agent_chosen": chosen, "agent_rejected": rejected, "neither": len(group) - chosen - rejected,
                      "share_chosen": ci.estimate if ci else None, "ci_low": ci.low if ci else None,
                      "ci_high": ci.high if ci else None}
    return out


def disagreement_summary(steps: list[dict]) -> dict:
    """Mean teacher disagreement (GJS, vote entropy) at steps by what they yielded: rule-1 pairs (teachers
    agree, the student differs), rule-2 pairs, rule-3 pairs (teachers agree, the student's call is malformed), no
    pair; with how many steps each."""
    groups = {**{rule: [] for rule in RULES}, "no pair": []}
    for s in steps:
        if s["gjs"] is None:
            continue
        # a step yields pairs of one rule: the rules' conditions on the student's action exclude each other
        groups[next(r for r in RULES if r in s["rules"]) if s["n_pairs"] else "no pair"].append(s)
    out = {}
    for key, group in groups.items():
        gjs = [s["gjs"] for s in group]
        ent = [s["vote_entropy"] for s in group if s["vote_entropy"] is not None]
        out[key] = {"steps": len(group), "mean_gjs_bits": float(np.mean(gjs)) if gjs else None,
                    "mean_vote_entropy_bits": float(np.mean(ent)) if ent else None}
    return out


def describe(row: dict, *, width: int = 160) -> dict:
    """A pair as a readable table row: where, the last thing the agent saw, chosen, rejected, why."""
    def clip(text, n=width):
        text = " ".join(str(text).split())
        return text if len(text) <= n else text[: n - 1] + "…"

    last = next((m for m in reversed(row["prompt"]) if m.get("role") in ("user", "tool")), {"content": ""})
    votes = ", ".join(f"{v['teacher']}: {clip(v['action'], 40) if v['action'] else '—'}" for v in row["votes"])
    return {"trace": row["trace_id"], "step": f"{row['step']}/{row['n_steps']}", "rule": row["rule"],
            "last observation": clip(last.get("content") or "", width),
            "chosen": clip(row["chosen_action"]), "rejected": clip(row["rejected_action"]),
            "margin": round(row["margin"], 3), "votes": votes}
