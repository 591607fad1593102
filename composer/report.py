"""Results contract, verdict rule, verdict banner, provenance and plots for spike notebooks.

A spike notebook uses it in three cells (`python -m composer run <slug>` executes it headless):

    # the parameters cell (tagged `parameters`): literals only
    backend = "offline"
    seed = 0

    # the next cell: the banner is the executed notebook's first output
    from composer import report
    started = report.banner("005 · Integrated trainer skeleton", backend=backend)

    # ... the spike ...

    # the last cell: record results; the verdict is computed, never typed
    results = report.record(
        "005-integrated-trainer-skeleton",
        title="005 · Integrated trainer skeleton",
        criteria=[report.Criterion("loss drop", threshold=0, comparator=">", estimate=d, ci_low=lo, ci_high=hi)],
        metrics={"loss_drop": d},
        params=dict(backend=backend, seed=seed),
        backend=backend, seed=seed, started=started,
    )

record() emits the results as a display output of type RESULTS_MIME; the runner reads them
back from the executed notebook with read_results() (our replacement for scrapbook).
"""

import base64
import copy
import html
import io
import json
import math
import operator
import os
import platform
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata

import matplotlib
import nbformat
import psutil
from IPython.display import Image, display, update_display
from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from composer.paths import REPORTS, ROOT

RESULTS_MIME = "application/vnd.composer.results+json"
BANNER_ID = "composer-verdict-banner"
BACKENDS = ("offline", "live")
VERDICTS = ("VALIDATED", "INVALIDATED", "PARTIAL", "INCONCLUSIVE")
GIT_TIMEOUT_S = 120
# The banner's word on the tree a report was made from; None: git did not answer in time.
_DIRT = {False: "", True: " (dirty)", None: " (tree state unknown)"}
COMPARATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
PACKAGES = ("torch", "transformers", "trl", "accelerate", "datasets", "papermill", "nbconvert", "numpy", "scipy")
VERDICT_RULE = (
    "Each criterion passes when its whole confidence interval meets the threshold, fails when its whole "
    "interval misses it, and is undecided otherwise (an exact criterion has a zero-width interval); a criterion "
    "with a null value passes instead when its estimate meets the threshold and its interval excludes the null. "
    "VALIDATED: every criterion passes. INVALIDATED: every criterion fails. PARTIAL: some pass and some fail, "
    "none undecided. INCONCLUSIVE: any criterion is undecided, including one whose data fall short of a stated "
    "minimum (too few answered calls, smoke-scale samples). A run that did not complete (e.g. a budget cap "
    "was hit) is never VALIDATED: it is PARTIAL."
)
COLOURS = {"VALIDATED": "#1a7f37", "INVALIDATED": "#cf222e", "PARTIAL": "#9a6700", "INCONCLUSIVE": "#57606a", None: "#0969da"}
# Badges: colours no verdict uses, so "offline" never reads as INVALIDATED nor "live" as VALIDATED.
BADGES = {"offline": "#8250df", "live": "#0550ae", "profile": "#6e7781", "dry run": "#bc4c00"}
# `python -m composer run --profile P` tells the kernel its profile; a notebook run by hand is "notebook".
PROFILE_ENV = "COMPOSER_PROFILE"
# An API key as OpenAI/OpenRouter ("sk-", "sk-or-v1-") or Hugging Face ("hf_") issue them.
API_KEY = re.compile(r"^(sk-|hf_)[A-Za-z0-9_-]{16,}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")

# SVG ids are random unless salted; PNGs carry no timestamp unless asked (see png()).
matplotlib.rcParams["svg.hashsalt"] = "composer"
matplotlib.rcParams["text.parse_math"] = False  # "$5/trace" is dollars in a label, never mathtext


# -----------------------------------------------------------------------------
# criteria and the verdict


