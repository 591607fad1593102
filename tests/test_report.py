"""composer.report: the verdict rule on exact numbers, redaction, the results contract, plots.

    .venv/bin/pytest tests/test_report.py
"""

import json
import subprocess
import types

import matplotlib
import nbformat
import numpy as np
import pytest
from matplotlib.figure import Figure

from composer import report, verdicts
from composer.report import Criterion, decide_verdict

# A fake OpenRouter-shaped key, assembled at run time so secret scanners do not flag the test source.
FAKE_KEY = "sk-or-v1-" + "abcdefgh12345678"

# -----------------------------------------------------------------------------
# one criterion: threshold 5, the interval against each comparator, boundaries included


@pytest.mark.parametrize(
    "comparator, low, high, status",
    [
        (">=", 5, 6, "pass"),  # low end on the threshold meets >=
        (">=", 4, 5, "undecided"),
        (">=", 3, 4.99, "fail"),
        (">=", 5, 5, "pass"),
        (">", 5, 6, "undecided"),  # low end on the threshold does not meet >
        (">", 5.01, 6, "pass"),
        (">", 4, 5, "fail"),  # high end on the threshold misses >
        (">", 5, 5, "fail"),
        ("<=", 4, 5, "pass"),
        ("<=", 5, 6, "undecided"),
        ("<=", 5.01, 6, "fail"),
        ("<=", 5, 5, "pass"),
        ("<", 4, 4.99, "pass"),
        ("<", 4, 5, "undecided"),
        ("<", 5, 6, "fail"),
        ("<", 5, 5, "fail"),
    ],
)
def test_criterion_status(comparator, low, high, status):
    c = Criterion("x", threshold=5, comparator=comparator, estimate=(low + high) / 2, ci_low=low, ci_high=high)
    assert c.status == status
    assert c.passed == {"pass": True, "fail": False, "undecided": None}[status]


def test_exact_criterion_has_zero_width_interval():
    c = Criterion("pairs per trace", threshold=5, comparator=">=", estimate=7)
    assert (c.ci_low, c.ci_high, c.status) == (7, 7, "pass")


@pytest.mark.parametrize("estimate", [None, float("nan"), np.float32("nan")])
def test_missing_estimate_is_undecided(estimate):
    assert Criterion("x", threshold=1, comparator="<", estimate=estimate).status == "undecided"


def test_criterion_rejects_bad_comparator_and_interval():
    with pytest.raises(ValueError, match="comparator"):
        Criterion("x", threshold=1, comparator="==", estimate=1)
    with pytest.raises(ValueError, match="ci_low"):
        Criterion("x", threshold=1, comparator="<", estimate=1, ci_low=2, ci_high=0)


# -----------------------------------------------------------------------------
# the verdict from sets of criteria

PASS = Criterion("p", threshold=0, comparator=">", estimate=1)
FAIL = Criterion("f", threshold=0, comparator=">", estimate=-1)
UNDECIDED = Criterion("u", threshold=0, comparator=">", estimate=0.5, ci_low=-1, ci_high=2)


@pytest.mark.parametrize(
    "criteria, complete, verdict",
    [
        ([PASS], True, "VALIDATED"),
        ([PASS, PASS], True, "VALIDATED"),
        ([FAIL], True, "INVALIDATED"),
        ([FAIL, FAIL], True, "INVALIDATED"),
        ([PASS, FAIL], True, "PARTIAL"),
        ([FAIL, PASS, PASS], True, "PARTIAL"),
        ([UNDECIDED], True, "INCONCLUSIVE"),
        ([PASS, UNDECIDED], True, "INCONCLUSIVE"),
        ([FAIL, UNDECIDED], True, "INCONCLUSIVE"),
        ([PASS, FAIL, UNDECIDED], True, "INCONCLUSIVE"),
        # a run that did not complete is never VALIDATED; nothing else changes
        ([PASS], False, "PARTIAL"),
        ([PASS, PASS], False, "PARTIAL"),
        ([FAIL], False, "INVALIDATED"),
        ([PASS, FAIL], False, "PARTIAL"),
        ([PASS, UNDECIDED], False, "INCONCLUSIVE"),
    ],
)
def test_decide_verdict(criteria, complete, verdict):
    assert decide_verdict(criteria, complete=complete) == verdict


