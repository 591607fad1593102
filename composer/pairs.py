"""DPO pairs from teacher disagreement, their controls, and the statistics spike 003 judges them by.

    from composer import pairs, replay, traces
    by_trace = traces.group_traces(traces.import_jsonl("runs/002a-trace-collection-trl/traces.jsonl"))
    queries = replay.read_queries("runs/003/teacher_queries.jsonl")        # or pairs.query_policy_teachers(...)
    ex = pairs.extract(by_trace, queries, pairs.PairParams(majority=0.5, ties="abstain"))
    ex.rows                        # pair records (dicts): prompt, chosen, rejected, margin, votes, ids, rule
    ex.steps, ex.problems          # one row per step (votes, disagreement, status); bad input, counted
    randoms = pairs.random_pairs(ex, seed=0)          # control: same states, chosen/rejected drawn at random
    shuffled = pairs.shuffled_pairs(ex.rows, seed=0)  # control: real pairs, chosen/rejected swapped at random
    ds = pairs.to_dataset(ex.rows, tool_schemas())     # a datasets.Dataset with the trainer's columns (+ tools)
    ds = pairs.add_reference_logps(ds, student_path)  # + ref_chosen_logps / ref_rejected_logps (trainer's function)
    pairs.save(ds, "runs/003/pairs")                   # pairs/ (save_to_disk) and pairs.jsonl

The rules, at one step t of a trace, from N teachers' distributions over canonical actions
(composer.teachers.canonical_*; replay.step_distributions turns query records into them) and the student's own
action a_s (the trace's action, canonical):

  votes     each teacher votes for its top action; a top shared by several actions is an abstention
            (ties="abstain") or goes to the lexicographically first (ties="lexicographic"); teachers.OTHER
            (the unseen mass of logprobs answers) is never an action.
  majority  the action with the most votes, when it is unique and its share of the voting teachers is
            > `majority` (0.5: a strict majority). Steps with fewer than `min_teachers` voting teachers, or no
            majority, give no pair.
  rule 1    "majority_over_student": majority != a_s -> (chosen = majority, rejected = a_s).
  rule 2    "student_over_minority": majority == a_s -> (chosen = a_s, rejected = m) for each distinct top
            action m of a minority teacher.
  rule 3    "majority_over_malformed": the student emitted no well-formed call at t (no a_s) -> (chosen =
            majority, rejected = the student's text as generated). The teachers were asked at that state like at
            any other, and what the student did there is its text; no teacher proposes it, so these pairs' margin
            is the majority's mean probability and the held-out-teacher check leaves them out.
  margin    mean over the step's teachers of p(chosen) - p(rejected) ("distribution", from the full
            distributions), or the same difference of vote shares ("votes"); pairs with margin < min_margin
            are dropped.
  dedup     the same (prompt, chosen, rejected) twice (GRPO groups share their first states) is kept once.

chosen/rejected are completion texts, each action rendered as the Qwen3/Hermes tool call the student emits
(`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`), both from the same renderer so the pair differs
in the action only; prompt is the chat the student saw at t (state.messages). Those three columns plus the
reference log-probs are what composer.trainer reads (PAIR_COLUMNS); the rest is provenance.

Bad input is counted, never fatal: steps without a student action (a malformed call) when rule 3 is off, steps
nobody queried, a teacher without a record at a queried step, a teacher whose answers never parse, errors.
"""

import asyncio
import hashlib
import json
import math
import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from composer import stats
from composer.files import write_atomic
from composer.teachers import OTHER, TeacherQuery, canonical_action, canonical_tool_call

RULES = ("majority_over_student", "student_over_minority", "majority_over_malformed")
STEP_STATUSES = ("paired", "no student action", "not queried", "no parsed answer", "too few voting teachers",
                 "no majority",
                 "student is the majority, no minority", "below min_margin")


@dataclass(frozen=True)
class PairParams:
    """How pairs are mined (see the module docstring)."""

    majority: float = 0.5
    """A top action is the majority when its share of the voting teachers is strictly above this."""
    min_teachers: int = 2
    """Voting teachers (a parsed answer with a top action) needed at a step."""
    ties: Literal["abstain", "lexicographic"] = "abstain"
    margin: Literal["distribution", "votes"] = "distribution"
    min_margin: float | None = None
    rules: tuple = RULES

    def __post_init__(self):
        if not 0 <= self.majority < 1:
            raise ValueError(f"majority must be in [0, 1), got {self.majority!r}")
        if self.min_teachers < 1:
            raise ValueError(f"min_teachers must be >= 1, got {self.min_teachers!r}")
        if self.ties not in ("abstain", "lexicographic"):
            raise ValueError(f"ties must be 'abstain' or 'lexicographic', got {self.ties!r}")
        if self.margin not in ("distribution", "votes"):
            raise ValueError(f"margin must be 'distribution' or 'votes', got {self.margin!r}")
        unknown = set(self.rules) - set(RULES)
        if unknown or not self.rules:
            raise ValueError(f"rules must be a non-empty subset of {RULES}, got {self.rules!r}")


# ---------------------------------------------------------------------------------------------------------
# One step: votes, majority, pairs


def top_action(distribution: dict[str, float], ties: str = "abstain") -> str | None:
    """The most probable action (OTHER excluded); None for an empty distribution or, with ties="abstain",
    a maximum shared by several actions."""
    items = {a: p for a, p in distribution.items() if a != OTHER}
    if not items:
        return None
    best = max(items.values())
    if best <= 0:
        return None
    tops = sorted(a for a, p in items.items() if math.isclose(p, best, rel_tol=1e-9, abs_tol=1e-12))
    if len(tops) > 1 and ties == "abstain":
        return None
    return tops[0]