@dataclass(frozen=True)
class Criterion:
    """One gate of a spike: `estimate comparator threshold`, judged on the interval [ci_low, ci_high].

    With `null` set it is a minimum-effect superiority gate (spike 004's rule): it passes when the estimate
    meets the threshold and the whole interval is on the threshold's side of `null` (e.g. B - A >= 2 points
    with an interval above 0); it fails, as any criterion, when the whole interval misses the threshold.

    `undecided_why` says why the data cannot decide it whatever its interval (e.g. "3 of 12 calls answered, below
    the stated minimum of 90 %"): the criterion is then undecided, and reports show the reason beside it."""

    name: str
    threshold: float
    comparator: str
    estimate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    null: float | None = None
    undecided_why: str | None = None

    def __post_init__(self):
        if self.comparator not in COMPARATORS:
            raise ValueError(f"criterion {self.name!r}: comparator must be one of {', '.join(COMPARATORS)}, got {self.comparator!r}")
        # An exact (deterministic) criterion: the interval is the estimate itself.
        if self.ci_low is None:
            object.__setattr__(self, "ci_low", self.estimate)
        if self.ci_high is None:
            object.__setattr__(self, "ci_high", self.estimate)
        if _known(self.ci_low) and _known(self.ci_high) and self.ci_low > self.ci_high:
            raise ValueError(f"criterion {self.name!r}: ci_low {self.ci_low} > ci_high {self.ci_high}")

    @property
    def status(self) -> str:
        """"pass", "fail" or "undecided" (an interval straddling the threshold, a missing/NaN value, or a stated
        reason the data cannot decide it)."""
        if self.undecided_why or not (_known(self.ci_low) and _known(self.ci_high)):
            return "undecided"
        meets = COMPARATORS[self.comparator]
        # For ">"/">=" the interval's low end must clear the threshold to pass and its high end
        # must miss it to fail; for "<"/"<=" the other way round.
        worst, best = (self.ci_low, self.ci_high) if self.comparator in (">", ">=") else (self.ci_high, self.ci_low)
        if self.null is None and meets(worst, self.threshold):
            return "pass"
        beyond_null = COMPARATORS[self.comparator[0]]  # strictly: the interval excludes the null
        if self.null is not None and meets(self.estimate, self.threshold) and beyond_null(worst, self.null):
            return "pass"
        if not meets(best, self.threshold):
            return "fail"
        return "undecided"

    @property
    def passed(self) -> bool | None:
        return {"pass": True, "fail": False, "undecided": None}[self.status]


def too_few(n: int, minimum: int, what: str) -> str | None:
    """Why a criterion cannot be decided at smoke scale ("n = 2 seeds, below the stated minimum of 5: smoke
    scale"), or None when n meets the minimum its spike states."""
    return None if n >= minimum else f"n = {n} {what}, below the stated minimum of {minimum}: smoke scale"


def short_of(count: int, total: int, minimum: float, what: str) -> str | None:
    """Why a criterion cannot be decided when only `count` of `total` units are usable ("3 of 12 calls answered,
    below the stated minimum of 90 %"), or None when the share meets `minimum`."""
    if total and count / total >= minimum:
        return None
    return f"{count} of {total} {what}, below the stated minimum of {minimum:.0%}"


def _known(x) -> bool:
    return x is not None and x == x  # NaN != NaN, whatever its numeric type


def decide_verdict(criteria, *, complete=True) -> str:
    """The verdict by VERDICT_RULE."""
    statuses = [c.status for c in criteria]
    if not statuses:
        raise ValueError("a verdict needs at least one criterion")
    if "undecided" in statuses:
        return "INCONCLUSIVE"
    if all(s == "fail" for s in statuses):
        return "INVALIDATED"
    if all(s == "pass" for s in statuses) and complete:
        return "VALIDATED"
    return "PARTIAL"


# -----------------------------------------------------------------------------
# the results object