def test_no_criteria_no_verdict():
    with pytest.raises(ValueError):
        decide_verdict([])


# -----------------------------------------------------------------------------
# secrets


@pytest.mark.parametrize(
    "params, key",
    [
        ({"teacher_key": FAKE_KEY}, "teacher_key"),
        ({"token": "hf_abcdefghijklmnopqrstu"}, "token"),
        ({"teachers": [{"model": "x", "auth": "sk-abcdefghijklmnopqrstuvwx"}]}, "teachers[0].auth"),
        ({"api_key": "not-an-env-name"}, "api_key"),
        ({"openrouter": {"API_KEY_ENV": FAKE_KEY}}, "openrouter.API_KEY_ENV"),
    ],
)
def test_redact_params_refuses_keys(params, key):
    with pytest.raises(ValueError) as e:
        report.redact_params(params)
    assert repr(key) in str(e.value)


def test_redact_params_allows_env_var_names():
    params = {"api_key_env": "OPENROUTER_API_KEY", "api_key": None, "model": "sk-short", "loader": "hf_hub"}
    assert report.redact_params(params) == params


# -----------------------------------------------------------------------------
# record() and read_results()


def _record(**overrides):
    kwargs = dict(
        title="Example",
        criteria=[Criterion("cost per trace", threshold=5.0, comparator="<", estimate=3.2, ci_low=2.9, ci_high=3.6),
                  Criterion("pairs", threshold=5, comparator=">=", estimate=np.int64(7))],
        metrics={"cost": np.float64(3.2), "per_teacher": {"a": [1, 2]}, "ok": np.bool_(True)},
        params={"seed": 3, "api_key_env": "OPENROUTER_API_KEY"},
        backend="offline",
        seed=3,
        started=report.start() - 1.5,
    )
    kwargs.update(overrides)
    return report.record("001-example", **kwargs)


def test_record_contract(capsys, monkeypatch):
    monkeypatch.setattr(report, "time", types.SimpleNamespace(time=lambda: 1_767_225_600.0))  # the clock stands still
    r = _record()  # started 1.5 s before the clock's reading
    assert list(r) == ["spike", "title", "verdict", "verdict_rule", "backend", "profile", "dry_run", "criteria", "metrics",
                       "params", "provenance", "notes"]
    assert (r["profile"], r["dry_run"]) == ("notebook", False)  # run by hand: not through `composer run --profile`
    assert (r["spike"], r["verdict"], r["verdict_rule"], r["backend"]) == ("001-example", "VALIDATED", report.VERDICT_RULE, "offline")
    assert r["criteria"][1] == {"name": "pairs", "threshold": 5, "comparator": ">=", "estimate": 7, "ci_low": 7, "ci_high": 7, "passed": True}
    assert r["metrics"] == {"cost": 3.2, "per_teacher": {"a": [1, 2]}, "ok": True}
    prov = r["provenance"]
    assert set(prov) == {"git_sha", "git_dirty", "python", "packages", "hardware", "started_utc", "duration_s", "seed"}
    assert set(prov["packages"]) == set(report.PACKAGES) and prov["packages"]["papermill"] == "2.7.0"
    assert prov["hardware"]["cpu_count"] >= 1 and prov["hardware"]["memory_total_bytes"] > 0
    assert prov["duration_s"] == 1.5 and prov["started_utc"] == "2025-12-31T23:59:58+00:00" and prov["seed"] == 3
    assert json.loads(json.dumps(r, allow_nan=False)) == r
    assert "VALIDATED" in capsys.readouterr().out  # outside a kernel display() prints


