"""The command line: `python -m composer COMMAND ...`.

    python -m composer run 005 -p steps=5          # one spike notebook -> reports/
    python -m composer run all --profile report    # every spike, in dependency order
    python -m composer bench NAME [ARGS ...]       # a benchmark in composer/bench/
    python -m composer serve --model student=PATH  # a local OpenAI-compatible server
    python -m composer serve-env --tasks 20        # the coding environment over HTTP/WebSocket (OpenEnv)
    python -m composer zoo --profile report        # train or load the tiny student and 3 teachers; pass@1 table
    python -m composer pilot --student qwen/qwen3-8b --pool verified --episodes 50 --dry-run   # the API pilot
    python -m composer verdicts --write    # README's and docs/results.md's verdict tables from reports/*.json
"""

import argparse
import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import yaml

from composer.paths import NOTEBOOKS, REPORTS

RUN_EPILOG = """\
parameters, later wins:
  1. the notebook's `parameters` cell (its defaults)
  2. params/<profile>/<slug>.yaml, when the profile is not "default" and the file exists
  3. --params-file FILE (a YAML mapping)
  4. -p NAME=VALUE, VALUE read as YAML: -p steps=5 -p lr=1e-3 -p teachers='[a, b]' -p name='"005"'
Names are checked against the parameters cell and values against its types (an int is
accepted for a float; a None default accepts anything) before anything runs. Keys are
refused: a parameter named like *api_key* holds the NAME of an environment variable.

outputs, in --reports-dir (reports/ with --profile report, runs/reports/ otherwise, so a smoke
run never overwrites a committed report):
  <slug>/executed.ipynb   the executed notebook (kept when a cell fails, for debugging)
  <slug>.html             the report: outputs only, verdict banner first
  <slug>.json             results: verdict, criteria with intervals, metrics, params, provenance
  README.md               the index of every <slug>.json present

`all` runs 005, 001, 002a, 002b, 003, 004 (then any other notebook) and stops at the first failure.

exit status: 0 success, 1 a notebook failed or recorded no results (previous HTML/JSON kept),
2 bad spike, profile, parameter or file (nothing written)."""


def benches() -> dict[str, str]:
    """The benches in composer/bench/ with the first line of each one's docstring (read, not imported: some import
    torch)."""
    package = importlib.import_module("composer.bench")
    out = {}
    for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not m.name.startswith("_"):
            path = Path(m.module_finder.path) / f"{m.name}.py"
            doc = ast.get_docstring(ast.parse(path.read_text())) if path.exists() else None
            out[m.name] = (doc or "").split("\n")[0]
    return out