def step_votes(distributions: dict[str, dict[str, float]], ties: str = "abstain") -> dict[str, str | None]:
    """{teacher: its top action or None (abstained)}, teachers in sorted order."""
    return {t: top_action(distributions[t], ties) for t in sorted(distributions)}


def majority_action(votes: dict[str, str | None], majority: float = 0.5) -> str | None:
    """The unique most-voted action when its share of the non-abstaining votes is > majority, else None."""
    counts = Counter(v for v in votes.values() if v is not None)
    if not counts:
        return None
    (first, n1), *rest = counts.most_common()
    if rest and rest[0][1] == n1:
        return None
    return first if n1 / sum(counts.values()) > majority else None


def mean_probability(distributions: dict[str, dict[str, float]], action: str) -> float:
    """The mean over teachers of p(action) (0 for a teacher that did not propose it)."""
    if not distributions:
        return 0.0
    return sum(d.get(action, 0.0) for d in distributions.values()) / len(distributions)


def vote_share(votes: dict[str, str | None], action: str) -> float:
    """Share of all the step's teachers (abstentions included) voting for `action`."""
    return sum(v == action for v in votes.values()) / len(votes) if votes else 0.0


def margin_of(distributions, votes, chosen: str, rejected: str, kind: str = "distribution") -> float:
    if kind == "distribution":
        return mean_probability(distributions, chosen) - mean_probability(distributions, rejected)
    return vote_share(votes, chosen) - vote_share(votes, rejected)


def step_pairs(student: str | None, distributions: dict[str, dict[str, float]],
               params: PairParams = PairParams(), *, malformed: str | None = None) -> tuple[list[dict], str]:
    """The pairs one step yields, and the step's status (one of STEP_STATUSES). `student`: the student's
    canonical action, None when it emitted no well-formed call; `malformed`: its text then (rule 3).

    Each pair: {"rule", "chosen_action", "rejected_action", "margin", "chosen_votes", "rejected_votes",
    "n_voting", "votes": {teacher: top action or None}}."""
    if student is None and (malformed is None or "majority_over_malformed" not in params.rules):
        return [], "no student action"
    if not distributions:
        return [], "not queried"
    votes = step_votes(distributions, params.ties)
    voting = sum(v is not None for v in votes.values())
    if voting < params.min_teachers:
        return [], "too few voting teachers"
    top = majority_action(votes, params.majority)
    if top is None:
        return [], "no majority"
    candidates = []
    if student is None:
        candidates.append(("majority_over_malformed", top, malformed))
    elif top != student and "majority_over_student" in params.rules:
        candidates.append(("majority_over_student", top, student))
    if top == student and "student_over_minority" in params.rules:
        minority = sorted({v for v in votes.values() if v is not None and v != top})
        candidates += [("student_over_minority", student, m) for m in minority]
    if not candidates:
        return [], "student is the majority, no minority" if top == student else "no majority"
    out = []
    for rule, chosen, rejected in candidates:
        margin = margin_of(distributions, votes, chosen, rejected, params.margin)
        if params.min_margin is not None and margin < params.min_margin:
            continue
        out.append({"rule": rule, "chosen_action": chosen, "rejected_action": rejected, "margin": margin,
                    "chosen_votes": sum(v == chosen for v in votes.values()),
                    "rejected_votes": sum(v == rejected for v in votes.values()), "n_voting": voting,
                    "votes": votes})
    return out, "paired" if out else "below min_margin"


# ---------------------------------------------------------------------------------------------------------
# Disagreement among teachers at one step


def support(distributions: dict[str, dict[str, float]]) -> list[str]:
    return sorted({a for d in distributions.values() for a in d})


def teacher_disagreement(distributions: dict[str, dict[str, float]], *, base: float = 2) -> float | None:
    """Generalized Jensen-Shannon divergence (equal weights, in bits) across the teachers' distributions over
    their shared support; None with fewer than two teachers. 0: identical; log2(N): disjoint."""
    if len(distributions) < 2:
        return None
    actions = support(distributions)
    matrix = [[distributions[t].get(a, 0.0) for a in actions] for t in sorted(distributions)]
    return stats.generalized_js_divergence(matrix, base=base)


def vote_entropy(votes: dict[str, str | None], *, base: float = 2) -> float | None:
    """Entropy (bits) of the teachers' top-action votes, abstentions left out; None when nobody voted.
    0: unanimous; log2(N): every teacher votes differently."""
    counts = Counter(v for v in votes.values() if v is not None)
    if not counts:
        return None
    return stats.entropy(list(counts.values()), base=base)


# ---------------------------------------------------------------------------------------------------------
# Rendering actions as completions


def parse_canonical(action: str) -> tuple[str, dict]:
    """(tool name, arguments) back from a canonical action: `name({json})` for non-bash tools, else a bash
    command (the canonical form of a bash call is its command)."""
    name, sep, rest = action.partition("(")
    if sep and rest.endswith(")") and name.isidentifier():
        try:
            arguments = json.loads(rest[:-1])
        except ValueError:
            arguments = None
        if isinstance(arguments, dict) and canonical_tool_call(name, arguments) == action:
            return name, arguments
    return "bash", {"command": action}


def render_action(action: str, representative: tuple[str, dict] | None = None) -> str:
    """The completion text of an action: one Qwen3/Hermes tool call block (what traces.Action.text holds for
    sources that keep tool calls as data, and what the embedded student emits). `representative` is a concrete
    (name, arguments) seen for this canonical action (keeps the argument order and the original quoting)."""
    name, arguments = representative or parse_canonical(action)
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{call}\n</tool_call>"


# ---------------------------------------------------------------------------------------------------------
# A whole run: traces + query records -> pairs, steps, problems