def test_record_nan_becomes_null_with_a_note():
    r = _record(criteria=[Criterion("x", threshold=0, comparator=">", estimate=float("nan"))],
                metrics={"loss": [1.0, float("inf")]})
    assert r["verdict"] == "INCONCLUSIVE"
    assert r["criteria"][0]["estimate"] is None and r["metrics"]["loss"] == [1.0, None]
    assert any("criteria[0].estimate" in n for n in r["notes"]) and any("metrics.loss[1]" in n for n in r["notes"])


def test_record_refuses_secrets_bad_backend_and_odd_types():
    with pytest.raises(ValueError, match="api_key"):
        _record(params={"api_key": FAKE_KEY})
    with pytest.raises(ValueError, match="backend"):
        _record(backend="simulated")
    with pytest.raises(TypeError, match="metrics.when"):
        _record(metrics={"when": object()})


def test_record_incomplete_run_is_partial_with_a_note():
    r = _record(complete=False, notes=["latency is simulated"])
    assert r["verdict"] == "PARTIAL"
    assert r["notes"][0] == "latency is simulated" and "did not complete" in r["notes"][1]


def test_read_results_round_trip(tmp_path):
    first, second = _record(), _record(title="Second")
    bundle = lambda r: nbformat.v4.new_output("display_data", data={report.RESULTS_MIME: r, "text/html": "<table></table>"})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=[bundle(first)]), nbformat.v4.new_code_cell("", outputs=[bundle(second)])])
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert report.read_results(tmp_path / "x.ipynb") == second  # the last record() wins
    assert report.read_results(nb) == second
    with pytest.raises(LookupError):
        report.read_results(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]))


def test_provenance_without_git_repository(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "ROOT", tmp_path)
    prov = report.provenance(0, report.start())
    assert prov["git_sha"] is None and prov["git_dirty"] is None