def describe(argv) -> int:
    """`run SLUG --help`: the spike's parameters, or exit 2 for an unknown spike."""
    from composer import run

    notebooks = Path(argv[argv.index("--notebooks-dir") + 1]) if "--notebooks-dir" in argv[:-1] else NOTEBOOKS
    try:
        (slug,) = run.select(argv[1], notebooks)
    except (run.UsageError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(run.describe(slug, notebooks))
    return 0


def bench(name, argv) -> int:
    """Dispatch to composer.bench.<name>.main(argv)."""
    available = list(benches())
    if name not in available:
        print(f"error: unknown bench {name!r}; available: {', '.join(available) or 'none yet'}", file=sys.stderr)
        return 2
    return importlib.import_module(f"composer.bench.{name}").main(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A benchmark needs only its own imports: the prepared device check (scripts/gpu-check.sh) runs on a CUDA image
    # that carries torch, transformers and TRL but not papermill or nbconvert, which `run` imports.
    if argv[:1] == ["bench"] and len(argv) > 1 and not argv[1].startswith("-"):
        return bench(argv[1], argv[2:])
    from composer import run

    parser = argparse.ArgumentParser(prog="python -m composer", description="Spike notebooks, reports and benchmarks for composer.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser(
        "run", help="execute spike notebooks headless and write their reports",
        description="Execute spike notebooks with papermill and write executed notebook, HTML and JSON reports.",
        epilog=RUN_EPILOG + "\n\nspikes (`run SLUG --help` lists a spike's parameters):\n" + "\n".join(
            f"  {slug}" for slug in run.slugs()), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("spike", help="a notebook slug (005-integrated-trainer-skeleton), a unique prefix (005), or all")
    p.add_argument("--profile", choices=run.PROFILES, default="default", help="parameter profile (default: the notebook's own defaults)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE", help="override one parameter (repeatable)")
    p.add_argument("--params-file", type=Path, metavar="FILE", help="YAML mapping of parameter overrides")
    p.add_argument("--reports-dir", type=Path, metavar="DIR",
                   help=f"where reports go (default: {REPORTS} for --profile report, {run.RUN_REPORTS} otherwise)")
    p.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS, metavar="DIR", help=f"where spike notebooks are (default: {NOTEBOOKS})")

    p = commands.add_parser("bench", help="run a benchmark module from composer/bench/", description="Run composer.bench.NAME's main(ARGS).",
                            epilog="benches (`bench NAME --help` for its options):\n" + "\n".join(
                                f"  {name:10} {summary}" for name, summary in benches().items()),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help="a module in composer/bench/")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed to the benchmark's main()")

    # Listed for --help; its arguments are composer.serve's own, handed over whole below (argparse's REMAINDER
    # would stop at a leading option such as --model).
    commands.add_parser("serve", help="a local OpenAI-compatible server (checkpoints, simulated providers)",
                        add_help=False)

    commands.add_parser("serve-env", help="serve the coding environment over HTTP/WebSocket (OpenEnv)",
                        add_help=False)

    commands.add_parser("zoo", help="train (or load from the cache) the tiny student and teachers; print pass@1",
                        add_help=False)

    commands.add_parser("plan", help="GPU memory and GPU-hours of the live profiles (estimates); --write updates "
                                     "their YAML headers", add_help=False)

    commands.add_parser("pilot", help="the student through an API on SWE-bench instances before any GPU: base "
                                      "rate, tokens, dollars, traces (--dry-run prices it)", add_help=False)

    commands.add_parser("verdicts", help="README's and docs/results.md's verdict tables from reports/*.json; "
                                         "--write updates them", add_help=False)

    if argv[:1] == ["run"] and len(argv) > 2 and not argv[1].startswith("-") and {"-h", "--help"} & set(argv):
        return describe(argv)
    if argv[:1] == ["serve"]:
        from composer import serve  # imports torch and uvicorn: only for this command

        return serve.main(argv[1:])
    if argv[:1] == ["serve-env"]:  # its options belong to composer.env.server's own parser
        from composer.env import server

        return server.main(argv[1:])
    if argv[:1] == ["zoo"]:
        from composer import zoo

        return zoo.main(argv[1:])
    if argv[:1] == ["pilot"]:
        from composer.costs import pilot

        return pilot.main(argv[1:])
    if argv[:1] == ["plan"]:
        from composer.costs import plan

        return plan.main(argv[1:])
    if argv[:1] == ["verdicts"]:
        from composer import verdicts

        return verdicts.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "bench":  # `bench -- NAME`; a plain `bench NAME` was dispatched above
        return bench(args.name, args.args)
    overrides = {}
    for item in args.param:
        name, sep, text = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError("expected NAME=VALUE")
            overrides[name] = run.load_yaml(text)
        except (ValueError, yaml.YAMLError) as e:
            print(f"error: -p {item!r}: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
    from composer import tether

    with tether.reaping():  # a killed `make reports` leaves nothing running (a library's own children included)
        return run.run(args.spike, profile=args.profile, params_file=args.params_file, overrides=overrides,
                       notebooks_dir=args.notebooks_dir, reports_dir=args.reports_dir)