@dataclass
class Extraction:
    rows: list[dict]
    """Pair records, deduplicated, in trace/step order."""
    steps: list[dict]
    """One row per step of every trace: trace_id, step, n_steps, student_action, teachers, n_voting, votes,
    majority, gjs, vote_entropy, n_pairs, status, outcome."""
    problems: dict
    """Counts of step statuses (STEP_STATUSES, spaces as underscores) and of bad input: missing_teacher_records,
    teacher_errors, unparsed_answers, records_for_unknown_steps, duplicates_removed; teachers_never_parsed: [names]."""
    teacher_health: dict
    """Per teacher: calls, errors, answered, parsed, steps_with_distribution."""
    distributions: dict = field(default_factory=dict)
    """{(trace_id, step): {teacher: distribution}}."""
    params: PairParams = PairParams()
    traces: dict = field(default_factory=dict)
    """{trace_id: [StepRecord]} as given (prompts for the controls)."""
    representatives: dict = field(default_factory=dict)


def trace_outcome(steps) -> bool | None:
    """Whether a trace succeeded: its last step's outcome["resolved"] when known, else its final reward > 0,
    else None (unknown)."""
    last = steps[-1]
    resolved = (last.outcome or {}).get("resolved")
    if isinstance(resolved, bool):
        return resolved
    if last.reward is not None:
        return last.reward > 0
    return None


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The state's chat in a form datasets stores and chat templates read: roles, string content, tool calls
    with their arguments as JSON strings, tool_call_id / name where present."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        msg = {"role": m["role"], "content": content or ""}
        if m.get("tool_calls"):
            msg["tool_calls"] = [{"id": c.get("id") or "", "type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"] if isinstance(c["function"]["arguments"], str)
                else json.dumps(c["function"]["arguments"], ensure_ascii=False)}} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def pair_id(prompt: list[dict], chosen: str, rejected: str) -> str:
    blob = json.dumps([prompt, chosen, rejected], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def student_action(record) -> tuple[str | None, str | None]:
    """(the student's canonical action, None) at a step, or (None, its text as generated) when it emitted no
    well-formed call."""
    action = canonical_action(record.action)
    return action, record.action.text if action is None else None


def _representatives(by_trace, queries) -> dict[str, tuple[str, dict]]:
    """A concrete (name, arguments) per canonical action: the student's own calls first, then teachers' parsed
    tool calls (raw texts holding a <tool_call> block)."""
    from composer.policies import parse_tool_call  # the student's own parser (imports torch: only when needed)

    reps = {}
    for steps in by_trace.values():
        for r in steps:
            if r.action.tool_call is not None:
                reps.setdefault(canonical_action(r.action), (r.action.tool_call.name, r.action.tool_call.arguments))
    for q in queries:
        if q.distribution and q.raw_text and len(q.distribution) == 1:
            call = parse_tool_call(q.raw_text)
            if call is not None:
                (action,) = q.distribution
                if canonical_tool_call(*call) == action:
                    reps.setdefault(action, call)
    return reps


def teacher_health(queries: list[TeacherQuery]) -> dict[str, dict]:
    """Per teacher: calls, errors (no answer), answered, parsed (a distribution), and the share parsed."""
    health = defaultdict(lambda: {"calls": 0, "errors": 0, "answered": 0, "parsed": 0})
    for q in queries:
        h = health[q.teacher]
        h["calls"] += 1
        if q.error_kind is not None:
            h["errors"] += 1
        else:
            h["answered"] += 1
            h["parsed"] += q.distribution is not None
    return {t: {**h, "parsed_share": h["parsed"] / h["answered"] if h["answered"] else 0.0}
            for t, h in sorted(health.items())}


def distributions_by_step(queries: list[TeacherQuery]) -> dict[tuple[str, int], dict[str, dict[str, float]]]:
    """{(trace_id, step): {teacher: distribution}} from query records (replay.step_distributions' rules)."""
    from composer.replay import step_distributions

    out = defaultdict(dict)
    for (trace_id, step, teacher), dist in step_distributions(queries).items():
        if dist:
            out[(trace_id, step)][teacher] = dist
    return dict(out)


def extract(by_trace: dict, queries: list[TeacherQuery], params: PairParams = PairParams(), *,
            teachers: list[str] | None = None) -> Extraction:
    """Pairs of every step of every trace (see the module docstring), with per-step rows and bad-input counts.
    `teachers`: the teachers expected at every queried step (default: every teacher named in the records)."""
    queries = list(queries)
    expected = sorted(teachers) if teachers is not None else sorted({q.teacher for q in queries})
    dists = distributions_by_step(queries)
    queried = defaultdict(set)  # (trace, step) -> teachers with any record
    for q in queries:
        queried[(q.trace_id, q.step)].add(q.teacher)
    health = teacher_health(queries)
    reps = _representatives(by_trace, queries)
    problems = Counter()
    rows, steps_out, seen = [], [], set()
    for trace_id, steps in by_trace.items():
        outcome = trace_outcome(steps)
        for record in steps:
            key = (trace_id, record.step)
            student, malformed = student_action(record)
            step_dists = dists.get(key, {})
            was_queried = key in queried
            if was_queried:
                problems["missing_teacher_records"] += len(set(expected) - queried[key])
                problems["steps_without_a_parsed_answer_from_some_teacher"] += bool(set(expected) - set(step_dists))
            found, status = step_pairs(student, step_dists, params, malformed=malformed)
            if status == "not queried" and was_queried:
                status = "no parsed answer"
            problems[status.replace(" ", "_").replace(",", "")] += 1
            votes = step_votes(step_dists, params.ties)
            kept = 0
            prompt = None
            for p in found:
                prompt = prompt if prompt is not None else prompt_messages(record.state.messages)
                chosen = render_action(p["chosen_action"], reps.get(p["chosen_action"]))
                rejected = malformed if p["rule"] == "majority_over_malformed" else render_action(
                    p["rejected_action"], reps.get(p["rejected_action"]))
                pid = pair_id(prompt, p["chosen_action"], p["rejected_action"])
                if pid in seen:
                    problems["duplicates_removed"] += 1
                    continue
                seen.add(pid)
                kept += 1
                rows.append(_row(record, len(steps), outcome, student or malformed, prompt, chosen, rejected, p,
                                 step_dists, pid, control="real"))
            steps_out.append({
                "trace_id": trace_id, "step": record.step, "n_steps": len(steps), "student_action": student,
                "queried": was_queried, "teachers": sorted(step_dists), "n_voting": sum(v is not None for v in votes.values()),
                "votes": votes, "majority": majority_action(votes, params.majority) if votes else None,
                "gjs": teacher_disagreement(step_dists), "vote_entropy": vote_entropy(votes),
                "student_agrees": None if student is None or not votes else
                majority_action(votes, params.majority) == student,
                "n_pairs": kept, "rules": sorted({p["rule"] for p in found}), "status": status,
                "outcome": outcome})
    known = {(tid, r.step) for tid, steps in by_trace.items() for r in steps}
    for q in queries:
        if (q.trace_id, q.step) not in known:
            problems["records_for_unknown_steps"] += 1
        if q.error_kind is None and q.distribution is None:
            problems["unparsed_answers"] += 1
        if q.error_kind is not None:
            problems["teacher_errors"] += 1
    out = dict(problems)
    out["teachers_never_parsed"] = [t for t, h in health.items() if h["parsed"] == 0]
    for t in expected:
        if t not in health:
            out["teachers_never_parsed"].append(t)
    return Extraction(rows, steps_out, out, health, dists, params, dict(by_trace), reps)


def _row(record, n_steps, outcome, student, prompt, chosen, rejected, p, dists, pid, *, control) -> dict:
    return {
        "pair_id": pid, "trace_id": record.trace_id, "step": record.step, "n_steps": n_steps,
        "task_id": record.task_id, "rule": p["rule"], "control": control,
        "prompt": prompt, "chosen": chosen, "rejected": rejected,
        "chosen_action": p["chosen_action"], "rejected_action": p["rejected_action"], "student_action": student,
        "margin": float(p["margin"]), "chosen_votes": int(p["chosen_votes"]), "rejected_votes": int(p["rejected_votes"]),
        "n_voting": int(p["n_voting"]),
        "votes": [{"teacher": t, "action": a, "p_chosen": float(dists.get(t, {}).get(p["chosen_action"], 0.0)),
                   "p_rejected": float(dists.get(t, {}).get(p["rejected_action"], 0.0))}
                  for t, a in p["votes"].items()],
        "outcome_resolved": outcome,
    }


# ---------------------------------------------------------------------------------------------------------
# Controls for 004's control arm


def candidate_actions(student: str | None, distributions: dict[str, dict[str, float]]) -> list[str]:
    """Every action on the table at a step: the student's and any a teacher gave probability (OTHER excluded)."""
    actions = {a for d in distributions.values() for a, p in d.items() if a != OTHER and p > 0}
    if student is not None:
        actions.add(student)
    return sorted(actions)


def random_pairs(ex: Extraction, *, seed: int = 0) -> list[dict]:
    """One random pair per real pair, at the same state: chosen and rejected two distinct actions drawn
    uniformly from the step's candidate actions, in random order; margin computed as for real pairs. At a
    malformed student call (rule 3) the student's text is one of the candidates, as itself."""
    rng = random.Random(seed)
    out = []
    for row in ex.rows:
        malformed = row["student_action"] if row["rule"] == "majority_over_malformed" else None

        def completion(action):
            return malformed if action == malformed else render_action(action, ex.representatives.get(action))

        dists = ex.distributions.get((row["trace_id"], row["step"]), {})
        actions = candidate_actions(row["student_action"], dists)
        chosen, rejected = rng.sample(actions, 2)  # a real pair's state has at least its own two actions
        votes = step_votes(dists, ex.params.ties)
        margin = margin_of(dists, votes, chosen, rejected, ex.params.margin)
        p = {"rule": "random", "chosen_action": chosen, "rejected_action": rejected, "margin": margin,
             "chosen_votes": sum(v == chosen for v in votes.values()),
             "rejected_votes": sum(v == rejected for v in votes.values()),
             "n_voting": sum(v is not None for v in votes.values()), "votes": votes}
        record = ex.traces[row["trace_id"]][row["step"]]
        out.append(_row(record, row["n_steps"], row["outcome_resolved"], row["student_action"], row["prompt"],
                        completion(chosen), completion(rejected), p, dists,
                        pair_id(row["prompt"], chosen, rejected), control="random"))
    return out


SWAPPED = {"chosen": "rejected", "chosen_action": "rejected_action", "chosen_votes": "rejected_votes",
           "ref_chosen_logps": "ref_rejected_logps"}


def shuffled_pairs(rows: list[dict], *, seed: int = 0) -> list[dict]:
    """The real pairs with chosen and rejected swapped with probability 1/2 each (margin and per-teacher
    probabilities follow the swap); `swapped` says which."""
    rng = random.Random(seed)
    out = []
    for row in rows:
        new = {**row, "control": "shuffled", "swapped": False}
        if rng.random() < 0.5:
            for a, b in SWAPPED.items():
                if a in row:
                    new[a], new[b] = row[b], row[a]
            new["margin"] = -row["margin"]
            new["votes"] = [{**v, "p_chosen": v["p_rejected"], "p_rejected": v["p_chosen"]}
                            for v in row.get("votes", [])]
            new["swapped"] = True
        out.append(new)
    return out


# ---------------------------------------------------------------------------------------------------------
# Datasets on disk


def to_dataset(rows: list[dict], tools: list[dict] | None = None):
    """A datasets.Dataset of pair records (prompt as chat messages, chosen/rejected as text, provenance).

    tools: the tool schemas the student's prompts carry (the traces' tools), stored as a JSON `tools` column
    that composer.trainer.encode_pairs hands to the chat template: the DPO prompt and its reference
    log-probs then see the same tool block as the student's rollouts."""
    import datasets

    if not rows:
        return datasets.Dataset.from_dict({k: [] for k in ("pair_id", "prompt", "chosen", "rejected", "margin")})
    if tools:
        rows = [{**r, "tools": json.dumps(tools)} for r in rows]
    return datasets.Dataset.from_list(rows)


def save(dataset_or_rows, path) -> dict:
    """Save as a Hugging Face dataset (path/, save_to_disk) and as JSONL (path.jsonl); returns both paths."""
    dataset = to_dataset(dataset_or_rows) if isinstance(dataset_or_rows, list) else dataset_or_rows
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset.save_to_disk(str(path))
    jsonl = path.with_suffix(".jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for row in dataset:
            f.write(json.dumps(_strip_none_keys(row), ensure_ascii=False) + "\n")
    return {"dataset": str(path), "jsonl": str(jsonl), "rows": len(dataset)}


def _strip_none_keys(row: dict) -> dict:
    """Arrow gives every message every key (None where absent); the JSONL keeps messages as they were."""
    if "prompt" in row and isinstance(row["prompt"], list):
        row = {**row, "prompt": [{k: v for k, v in m.items() if v is not None} for m in row["prompt"]]}
    return row


def load(path):
    """The dataset saved by `save` (its save_to_disk folder)."""
    import datasets

    return datasets.load_from_disk(str(path))


def add_reference_logps(dataset, student, *, batch_size: int = 8, max_length: int | None = None):
    """ref_chosen_logps / ref_rejected_logps under the initial student (a checkpoint path, or (model,
    tokenizer)), computed by composer.trainer.add_reference_logps, the function the 004 trainer relies on.
    Prompt messages come back from Arrow with None for absent keys; the chat template reads those as absent.
    Returns (dataset, skipped): rows whose prompt is longer than `max_length` tokens (default: the model's
    context) are dropped and counted rather than truncated."""
    from composer.models import load_model, load_tokenizer
    from composer.trainer import add_reference_logps as trainer_logps
    from composer.trainer import encode_pairs

    if isinstance(student, (str, Path)):
        model, tokenizer = load_model(student), load_tokenizer(student)
    else:
        model, tokenizer = student
    if len(dataset) == 0:
        return dataset.add_column("ref_chosen_logps", []).add_column("ref_rejected_logps", []), 0
    limit = max_length or getattr(model.config, "max_position_embeddings", None)
    if limit:
        encoded = encode_pairs(tokenizer, dataset)
        keep = [i for i, e in enumerate(encoded)
                if len(e["prompt"]) + max(len(e["chosen"]), len(e["rejected"])) <= limit]
        skipped = len(dataset) - len(keep)
        if skipped:
            dataset = dataset.select(keep)
    else:
        skipped = 0
    if len(dataset) == 0:
        return dataset.add_column("ref_chosen_logps", []).add_column("ref_rejected_logps", []), skipped
    return trainer_logps(dataset, model, tokenizer, batch_size=batch_size), skipped


# ---------------------------------------------------------------------------------------------------------
# Statistics


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


# ---------------------------------------------------------------------------------------------------------
# Teachers that are policies: local checkpoints sampled in the student's own format


def clip_messages(messages: list[dict], *, window: int | None = None, max_chars: int | None = None) -> list[dict]:
    """A shorter view of a chat for small-context teachers: what precedes the first assistant turn plus the last
    `window` assistant turns (with their answers), each content cut to max_chars (head and tail kept)."""
    out = list(messages)
    if window is not None:
        starts = [i for i, m in enumerate(out) if m["role"] == "assistant"]
        if len(starts) > window:
            first = starts[0]
            cut = starts[len(starts) - window] if window else len(out)
            out = out[:first] + out[cut:]
    if max_chars is not None:
        clipped = []
        for m in out:
            content = m.get("content")
            if isinstance(content, str) and len(content) > max_chars:
                half = max_chars // 2
                m = {**m, "content": content[:half] + "\n[…]\n" + content[-half:]}
            clipped.append(m)
        out = clipped
    return out


def lenient_tool_call(text: str) -> tuple[str, dict] | None:
    """(name, arguments) of the first tool call in a completion that a strict parser rejects for its wrapping
    only: the JSON object after the last `<tool_call>` tag preceding it (repeated opening tags are dropped),
    with or without the closing tag. The object itself must be whole: {"name": str, "arguments": object}."""
    start = text.find("<tool_call>")
    if start < 0:
        return None
    rest = text[start:]
    while rest.startswith("<tool_call>"):
        rest = rest[len("<tool_call>"):].lstrip()
    try:
        call, _ = json.JSONDecoder().raw_decode(rest)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (call["name"], arguments) if isinstance(arguments, dict) else None


def bash_tool_schema() -> list[dict]:
    """mini-swe-agent's one tool, for replaying its traces to policy teachers."""
    return [{"type": "function", "function": {
        "name": "bash", "description": "Run a bash command in the repository.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


async def query_policy_teachers(by_trace: dict, endpoints: dict[str, dict], out_path, *, k: int = 4,
                                steps: dict[str, list[int]] | None = None, tools: list[dict] | None = None,
                                temperature: float = 1.0, max_tokens: int = 128, window: int | None = None,
                                max_chars: int | None = None, seed: int = 0, concurrency: int = 4,
                                timeout_s: float = 120.0, lenient: bool = True, resume: bool = True
                                ) -> list[TeacherQuery]:
    """Ask each teacher endpoint ({name: {"base_url", "model"}}, OpenAI-compatible, e.g. composer.serve
    serving zoo checkpoints) for k sampled next actions at every step, with the state's chat and `tools`
    exactly as the student is prompted, and parse each sample's tool call into a canonical action: elicitation
    mode "samples", one TeacherQuery per sample (a sample without a well-formed tool call is a parse failure),
    written to out_path as JSONL, the format replay.read_queries and replay.step_distributions read. `steps`:
    {trace_id: step indices} to query (None, or a trace missing from it: every step). lenient: when the server
    found no well-formed call, `lenient_tool_call` reads the teacher's intended one (small models repeat the
    opening tag or run out of tokens after the JSON).

    Requests: one per step and teacher with n=k (our server honours n). An endpoint that ignores n (OpenRouter
    does) answers it with fewer choices: each missing sample i is then a request of its own, n=1 with seed
    seed+step+i so that it is another sample; a line says so once per endpoint, and `ignored_n(records)` names
    those endpoints afterwards (their samples at a step carry more than one request_key).

    A request asked twice in one run (two rollouts sharing a state) is sent once.

    Resume: the cache is composer.teachers' Store in out_path's folder (replay.sqlite, the name 001's replay
    gives its own; the two never share a key), keyed by request (policy_request_key: teacher, the endpoint's
    optional "revision" (e.g. a checkpoint path), and the whole body). Each answer is stored the moment it is
    read, before it is parsed, so a kill re-pays only the requests in flight; a rerun answers stored requests
    from the store (records cached=True, nothing sent) and sends the rest. resume=False sends every request
    again (and stores the new answers).
    out_path is written afresh each run, every sample once: each step's records are appended as soon as its
    teachers have answered (a killed run shows what it had), and the file is rewritten in trace/step order at
    the end; a progress bar counts steps. Errors are records (error_kind) and are not stored: a rerun asks again."""
    import httpx
    import openai
    from tqdm.auto import tqdm

    from composer.replay import STORE_FILE
    from composer.lock import run_lock
    from composer.teachers import PLACEHOLDER_KEY, Store, classify, redact

    if concurrency < 1:  # a semaphore of 0 would wait forever
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    context = "full" if window is None and max_chars is None else f"window:{window}" + (
        f",chars:{max_chars}" if max_chars else "")
    with run_lock(out_path.parent):  # a second run on this store would ask for the same samples again
        clients = {name: openai.AsyncOpenAI(base_url=e["base_url"], api_key=e.get("api_key", PLACEHOLDER_KEY),
                                            timeout=timeout_s, max_retries=1) for name, e in endpoints.items()}
        slots = asyncio.Semaphore(concurrency)
        store = Store(out_path.parent / STORE_FILE, cap_usd=math.inf)  # the cache only: no budget guard here
        records: list[TeacherQuery] = []
        ignoring: set[str] = set()
        out_path.write_text("", encoding="utf-8")
        todo = {tid: range(len(s)) if (steps or {}).get(tid) is None else [t for t in steps[tid] if t < len(s)]
                for tid, s in by_trace.items()}
        bar = tqdm(total=sum(map(len, todo.values())), desc="teacher queries", unit="step")

        sending: dict[str, asyncio.Task] = {}

        async def post(name: str, body: dict, sample: int):
            """One request, or its stored answer: (key, response or None, latency, cached, (error kind, message)).
            A request already sent in this run (rollouts of one task share their first states, so their steps ask
            the same thing) is not sent again: its answer is shared, and counted as cached (paid once)."""
            key = policy_request_key(name, endpoints[name].get("revision"), body)
            if key in sending:
                key, response, latency, _, failure = await sending[key]
                return key, response, latency, response is not None, failure
            sending[key] = asyncio.ensure_future(send(name, key, body, sample))
            return await sending[key]

        async def send(name: str, key: str, body: dict, sample: int):
            stored = store.answer(key) if resume else None
            if stored is not None:
                return key, stored["response"], stored["latency_s"], True, None
            async with slots:
                start = time.perf_counter()
                try:
                    raw = await clients[name].post("/chat/completions", body=body, cast_to=httpx.Response)
                    response, failure = raw.json(), None
                except Exception as e:  # classified like teachers.Teacher does; anything unknown re-raises there
                    response, failure = None, e
                latency = time.perf_counter() - start
            if failure is not None:
                kind, message = classify(failure)
                return key, None, latency, False, (kind, redact(message, clients[name].api_key))
            if not isinstance(response, dict) or "error" in response or not response.get("choices"):
                # OpenRouter can answer 200 with an error object when the provider fails after routing.
                return key, None, latency, False, ("provider_error", json.dumps(response)[:500])
            store.save(key, name, body["model"], sample, {"response": response, "latency_s": latency})
            return key, response, latency, False, None

        def sample_records(base: dict, first: int, count: int, answer) -> list[TeacherQuery]:
            """Records of samples first.. of one request's answer (at most `count`; usage on the first of them)."""
            key, response, latency, cached, failure = answer
            if failure is not None:
                kind, message = failure
                return [TeacherQuery(**base, sample=i, model_used=None, provider=None, distribution=None, raw_text=None,
                                     parse_error=None, latency_s=latency, attempts=1, error_kind=kind, error=message,
                                     request_key=key) for i in range(first, first + count)]
            usage = response.get("usage") or {}
            out = []
            for i, choice in enumerate(response["choices"][:count]):
                message = choice.get("message") or {}
                calls = message.get("tool_calls") or []
                text = (message.get("content") or "") + "".join(
                    f"<tool_call>\n{{\"name\": {json.dumps(c['function']['name'])}, \"arguments\": "
                    f"{c['function']['arguments']}}}\n</tool_call>" for c in calls)
                distribution, error = None, None
                if calls:
                    try:
                        arguments = json.loads(calls[0]["function"]["arguments"])
                        if not isinstance(arguments, dict):
                            raise ValueError("arguments are not a JSON object")
                        distribution = {canonical_tool_call(calls[0]["function"]["name"], arguments): 1.0}
                    except ValueError as e:
                        error = f"tool call arguments: {e}"
                elif lenient and (call := lenient_tool_call(text)) is not None:
                    distribution = {canonical_tool_call(*call): 1.0}
                else:
                    error = "no well-formed tool call in the completion"
                out.append(TeacherQuery(**base, sample=first + i, model_used=response.get("model"),
                                        provider="composer-local", distribution=distribution, raw_text=text,
                                        parse_error=error, prompt_tokens=usage.get("prompt_tokens") if i == 0 else None,
                                        completion_tokens=usage.get("completion_tokens") if i == 0 else None,
                                        latency_s=latency, attempts=1, cached=cached, request_key=key))
            return out

        async def ask(name: str, record) -> list[TeacherQuery]:
            messages = clip_messages(prompt_messages(record.state.messages), window=window, max_chars=max_chars)
            body = {"model": endpoints[name]["model"], "messages": messages, "n": k, "temperature": temperature,
                    "max_tokens": max_tokens, "seed": seed + record.step}
            if tools:
                body["tools"] = tools
            base = dict(trace_id=record.trace_id, step=record.step, teacher=name, model=endpoints[name]["model"],
                        mode="samples", context=context, cache=False, student_action=canonical_action(record.action))
            out = sample_records(base, 0, k, await post(name, body, 0))
            got = len(out)
            if out[0].error_kind is None and got < k:
                if name not in ignoring:
                    ignoring.add(name)
                    print(f"endpoint {name!r} ignored n (asked for {k} samples, got {got}): each missing sample is a "
                          "request of its own")
                missing = range(got, k)
                answers = await asyncio.gather(*(post(name, {**body, "n": 1, "seed": body["seed"] + i}, i)
                                                 for i in missing))
                out += [q for i, answer in zip(missing, answers) for q in sample_records(base, i, 1, answer)]
            return out

        async def run_trace(trace_id: str, steps_of_trace):
            for t in todo[trace_id]:
                batch = [q for group in await asyncio.gather(*(ask(name, steps_of_trace[t]) for name in endpoints))
                         for q in group]
                records.extend(batch)
                with open(out_path, "a", encoding="utf-8") as f:
                    f.writelines(q.model_dump_json() + "\n" for q in batch)
                bar.update()

        try:
            await asyncio.gather(*(run_trace(tid, s) for tid, s in by_trace.items()))
        finally:
            bar.close()
            store.close()
            for c in clients.values():
                await c.close()
        records.sort(key=lambda q: (list(by_trace).index(q.trace_id), q.step, q.teacher, q.sample))
        write_atomic(out_path, "".join(q.model_dump_json() + "\n" for q in records))
        return records


def policy_request_key(teacher: str, revision: str | None, body: dict) -> str:
    """query_policy_teachers' cache key: the teacher, its endpoint's revision and the whole request body."""
    return hashlib.sha256(json.dumps({"teacher": teacher, "revision": revision, "body": body},
                                     sort_keys=True).encode()).hexdigest()


def ignored_n(records: list[TeacherQuery]) -> list[str]:
    """The teachers whose endpoint ignored n in query_policy_teachers: k samples at a step took several requests."""
    keys = defaultdict(set)
    for q in records:
        keys[q.teacher, q.trace_id, q.step].add(q.request_key)
    return sorted({teacher for (teacher, _, _), seen in keys.items() if len(seen) > 1})


# ---------------------------------------------------------------------------------------------------------
# Embedded traces when 002a's file is not there yet


def embedded_traces(n_traces: int = 2, *, seed: int = 0, explore: float = 0.5, wrong_edit: float = 0.5,
                    skip_rerun: float = 0.5, n_functions: int = 1, cache: bool = True) -> list:
    """A tiny embedded trace set made on the fly: the scripted expert with human-like detours (the noisy
    demonstrations the zoo student is trained on, so a stand-in for the student's own behaviour) on
    generated train-split tasks, as StepRecords (source "composer-embedded", outcome and final reward from
    the environment). Not 002a's traces: the report says which it used. With cache, kept as JSONL under
    models.cache_root()/pairs/, keyed by the arguments and the task generator's version."""
    from composer import policies
    from composer.env import tasks
    from composer.env.environment import CodingEnv
    from composer.files import config_hash
    from composer.models import cache_root
    from composer.traces import SCHEMA_VERSION, Action, State, StepRecord, ToolCall, TraceWriter, import_jsonl

    key = config_hash(n=n_traces, seed=seed, noise=(explore, wrong_edit, skip_rerun), n_functions=n_functions,
                generator=tasks.GENERATOR_VERSION, env=policies.ENV_CONFIG)
    cached = cache_root() / "pairs" / f"embedded-traces-{key}.jsonl"
    if cache and cached.is_file():
        return import_jsonl(cached)

    records = tasks.generate(n_traces, seed=seed, split="train", difficulty=tasks.Difficulty(n_functions=n_functions))
    env = CodingEnv(records, policies.ENV_CONFIG)
    out = []
    try:
        for i, instance in enumerate(records):
            noise = policies.Noise(explore=explore, wrong_edit=wrong_edit, skip_rerun=skip_rerun)
            messages, reward, info = policies.demonstrate(env, instance, noise=noise, seed=seed * 1000 + i)
            turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
            trace_id = f"{instance['instance_id']}#expert{seed}-{i}"
            for t, j in enumerate(turns):
                call = messages[j]["tool_calls"][0]
                name, arguments = call["function"]["name"], json.loads(call["function"]["arguments"])
                last = t == len(turns) - 1
                answer = messages[j + 1] if j + 1 < len(messages) else None
                out.append(StepRecord(
                    schema_version=SCHEMA_VERSION, trace_id=trace_id, step=t,
                    state=State(messages=messages[:j]),
                    action=Action(text=render_action(canonical_tool_call(name, arguments), (name, arguments)),
                                  tool_call=ToolCall(name=name, arguments=arguments, id=call["id"])),
                    observation=answer["content"] if answer else None, reward=reward if last else None,
                    done=last, truncated=False, source="composer-embedded", task_id=instance["instance_id"],
                    outcome={"resolved": reward == 1.0, "reward": reward} if last else None,
                    meta={"policy": "scripted expert with noise", "noise": [explore, wrong_edit, skip_rerun]}))
    finally:
        env.close()
    if cache:
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        with TraceWriter(tmp, resume=False) as w:
            for r in out:
                w.write(r)
        os.replace(tmp, cached)  # atomic: a concurrent reader sees the whole file or none
    return out


def expert_pairs(instances: list[dict], student, *, count: int, max_new_tokens: int = 160) -> list[dict]:
    """004's positive control: pairs known to be informative, as many as B's (`count`). Along the scripted
    expert's shortest demonstration of each task, in order, at every state where the student's greedy next
    action differs from the expert's: chosen = the expert's action, rejected = the student's (its text as
    generated when it is no well-formed call). Rule "expert", margin 1.0; fewer than `count` when the tasks
    run out (the caller says so)."""
    from composer import policies
    from composer.env.environment import CodingEnv
    from composer.models import load_model, load_tokenizer

    model, tokenizer = load_model(student), load_tokenizer(student)
    model.eval()
    env = CodingEnv(instances, policies.ENV_CONFIG)
    out = []
    try:
        for instance in instances:
            messages, _, _ = policies.demonstrate(env, instance)
            for at in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
                prompt = prompt_messages(messages[:at])
                call = messages[at]["tool_calls"][0]["function"]
                expert = (call["name"], json.loads(call["arguments"]) if isinstance(call["arguments"], str)
                          else call["arguments"])
                text = policies.next_turn(model, tokenizer, messages[:at], max_new_tokens=max_new_tokens)
                parsed = policies.parse_tool_call(text)
                chosen_action = canonical_tool_call(*expert)
                rejected_action = canonical_tool_call(*parsed) if parsed else text
                if rejected_action == chosen_action:
                    continue
                out.append({"pair_id": pair_id(prompt, chosen_action, rejected_action),
                            "trace_id": f"{instance['instance_id']}#expert", "step": at // 2 - 1,
                            "task_id": instance["instance_id"], "rule": "expert", "control": None, "prompt": prompt,
                            "chosen": render_action(chosen_action, expert),
                            "rejected": render_action(rejected_action, parsed) if parsed else text,
                            "chosen_action": chosen_action, "rejected_action": rejected_action,
                            "student_action": rejected_action, "margin": 1.0})
                if len(out) == count:
                    return out
    finally:
        env.close()
    return out


def oracle_pairs(instances: list[dict], *, seed: int = 0) -> list[dict]:
    """Pairs whose preference is known, standing in for 003's when its output is not there (004's smoke
    default): at the state where the scripted expert edits (after run_tests and view), chosen = its gold edit,
    rejected = the same edit with one slip (a wrong fix of the bug, as in the noisy demonstrations). One pair
    per task that has a slip to make; rule "oracle", margin 1.0, no teacher votes."""
    from composer import policies
    from composer.env.environment import CodingEnv, gold_edits

    rng = random.Random(seed)
    env = CodingEnv(instances, policies.ENV_CONFIG)
    out = []
    try:
        for instance in instances:
            path = gold_edits(instance)[0]["path"]
            env.reset(instance=instance)
            source = (env.repo / path).read_text()
            fix = policies.gold_fix(instance, source)
            buggy = "".join(source.splitlines(keepends=True)[fix["start"] - 1:fix["end"]])
            wrong = policies._slip(fix["new_text"], buggy, rng)
            if wrong is None:
                continue
            messages, _, _ = policies.demonstrate(env, instance)
            at = next(i for i, m in enumerate(messages)
                      if m["role"] == "assistant" and m["tool_calls"][0]["function"]["name"] == "edit")
            prompt = prompt_messages(messages[:at])
            calls = [{"path": path, "new_text": text, "start": fix["start"], "end": fix["end"]}  # the expert's order
                     for text in (fix["new_text"], wrong)]
            actions = [canonical_tool_call("edit", args) for args in calls]
            chosen, rejected = (render_action(a, ("edit", args)) for a, args in zip(actions, calls))
            out.append({"pair_id": pair_id(prompt, *actions), "trace_id": f"{instance['instance_id']}#oracle",
                        "task_id": instance["instance_id"], "rule": "oracle", "control": None, "prompt": prompt,
                        "chosen": chosen, "rejected": rejected, "chosen_action": actions[0],
                        "rejected_action": actions[1], "margin": 1.0})
    finally:
        env.close()
    return out
