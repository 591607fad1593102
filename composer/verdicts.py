"""The verdict tables of README.md and docs/results.md, generated from the committed reports (reports/*.json), so the
prose never tells another verdict, figure or commit than the report does.

    python -m composer verdicts            # print the table; exit 1 if README.md or docs/results.md is out of date
    python -m composer verdicts --write    # rewrite both tables (between BEGIN and END); `make reports` does too

    from composer import verdicts
    verdicts.table(reports_dir, link="reports/")    # the Markdown lines

A row: the spike, its gate (every criterion's name, comparator and threshold), the verdict with the backend and the
criterion that decides it (the first that did not pass, else the first: estimate [interval] against its threshold),
the commit and date it ran at, and links to its HTML and JSON.
"""

import argparse
import json
import sys
from pathlib import Path

from composer import report
from composer.files import write_atomic
from composer.paths import REPORTS, ROOT

BEGIN = "<!-- verdicts: python -m composer verdicts --write (generated from reports/*.json; do not edit) -->"
END = "<!-- end of verdicts -->"
# the pages that carry the table, and the path from each to reports/
PAGES = {"README.md": "reports/", "docs/results.md": "../reports/"}


def deciding(results: dict) -> dict:
    """The criterion that decides a report's verdict: the first that did not pass, else the first."""
    return next((c for c in results["criteria"] if c["passed"] is not True), results["criteria"][0])


def commit(results: dict) -> str:
    prov = results["provenance"]
    if not prov["git_sha"]:
        return "none"
    return prov["git_sha"][:7] + {False: "", True: "+dirty", None: "+unknown"}[prov["git_dirty"]]


def table(reports_dir=REPORTS, *, link: str = "reports/") -> list[str]:
    """The table's Markdown lines, one row per <slug>.json in reports_dir, in spike order (001, 002a, ... sort so)."""
    lines = ["| spike | gate | latest verdict | run at | report |", "|---|---|---|---|---|"]
    for path in sorted(Path(reports_dir).glob("*.json")):
        r = json.loads(path.read_text())
        gate = "; ".join(f"{c['name']} {c['comparator']} {c['threshold']:g}" for c in r["criteria"])
        verdict = f"**{r['verdict']}** ({r['backend']}): {report.criterion_line(deciding(r))}"
        cells = [r["title"], gate, verdict, f"`{commit(r)}`, {r['provenance']['started_utc'][:10]}",
                 f"[html]({link}{path.stem}.html) · [json]({link}{path.stem}.json)"]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    return lines


def render(text: str, lines: list[str], page: str) -> str:
    """`text` with its block between BEGIN and END replaced by `lines`; a page without the markers is refused."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{page}: needs one {BEGIN!r} line and one {END!r} line after it, around the table")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail


def stale(root=ROOT, reports_dir=REPORTS, *, write: bool = False) -> list[str]:
    """The pages whose table is not the reports' (rewritten when `write`)."""
    out = []
    for page, link in PAGES.items():
        path = Path(root) / page
        text = path.read_text()
        want = render(text, table(reports_dir, link=link), page)
        if want != text:
            out.append(page)
            if write:
                write_atomic(path, want)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer verdicts", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables of " + " and ".join(PAGES))
    args = parser.parse_args(argv)
    print("\n".join(table()))
    pages = stale(write=args.write)
    if pages and not args.write:
        print(f"out of date (run with --write): {', '.join(pages)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