def redact_params(params: dict) -> dict:
    """A copy of params, or ValueError naming the first key that holds a secret.

    Refuses rather than silently drops, so a key pasted into a parameter is noticed. A key
    named like *api_key* may only hold the NAME of an environment variable (or None).
    """
    def check(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                if re.search(r"api_?key", str(key), re.IGNORECASE) and not (item is None or (isinstance(item, str) and ENV_NAME.match(item))):
                    raise ValueError(f"parameter {where!r} must name an environment variable (e.g. OPENROUTER_API_KEY), not hold a key")
                check(item, where)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                check(item, f"{path}[{i}]")
        elif isinstance(value, str) and API_KEY.match(value):
            raise ValueError(f"parameter {path!r} holds what looks like an API key; pass the name of an environment variable instead")

    check(params, "")
    return copy.deepcopy(params)


def _clean(value, path, notes):
    """value as plain JSON types; non-finite floats become None with a note."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        notes.append(f"{path} was {value}; recorded as null")
        return None
    if hasattr(value, "tolist"):  # numpy scalars and arrays, torch tensors
        return _clean(value.tolist(), path, notes)
    if isinstance(value, dict):
        return {str(k): _clean(v, f"{path}.{k}", notes) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, f"{path}[{i}]", notes) for i, v in enumerate(value)]
    raise TypeError(f"{path}: {type(value).__name__} is not a number, string, list or dict")


def record(spike, *, title, criteria, metrics, params, backend, seed, started, notes=(), complete=True,
           dry_run=False) -> dict:
    """Build, validate and display the results; update the banner; return the results dict. dry_run: nothing was
    sent or trained (a priced plan): the banner says so and the run is not counted as incomplete."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    notes = list(notes)
    if not complete:
        notes.append("the run did not complete (e.g. a budget cap was hit), so it can not be VALIDATED")
    rows = [
        {"name": c.name, "threshold": c.threshold, "comparator": c.comparator, "estimate": c.estimate,
         "ci_low": c.ci_low, "ci_high": c.ci_high, "passed": c.passed, **({"null": c.null} if c.null is not None else {}),
         **({"undecided_why": c.undecided_why} if c.undecided_why else {})}
        for c in criteria
    ]
    results = {
        "spike": spike,
        "title": title,
        "verdict": decide_verdict(criteria, complete=complete),
        "verdict_rule": VERDICT_RULE,
        "backend": backend,
        "profile": os.environ.get(PROFILE_ENV, "notebook"),
        "dry_run": dry_run,
        "criteria": _clean(rows, "criteria", notes),
        "metrics": _clean(metrics, "metrics", notes),
        "params": _clean(redact_params(params), "params", notes),
        "provenance": _clean(provenance(seed, started), "provenance", notes),
        "notes": notes,
    }
    json.dumps(results, allow_nan=False)  # the contract: plain, finite JSON
    table = _criteria_html(results)
    display({RESULTS_MIME: results, "text/html": table, "text/plain": _summary(results)}, raw=True)
    update_display({"text/html": _banner_html(title, backend, results), "text/plain": _summary(results)}, raw=True,
                   display_id=BANNER_ID)
    return results


def read_results(nb_or_path) -> dict:
    """The results a notebook recorded (the last record() output), from a NotebookNode or a path."""
    nb = nb_or_path if isinstance(nb_or_path, nbformat.NotebookNode) else nbformat.read(nb_or_path, as_version=4)
    found = [out["data"][RESULTS_MIME] for cell in nb.cells for out in cell.get("outputs", []) if RESULTS_MIME in out.get("data", {})]
    if not found:
        raise LookupError("the notebook recorded no results (its last cell should call report.record)")
    return json.loads(json.dumps(found[-1]))  # NotebookNode -> plain dicts


def provenance(seed, started) -> dict:
    """Where and how a result was produced: git, versions, hardware, time, seed."""
    sha = _git("rev-parse", "HEAD")
    # Reports are rewritten by every run, so they do not make the code dirty.
    status = _git("status", "--porcelain", "--", ".", f":(exclude){REPORTS.relative_to(ROOT)}") if sha else None
    return {
        "git_sha": sha,
        "git_dirty": None if status is None else status != "",
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "hardware": _hardware(),
        "started_utc": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 3),
        "seed": seed,
    }


def _git(*args) -> str | None:
    # GIT_OPTIONAL_LOCKS=0: status only reads, so parallel runs never wait on (or rewrite) the index. A git that does
    # not answer in time (a disk saturated by other work) leaves the field unknown rather than failing the run.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired):  # no git, or no answer
        return None
    return out.stdout.strip() if out.returncode == 0 else None  # not a repository, or no commit yet


def _version(name) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _hardware() -> dict:
    # torch is only asked if the notebook imported it: that is the run that used a device, and
    # importing it here would cost seconds in notebooks that do not.
    torch = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_available()
    return {
        "platform": platform.platform(),
        # the CPUs this process may use (a container's share), not the host's
        "cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_device": None if torch is None else ("cuda" if cuda else "cpu"),
        "cuda_name": torch.cuda.get_device_name(0) if cuda else None,
        "memory_total_bytes": psutil.virtual_memory().total,
    }


def quiet() -> None:
    """Keep library chatter (load bars, deprecation notices, per-step trainer logs) and raw floats
    (1.080334e-07) out of rendered reports.

    Errors still show; the notebook's own prints and tables are what a reader sees.
    """
    import warnings

    # read when tqdm is imported: the libraries' bars would write into a rendered report; composer's own long loops
    # draw theirs through composer.progress, which never does
    os.environ["TQDM_DISABLE"] = "1"
    import pandas as pd

    pd.set_option("display.float_format", "{:.4g}".format)  # tables print 4 significant digits, as fmt() does
    warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.autonotebook without ipywidgets
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*TRL.*experimental.*")


def start() -> float:
    """The start time record() measures duration from (banner() returns it too)."""
    return time.time()


# -----------------------------------------------------------------------------
# banner and tables


