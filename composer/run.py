"""Run spike notebooks headless: check parameters, execute with papermill, render with nbconvert.

    python -m composer run 005                          # one spike (slug or unique prefix), its defaults
    python -m composer run 001 -p steps=5 -p teachers='[a, b]'
    python -m composer run all --profile report         # every spike, in dependency order

For each spike it writes <reports>/<slug>/executed.ipynb, <reports>/<slug>.html (outputs only,
verdict banner first), <reports>/<slug>.json (the results report.record() emitted, with the
effective parameters) and regenerates the index <reports>/README.md.
"""

import ast
import contextlib
import difflib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import NamedTuple

import nbformat
import papermill
import yaml
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError

from composer import progress, report, verdicts
from composer.allowed import KINDS, allows, fits, load_yaml
from composer.files import write_atomic
from composer.paths import NOTEBOOKS, PARAMS, REPORTS, ROOT

# `all` runs spikes in this order because a spike may consume an earlier one's output files
# (003 builds pairs from 001's teacher queries, 004 trains with 005's trainer); others follow, by name.
ORDER = ("005", "001", "002a", "002b", "003", "004")
# "default": the notebook's own defaults, no file; "pilot": a few steps of a live profile, to measure its phase times
PROFILES = ("default", "report", "live", "pilot")
HTML_LIMIT = 5_000_000
RUN_REPORTS = ROOT / "runs" / "reports"  # where runs at any profile but "report" write (git-ignored)


class UsageError(Exception):
    """A bad spike name, parameter or file, found before anything runs: exit 2, nothing written."""


class RunFailed(Exception):
    """A notebook ran and failed: exit 1, the previous HTML/JSON left as they were."""


def _order(slug):
    prefix = slug.split("-")[0]
    return (ORDER.index(prefix) if prefix in ORDER else len(ORDER), slug)


def slugs(notebooks_dir=NOTEBOOKS) -> list[str]:
    """The spikes (notebook stems), in run order."""
    return sorted((p.stem for p in Path(notebooks_dir).glob("*.ipynb")), key=_order)


def select(name, notebooks_dir=NOTEBOOKS) -> list[str]:
    """`all`, a slug, or a unique prefix of one -> the slugs to run."""
    valid = slugs(notebooks_dir)
    if name == "all" and valid:
        return valid
    matches = [s for s in valid if s == name] or [s for s in valid if s.startswith(name)]
    if len(matches) != 1:
        what = "ambiguous" if matches else "unknown"
        raise UsageError(f"{what} spike {name!r}; valid: {', '.join(valid) or f'none (no notebooks in {notebooks_dir})'}")
    return matches


# -----------------------------------------------------------------------------
# parameters


class Param(NamedTuple):
    default: object
    kind: str | None
    """int, float, str, bool, list or dict; None accepts any value."""
    allowed: str | None
    """The allowed-values clause of its comment ("{at least 1}", "{topk | samples}", "{non-empty}"), without braces."""
    help: str


# An allowed-values clause opens a parameter's comment: `k: int = 5  # {at least 1} calls per step`, with bounds
# ("at least 1", "more than 0, at most 1", "less than 1"), choices ("topk | samples | logprobs", each read as YAML)
# or "non-empty" (a list or text), checked by composer.allowed.
ALLOWED = re.compile(r"^\{([^{}]+)\}\s*")
ASSIGNMENT = re.compile(r"^\w+\s*(:[^=]*)?=")


