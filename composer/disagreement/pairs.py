"""DPO pairs from teacher disagreement, their controls, and the statistics spike 003 judges them by.

    from composer import replay, traces
    from composer.disagreement import pairs
    by_trace = traces.group_traces(traces.import_jsonl("runs/002a-trace-collection-trl/traces.jsonl"))
    queries = replay.read_queries("runs/003/teacher_queries.jsonl")
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

import hashlib
import json
import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from composer import stats
from composer.traces import prompt_messages
from composer.teachers import OTHER, TeacherQuery
from composer.actions import canonical_action, canonical_tool_call

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
    from composer import trainer
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
    return trainer.add_reference_logps(dataset, model, tokenizer, batch_size=batch_size), skipped