def test_provenance_git_sha_and_dirty_ignoring_reports(tmp_path, monkeypatch):
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "a")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "REPORTS", tmp_path / "reports")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "001.json").write_text("{}")  # a run's own output is not a code change
    prov = report.provenance(0, report.start())
    assert len(prov["git_sha"]) == 40 and prov["git_dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert report.provenance(0, report.start())["git_dirty"] is True


def test_a_git_that_does_not_answer_leaves_the_tree_state_unknown_rather_than_failing_the_run(monkeypatch):
    real = subprocess.run

    def slow_status(cmd, **kw):
        assert kw["env"]["GIT_OPTIONAL_LOCKS"] == "0"  # status must not take the index lock parallel runs share
        if cmd[:2] == ["git", "status"]:
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        return real(cmd, **kw)

    monkeypatch.setattr(report.subprocess, "run", slow_status)
    prov = report.provenance(0, report.start())
    assert len(prov["git_sha"]) == 40 and prov["git_dirty"] is None
    results = {"verdict": None, "profile": "report", "dry_run": False, "criteria": [], "provenance": prov}
    assert "(tree state unknown)" in report._banner_html("t", "offline", results)
    assert verdicts.commit(results) == prov["git_sha"][:7] + "+unknown"


# -----------------------------------------------------------------------------
# plots


def _figures():
    x = np.arange(5)
    return [
        report.interval_plot([("A", 0.4, 0.3, 0.5, 100), ("B", 0.5, 0.42, 0.6, 100)], xlabel="pass@1", title="t", method="bootstrap 95%", seed=0),
        report.ecdf_plot({"opus": [1.0, 2.0, 2.5], "gpt": [0.5, 3.0]}, xlabel="s", title="t"),
        report.curves_plot(x, {"loss": 1 / (x + 1)}, bands_by_label={"loss": (1 / (x + 1) - 0.1, 1 / (x + 1) + 0.1)}, xlabel="step", ylabel="loss", title="t"),
    ]


def test_plots_are_figures_with_byte_stable_png(capsys):
    for first, again in zip(_figures(), _figures()):
        assert isinstance(first, Figure)
        data = report.png(first)
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"Matplotlib" not in data  # no version stamp
        assert report.png(again) == data
        report.show(first)
    assert "Image object" in capsys.readouterr().out  # outside a kernel display() prints


def test_a_criterion_with_a_null_passes_on_its_estimate_and_an_interval_beyond_the_null():
    # 004's rule: B - A >= 2 points with an interval above 0; without a null the same numbers are undecided
    assert Criterion("d", 0.02, ">=", 0.03, ci_low=0.001, ci_high=0.06, null=0.0).status == "pass"
    assert Criterion("d", 0.02, ">=", 0.03, ci_low=0.001, ci_high=0.06).status == "undecided"
    assert Criterion("d", 0.02, ">=", 0.01, ci_low=0.001, ci_high=0.03, null=0.0).status == "undecided"
    assert Criterion("d", 0.02, ">=", 0.03, ci_low=0.0, ci_high=0.06, null=0.0).status == "undecided"  # touches 0
    assert Criterion("d", 0.02, ">=", 0.0, ci_low=-0.01, ci_high=0.019, null=0.0).status == "fail"
    assert Criterion("d", -0.02, "<=", -0.03, ci_low=-0.06, ci_high=-0.001, null=0.0).status == "pass"  # mirrored
    line = report.criterion_line({"name": "d", "estimate": 0.03, "ci_low": 0.001, "ci_high": 0.06,
                                   "comparator": ">=", "threshold": 0.02, "null": 0.0, "passed": True})
    assert line == "d: 0.03 [0.001, 0.06] >= 0.02, interval beyond 0: pass"


def test_a_criterion_short_of_its_stated_minimum_is_undecided_and_says_why(capsys):
    why = report.short_of(0, 12, 0.9, "calls answered")
    assert why == "0 of 12 calls answered, below the stated minimum of 90%"
    assert report.short_of(11, 12, 0.9, "calls answered") is None and report.short_of(10, 12, 0.9, "x") is not None
    assert report.short_of(0, 0, 0.9, "calls answered") == "0 of 0 calls answered, below the stated minimum of 90%"
    cost = Criterion("$/trace", threshold=5, comparator="<", estimate=0.0, undecided_why=why)  # all calls failed: $0
    assert cost.status == "undecided" and Criterion("$/trace", threshold=5, comparator="<", estimate=0.0).passed
    r = _record(criteria=[cost])
    assert r["verdict"] == "INCONCLUSIVE" and r["criteria"][0]["undecided_why"] == why
    assert f"undecided ({why})" in capsys.readouterr().out


def test_too_few_says_smoke_scale():
    assert report.too_few(2, 5, "seeds") == "n = 2 seeds, below the stated minimum of 5: smoke scale"
    assert report.too_few(5, 5, "seeds") is None


def test_the_banner_is_short_and_badges_kind_of_run_with_colours_no_verdict_uses(monkeypatch, capsys):
    monkeypatch.setenv(report.PROFILE_ENV, "report")
    r = _record(dry_run=True, notes=["a note that belongs at the end"])
    banner = report._banner_html("Example", "offline", r)
    assert banner.startswith(f'<div id="{report.BANNER_ID}"') and r["profile"] == "report"
    assert "backend: offline" in banner and "profile: report" in banner and "dry run: nothing sent" in banner
    assert "a note that belongs" not in banner and report.VERDICT_RULE not in banner
    assert not set(report.BADGES.values()) & set(report.COLOURS.values())
    assert "cost per trace: 3.2 [2.9, 3.6] &lt; 5: pass" in banner and "pairs: 7 &gt;= 5: pass" in banner  # exact: no [7, 7]
    table = report._criteria_html(r)
    assert "<th>±</th>" not in table and "<td>3.2 [2.9, 3.6]</td>" in table and "data:image/png;base64," in table
    assert "a note that belongs at the end" in table and report.VERDICT_RULE in table


def test_the_decision_chart_has_a_panel_per_criterion_with_its_threshold():
    rows = [{"name": "a", "estimate": 1.0, "ci_low": 0.5, "ci_high": 1.5, "threshold": 2, "comparator": "<",
             "passed": True}, {"name": "b", "estimate": None, "ci_low": None, "ci_high": None, "threshold": 0,
                               "comparator": ">", "passed": None, "null": 0.1}]
    fig = report.decision_plot(rows)
    a, b = fig.axes
    assert [line.get_xdata()[0] for line in a.lines] == [0.5, 1.0, 2]  # interval, estimate, threshold
    assert [line.get_xdata()[0] for line in b.lines] == [0, 0.1]  # no estimate: the threshold and the null only
    assert a.get_title(loc="left") == "a: pass" and b.get_title(loc="left") == "b: undecided"


def test_the_decision_chart_wraps_long_titles_inside_the_figure_and_says_when_a_panel_has_no_estimate():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [{"name": "step time / its work floor (2.11x GRPO's), all channels, median of 3 rounds", "estimate": 1.5,
             "ci_low": 1.2, "ci_high": 2.4, "threshold": 1.1, "comparator": "<=", "passed": None,
             "undecided_why": "n = 3 benchmark rounds, below the stated minimum of 5: smoke scale"},
            {"name": "p95 wall-clock s/step", "estimate": None, "ci_low": None, "ci_high": None, "threshold": 30,
             "comparator": "<", "passed": None, "undecided_why": "offline: simulated teachers, no latency measured"}]
    fig = report.decision_plot(rows)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    drawn = fig.get_tightbbox(canvas.get_renderer())  # inches, every artist included
    assert drawn.x0 >= 0 and drawn.x1 <= fig.get_figwidth()  # a title run past the right edge widens it
    measured, empty = fig.axes
    assert measured.get_title(loc="left").replace("\n", " ") == f"{rows[0]['name']}: undecided ({rows[0]['undecided_why']})"
    assert not measured.texts and [t.get_text() for t in empty.texts] == ["no estimate to show"]


def test_quiet_rounds_table_floats(monkeypatch):
    import warnings

    import pandas as pd

    monkeypatch.setenv("TQDM_DISABLE", "0")
    with warnings.catch_warnings():
        report.quiet()
        try:
            html_table = pd.DataFrame({"x": [1.080334e-07, 2.3456789]})._repr_html_()
        finally:
            pd.reset_option("display.float_format")
    assert "1.08e-07" in html_table and "2.346" in html_table and "1.080334e-07" not in html_table


def test_plots_show_dollars_and_the_gate():
    fig = report.interval_plot([("a", 3.0, 2.5, 3.9, 10)], xlabel="$/trace (gate: $5)", title="t", method="m", seed=0,
                               threshold=5)
    ax = fig.axes[0]
    assert ax.lines[-1].get_xdata()[0] == 5 and ax.get_legend().get_texts()[0].get_text() == "gate 5"
    assert report.png(fig)  # "$...$" is not parsed as mathtext (it would raise or garble the label)
    assert not matplotlib.rcParams["text.parse_math"]
    steps = report.curves_plot([1, 2], {"A": [0.1, 0.2]}, xlabel="GRPO step", ylabel="r", title="t").axes[0]
    steps.figure.canvas.draw()
    assert [t for t in steps.get_xticks() if 1 <= t <= 2] == [1, 2]  # steps, not 1.25, 1.5, ...
    both = report.interval_plot([("B - A", 0.01, -0.05, 0.07, 120)], xlabel="d", title="t", method="m", seed=0,
                                threshold=0.02, null=0.0).axes[0]
    assert [line.get_xdata()[0] for line in both.lines[-2:]] == [0.0, 0.02]
    assert [t.get_text() for t in both.get_legend().get_texts()] == ["no difference (0)", "gate 0.02"]


def test_committed_reports_come_from_clean_commits_at_report_scale():
    from composer.paths import REPORTS

    committed = sorted(REPORTS.glob("*.json"))
    assert committed, "no committed reports"
    for path in committed:
        r = json.loads(path.read_text())
        prov = r["provenance"]
        assert prov["git_sha"] and prov["git_dirty"] is False, f"{path.name}: made from an uncommitted tree"
        assert r.get("profile", "report") == "report", f"{path.name}: a {r['profile']} run, not the report profile"