def notebook_parameters(notebook) -> dict[str, Param]:
    """name -> Param from the `parameters` cell: the default, its type (the annotation, else the default's own
    type), the allowed-values clause opening its comment, and the rest of the comment."""
    spec = {}
    found = papermill.inspect_notebook(str(notebook))
    cell = next(c for c in nbformat.read(notebook, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
    lines = [line for line in cell.source.splitlines() if ASSIGNMENT.match(line)]
    if len(lines) != len(found):  # papermill drops a line it cannot parse (e.g. a second "=" in its comment)
        missed = [line for line in lines if line.split("=")[0].split(":")[0].strip() not in found]
        raise UsageError(f"{Path(notebook).name}: papermill cannot read the parameter line {missed[0]!r} "
                         "(no '=' in a parameter's comment)")
    for name, p in found.items():
        try:
            default = ast.literal_eval(p["default"])
        except (ValueError, SyntaxError):
            raise UsageError(f"{Path(notebook).name}: parameter {name} = {p['default']} is not a literal (derive values in the next cell)") from None
        # papermill knows a type from an annotation ("None" without one), so the default's own type is the
        # fallback. Optional[...], unknown annotations and None defaults accept anything; list[str] is checked as list.
        annotation = p["inferred_type_name"]
        kind = annotation.split("[")[0] if annotation != "None" else type(default).__name__
        clause = ALLOWED.match(p["help"] or "")
        param = Param(default, kind if kind in KINDS else None, clause and clause.group(1).strip(),
                      ALLOWED.sub("", p["help"] or ""))
        if param.allowed is not None:
            try:
                fits = allows(param.allowed, default)
            except ValueError as e:
                raise UsageError(f"{Path(notebook).name}: parameter {name}: {e}") from None
            if not fits:
                raise UsageError(f"{Path(notebook).name}: parameter {name}'s default {default!r} is not {param.allowed}")
        spec[name] = param
    return spec


def _read_yaml(path) -> dict:
    try:
        values = load_yaml(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"{path}: {e}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UsageError(f"{path}: expected a mapping of parameter names to values")
    return values


def effective_parameters(slug, *, profile="default", params_file=None, overrides=None, notebooks_dir=NOTEBOOKS, params_dir=PARAMS):
    """Notebook defaults < params/<profile>/<slug>.yaml < params_file < overrides, each checked.

    Returns (values, defaults): every parameter's effective value, and the notebook's defaults.
    """
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    spec = notebook_parameters(Path(notebooks_dir) / f"{slug}.ipynb")
    layers = []
    profile_file = Path(params_dir) / profile / f"{slug}.yaml"
    if profile != "default" and profile_file.exists():
        layers.append((str(profile_file), _read_yaml(profile_file)))
    if params_file is not None:
        layers.append((str(params_file), _read_yaml(params_file)))
    layers.append(("-p", overrides or {}))
    values = {name: p.default for name, p in spec.items()}
    for origin, layer in layers:
        for name, value in layer.items():
            if name not in spec:
                near = difflib.get_close_matches(name, spec, n=1)
                raise UsageError(f"{origin}: unknown parameter {name!r} for {slug}"
                                 + (f"; did you mean {near[0]!r}?" if near else f"; valid: {', '.join(spec) or 'none'}"))
            kind, allowed = spec[name].kind, spec[name].allowed
            if not fits(value, kind):
                raise UsageError(f"{origin}: parameter {name!r} of {slug} expects {kind}, got {type(value).__name__} {value!r}")
            if allowed is not None and not allows(allowed, value):
                raise UsageError(f"{origin}: parameter {name!r} of {slug} must be {allowed}, got {value!r}")
            values[name] = value
    try:
        report.redact_params(values)
    except ValueError as e:
        raise UsageError(f"{slug}: {e}") from None
    return values, {name: p.default for name, p in spec.items()}


def describe(slug, notebooks_dir=NOTEBOOKS) -> str:
    """`run SLUG --help`: the spike's title and each parameter with its type, default and allowed values."""
    notebook = Path(notebooks_dir) / f"{slug}.ipynb"
    lines = [f"{slug}: {_title(nbformat.read(notebook, as_version=4), slug)}", "", "parameters (-p NAME=VALUE):"]
    for name, p in notebook_parameters(notebook).items():
        allowed = f" {{{p.allowed}}}" if p.allowed else ""
        default = json.dumps(p.default)
        default = default if len(default) <= 80 else default[:77] + "..."
        lines.append(f"  {name} ({p.kind or 'any'}) = {default}{allowed}")
        lines += [f"      {p.help}"] if p.help else []
    return "\n".join(lines)


# -----------------------------------------------------------------------------
# execution and outputs


def _title(nb, fallback) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def render_html(nb, title) -> str:
    """The report page: outputs and markdown only (--no-input), no prompts, images inline; the cell holding the
    verdict banner first, so a reader sees the verdict before the spike's prose."""
    banner = [i for i, cell in enumerate(nb.cells) if any(f'id="{report.BANNER_ID}"' in out.get("data", {}).get(
        "text/html", "") for out in cell.get("outputs", []))]
    if banner:
        nb = nbformat.from_dict(nb)  # a copy: the executed notebook keeps its order
        nb.cells.insert(0, nb.cells.pop(banner[0]))
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True, embed_images=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body


@contextlib.contextmanager
def _environ(name, value):
    """os.environ[name] = value for the block (a kernel started in it inherits it), then as it was."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def run_spike(slug, values, defaults, *, profile="default", notebooks_dir=NOTEBOOKS, reports_dir=REPORTS) -> dict:
    """Execute one spike with checked parameters and write its executed notebook, HTML and JSON. The kernel
    inherits this process's environment: report.PROFILE_ENV tells its banner and results the profile, progress.ENV
    sends its progress bars to this process's stderr (papermill's log) instead of the report."""
    # absolute: papermill saves during execution from inside cwd=ROOT, and at the end from here
    reports_dir = Path(reports_dir).resolve()
    changed = {k: v for k, v in values.items() if v != defaults[k]}
    print(f"{slug}: " + (", ".join(f"{k}={v!r}" for k, v in changed.items()) if changed else "notebook defaults"),
          flush=True)
    executed = reports_dir / slug / "executed.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        with _environ(report.PROFILE_ENV, profile), _environ(progress.ENV, "log"):
            nb = papermill.execute_notebook(
                Path(notebooks_dir) / f"{slug}.ipynb", executed, parameters=changed,
                # python3: the kernel of this interpreter (ipykernel's own), whatever kernel the notebook
                # declares for JupyterLab ("composer", which `make lab` registers)
                kernel_name="python3", progress_bar={"desc": f"{slug}: cells", **progress.into(sys.stderr)}, cwd=ROOT,
            )
    except PapermillExecutionError as e:
        message = (e.evalue or "").strip().splitlines()
        raise RunFailed(
            f"{slug}: cell {e.cell_index} (In [{e.exec_count}]) raised {e.ename}: {message[0] if message else ''}\n"
            f"  executed notebook: {executed}"
        ) from None
    wall = time.time() - t0
    try:
        results = report.read_results(nb)
    except LookupError as e:
        raise RunFailed(f"{slug}: {e}\n  executed notebook: {executed}") from None
    if results["spike"] != slug:
        raise RunFailed(f"{slug}: the notebook recorded results for {results['spike']!r}")
    results["params"] = report.redact_params(values)
    if results["provenance"].get("duration_s") is None:
        results["provenance"]["duration_s"] = round(wall, 3)
    page = render_html(nb, _title(nb, slug))
    if len(page) > HTML_LIMIT:
        print(f"{slug}: warning: the HTML report is {len(page) / 1e6:.1f} MB (keep reports under 5 MB)", file=sys.stderr)
    write_atomic(reports_dir / f"{slug}.html", page)
    write_atomic(reports_dir / f"{slug}.json", json.dumps(results, indent=2, allow_nan=False) + "\n")
    print(f"{slug}: {results['verdict']} in {wall:.1f} s")
    return results


def write_index(reports_dir=REPORTS):
    """reports/README.md: one row per <slug>.json present, in run order."""
    reports_dir = Path(reports_dir)
    rows = []
    for path in sorted(reports_dir.glob("*.json"), key=lambda p: _order(p.stem)):
        r = json.loads(path.read_text())
        kind = r["backend"] + (", dry run" if r.get("dry_run") else "")
        cells = [r["spike"], f"**{r['verdict']}**", report.criterion_line(verdicts.deciding(r)), kind,
                 r.get("profile", "–"), r["provenance"]["started_utc"][:10], f"`{verdicts.commit(r)}`",
                 f"[html]({path.stem}.html)"]
        rows.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    text = "\n".join([
        "# Reports",
        "",
        "Generated by `python -m composer run`; the headline is the criterion that decides each verdict (the first",
        "that did not pass, else the first): estimate [interval] against its threshold.",
        "",
        "| spike | verdict | headline | backend | profile | date | git | report |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Verdict rule: {report.VERDICT_RULE}",
        "",
    ])
    write_atomic(reports_dir / "README.md", text)
    if reports_dir.resolve() == Path(REPORTS).resolve():  # the committed reports: README's and results' tables too
        verdicts.stale(write=True)


def run(name, *, profile="default", params_file=None, overrides=None, notebooks_dir=NOTEBOOKS, reports_dir=None,
        params_dir=PARAMS) -> int:
    """Run one spike or `all`; return the exit code (0 ok, 1 a notebook failed, 2 bad usage). reports_dir None:
    reports/ for the report profile, runs/reports/ otherwise (a smoke run never overwrites a committed report)."""
    if reports_dir is None:
        reports_dir = REPORTS if profile == "report" else RUN_REPORTS
    try:
        chosen = select(name, notebooks_dir)
        if len(chosen) > 1 and (params_file is not None or overrides):
            raise UsageError("-p and --params-file apply to a single spike; use --profile with `all`")
        # every spike is checked before the first one runs
        plans = [(slug, *effective_parameters(slug, profile=profile, params_file=params_file, overrides=overrides,
                                              notebooks_dir=notebooks_dir, params_dir=params_dir)) for slug in chosen]
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    code = 0
    for slug, values, defaults in plans:
        try:
            run_spike(slug, values, defaults, profile=profile, notebooks_dir=notebooks_dir, reports_dir=reports_dir)
        except RunFailed as e:
            print(f"error: {e}", file=sys.stderr)
            code = 1
            break
    write_index(reports_dir)  # spikes that succeeded before a failure still count
    return code