def banner(title, *, backend) -> float:
    """Display the verdict banner ("verdict pending" until record() updates it); return the start time."""
    display({"text/html": _banner_html(title, backend), "text/plain": f"{title}: verdict pending (backend: {backend})"}, raw=True, display_id=BANNER_ID)
    return start()


def fmt(x) -> str:
    """A number as reports print it: 4 significant digits, '–' for a missing value."""
    if x is None:
        return "–"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _status(c) -> str:
    status = {True: "pass", False: "fail", None: "undecided"}[c["passed"]]
    return status + (f" ({c['undecided_why']})" if c.get("undecided_why") else "")


def _value(c) -> str:
    """An estimate with its interval, or alone when the criterion is exact (a count: no interval to show)."""
    if c["ci_low"] == c["ci_high"] == c["estimate"]:
        return fmt(c["estimate"])
    return f"{fmt(c['estimate'])} [{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]"


def _gate(c) -> str:
    null = f", interval beyond {fmt(c['null'])}" if c.get("null") is not None else ""
    return f"{c['comparator']} {fmt(c['threshold'])}{null}"


def criterion_line(c) -> str:
    """A criterion as one line: name, estimate [interval] (the estimate alone when exact), gate and status."""
    return f"{c['name']}: {_value(c)} {_gate(c)}: {_status(c)}"


def _summary(results) -> str:
    lines = [f"{results['title']}: {results['verdict']} (backend: {results['backend']})"]
    lines += [f"  {criterion_line(c)}" for c in results["criteria"]]
    return "\n".join(lines)


def _badge(text, colour) -> str:
    return (f'<span style="background:{colour};color:white;font-weight:bold;padding:2px 8px;border-radius:4px;'
            f'margin-right:6px">{html.escape(text)}</span>')


def _banner_html(title, backend, results=None) -> str:
    """The verdict, what kind of run it was, and the criteria: the page's first lines (notes and the rule follow
    the results table at the end)."""
    e = html.escape
    verdict = results["verdict"] if results else None
    colour = COLOURS[verdict]
    profile = results["profile"] if results else os.environ.get(PROFILE_ENV, "notebook")
    badges = _badge(f"backend: {backend}", BADGES[backend]) + _badge(f"profile: {profile}", BADGES["profile"])
    if results and results["dry_run"]:
        badges += _badge("dry run: nothing sent", BADGES["dry run"])
    parts = [
        f'<div id="{BANNER_ID}" style="border-left:8px solid {colour};padding:10px 14px;margin:4px 0;'
        'background:#f6f8fa;font-family:sans-serif">',
        f'<div style="font-size:1.1em">{e(title)}</div>',
        f'<div style="font-size:2em;font-weight:bold;color:{colour}">{e(verdict or "verdict pending")}</div>',
        f'<div style="margin:6px 0">{badges}</div>',
    ]
    if results:
        parts += [f'<div style="font-family:monospace">{e(criterion_line(c))}</div>' for c in results["criteria"]]
        prov = results["provenance"]
        sha = (prov["git_sha"] or "no commit")[:10] + _DIRT[prov["git_dirty"] if prov["git_sha"] else False]
        parts.append(f'<div style="color:#57606a;font-size:0.9em">{e(prov["started_utc"][:10])} · git {e(sha)} · '
                     f'seed {e(str(prov["seed"]))} · notes and the verdict rule: at the end</div>')
    parts.append("</div>")
    return "\n".join(parts)


def _criteria_html(results) -> str:
    """The criteria table (intervals as [low, high]), the decision chart, the notes and the verdict rule."""
    e = html.escape
    head = "<tr><th>criterion</th><th>estimate [interval]</th><th>gate</th><th>result</th></tr>"
    rows = ["<tr>" + "".join(f"<td>{e(x)}</td>" for x in (c["name"], _value(c), _gate(c), _status(c))) + "</tr>"
            for c in results["criteria"]]
    fig = decision_plot(results["criteria"])
    chart = f'<img alt="decision chart" src="data:image/png;base64,{base64.b64encode(png(fig)).decode()}">'
    plt.close(fig)
    notes = "".join(f"<li>{e(n)}</li>" for n in results["notes"])
    return (f"<p><b>{e(results['verdict'])}</b> (backend: {e(results['backend'])}, profile: {e(results['profile'])})"
            f"</p><table>{head}{''.join(rows)}</table>{chart}" + (f"<p>Notes:</p><ul>{notes}</ul>" if notes else "")
            + f'<p style="color:#57606a;font-size:0.9em">Verdict rule: {e(VERDICT_RULE)}</p>')


# -----------------------------------------------------------------------------
# plots: each returns a Figure (not registered with pyplot, so nothing displays twice); show() displays it


