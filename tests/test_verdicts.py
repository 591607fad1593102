"""composer.verdicts: README's and docs/results.md's verdict tables are the committed reports', and a table that
tells another verdict, figure or commit than its report is caught."""

import json
import shutil

import pytest

from composer import verdicts
from composer.paths import REPORTS, ROOT


def test_the_pages_carry_the_reports_table():
    assert verdicts.stale() == [], "run python -m composer verdicts --write"
    for page, link in verdicts.PAGES.items():
        assert "\n".join(verdicts.table(link=link)) in (ROOT / page).read_text()


@pytest.fixture
def copy(tmp_path):
    """A copy of the pages and the reports to change."""
    for page in verdicts.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    shutil.copytree(REPORTS, tmp_path / "reports", ignore=shutil.ignore_patterns("*.html", "001-teacher-replay-cost"))
    return tmp_path


@pytest.mark.parametrize("change", [
    lambda r: r.update(verdict="VALIDATED"),
    lambda r: r["criteria"][0].update(estimate=r["criteria"][0]["estimate"] + 1),
    lambda r: r["provenance"].update(git_sha="0" * 40),
    lambda r: r["provenance"].update(git_dirty=True),
])
def test_a_report_that_tells_another_verdict_figure_or_commit_makes_the_pages_stale(copy, change):
    path = copy / "reports/003-dpo-pairs-from-disagreement.json"
    assert verdicts.stale(copy, copy / "reports") == []
    results = json.loads(path.read_text())
    change(results)
    path.write_text(json.dumps(results))
    assert verdicts.stale(copy, copy / "reports") == list(verdicts.PAGES)
    assert verdicts.stale(copy, copy / "reports", write=True) == list(verdicts.PAGES)
    assert verdicts.stale(copy, copy / "reports") == []  # rewritten
    row = next(line for line in verdicts.table(copy / "reports") if line.startswith("| 003"))
    assert row in (copy / "README.md").read_text()


def test_the_deciding_criterion_is_the_first_that_did_not_pass():
    results = {"criteria": [{"passed": True}, {"passed": None}, {"passed": False}]}
    assert verdicts.deciding(results) is results["criteria"][1]
    assert verdicts.deciding({"criteria": [{"passed": True, "n": 1}, {"passed": True}]}) == {"passed": True, "n": 1}


def test_a_page_without_its_markers_is_refused_naming_it(copy):
    (copy / "README.md").write_text("no table here\n")
    with pytest.raises(ValueError, match="README.md: needs one '<!-- verdicts: python -m composer verdicts --write"):
        verdicts.stale(copy, copy / "reports")