def decision_plot(criteria) -> Figure:
    """The decision at a glance: per criterion (a results row), its estimate and interval against the threshold
    (dashed) and the null (dotted, when it has one), coloured by its status; one panel each, as scales differ. Each
    panel's title (name and status, with the reason an undecided one gives) is wrapped to the figure's width."""
    colours = {True: COLOURS["VALIDATED"], False: COLOURS["INVALIDATED"], None: COLOURS["INCONCLUSIVE"]}
    # ~100 characters of the "small" font fit the 6.4-inch width; a longer title ran past the right edge
    titles = [textwrap.fill(f"{c['name']}: {_status(c)}", 95) for c in criteria]
    lines = sum(title.count("\n") + 1 for title in titles)
    fig = Figure(figsize=(6.4, 0.3 + 0.6 * len(criteria) + 0.15 * lines), layout="constrained")
    for ax, c, title in zip(fig.subplots(len(criteria), 1, squeeze=False)[:, 0], criteria, titles):
        known = [x for x in (c["estimate"], c["ci_low"], c["ci_high"]) if _known(x)]
        if known:
            low, high = (c["ci_low"], c["ci_high"]) if _known(c["ci_low"]) and _known(c["ci_high"]) else (known[0],) * 2
            ax.plot([low, high], [0, 0], color=colours[c["passed"]], linewidth=3)
            ax.plot([known[0] if not _known(c["estimate"]) else c["estimate"]], [0], "o", color=colours[c["passed"]])
        else:  # an axis with only the threshold on it reads as a chart that failed to draw
            ax.text(0.5, 0.5, "no estimate to show", transform=ax.transAxes, ha="center", va="center",
                    fontsize="small", color=colours[None])
        ax.axvline(c["threshold"], color="#24292f", linestyle="--", linewidth=1)
        if c.get("null") is not None:
            ax.axvline(c["null"], color="#24292f", linestyle=":", linewidth=1)
        ax.set_yticks([])
        ax.set_title(title, fontsize="small", loc="left")
        ax.tick_params(axis="x", labelsize="small")
    return fig


def interval_plot(rows, *, xlabel, title, method, seed, threshold=None, null=None) -> Figure:
    """rows: (label, estimate, low, high, n) per line; points with interval whiskers, rliable style; a criterion's
    threshold as a dashed line and its null (no difference) as a dotted one, when given."""
    fig = Figure(figsize=(6.4, 1.6 + 0.5 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, estimate, low, high, n) in enumerate(rows):
        ax.errorbar(estimate, i, xerr=[[estimate - low], [high - estimate]], fmt="o", capsize=4, color=f"C{i}")
    if null is not None:
        ax.axvline(null, color="#24292f", linestyle=":", linewidth=1, label=f"no difference ({null:g})")
    if threshold is not None:
        ax.axvline(threshold, color="#24292f", linestyle="--", linewidth=1, label=f"gate {threshold:g}")
    if threshold is not None or null is not None:
        ax.legend(loc="best", fontsize="small")
    ax.set_yticks(range(len(rows)), [f"{label} (n={n})" for label, *_, n in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.supxlabel(f"points: estimates; whiskers: {method} intervals; seed {seed}", fontsize="small", color="#57606a")
    return fig


def ecdf_plot(samples_by_label, *, xlabel, title) -> Figure:
    """One empirical CDF per label (e.g. per-step latency of each teacher)."""
    fig = Figure(figsize=(6.4, 4), layout="constrained")
    ax = fig.add_subplot()
    for label, samples in samples_by_label.items():
        ax.ecdf(samples, label=f"{label} (n={len(samples)})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction ≤ x")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def curves_plot(x, curves_by_label, *, bands_by_label=None, xlabel, ylabel, title) -> Figure:
    """Lines over x, each with an optional (low, high) band; integer x (steps) gets integer ticks."""
    fig = Figure(figsize=(6.4, 4), layout="constrained")
    ax = fig.add_subplot()
    if all(float(v).is_integer() for v in x):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for label, y in curves_by_label.items():
        (line,) = ax.plot(x, y, label=label)
        if bands_by_label and label in bands_by_label:
            low, high = bands_by_label[label]
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def png(fig, *, dpi=100) -> bytes:
    """PNG bytes that depend only on the figure: fixed dpi, no "Software" (version) metadata."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def show(fig, *, dpi=100):
    """Display fig as a byte-stable PNG and close it (so pyplot's inline backend does not show it again)."""
    display(Image(data=png(fig, dpi=dpi), format="png"))
    plt.close(fig)
