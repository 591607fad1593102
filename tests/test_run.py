"""composer.run and the CLI on fixture notebooks (tests/fixtures/notebooks), reports in tmp_path.

    .venv/bin/pytest tests/test_run.py

Fixtures: 005-tiny records results (VALIDATED with its defaults), 001-boom raises in a cell,
002a-silent finishes without recording. Each execution starts a kernel (~2 s), so checks that
need no kernel call effective_parameters/select directly.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from composer import cli, report, run
from composer.paths import ROOT

# A fake OpenRouter-shaped key, assembled at run time so secret scanners do not flag the test source.
FAKE_KEY = "sk-or-v1-" + "abcdefgh12345678"

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"


def _notebooks(tmp_path, *names):
    """A notebooks dir holding copies of the named fixtures (name -> as-name with name:as)."""
    folder = tmp_path / "notebooks"
    folder.mkdir(exist_ok=True)
    for name in names:
        source, _, target = name.partition(":")
        shutil.copy(FIXTURES / f"{source}.ipynb", folder / f"{target or source}.ipynb")
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One successful run of 005-tiny with its defaults: (reports dir, exit code, stdout)."""
    tmp = tmp_path_factory.mktemp("tiny")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run.run("005", notebooks_dir=_notebooks(tmp, "005-tiny"), reports_dir=tmp / "reports")
    return tmp / "reports", code, out.getvalue()


def test_success_writes_executed_html_json_and_index(tiny):
    reports, code, out = tiny
    assert code == 0
    assert "005-tiny: notebook defaults" in out and "005-tiny: VALIDATED in " in out
    assert sorted(p.name for p in reports.iterdir()) == ["005-tiny", "005-tiny.html", "005-tiny.json", "README.md"]
    assert (reports / "005-tiny" / "executed.ipynb").exists()
    index = (reports / "README.md").read_text()
    assert "| 005-tiny | **VALIDATED** | total: 1.5 [1.4, 1.6] >= 1: pass | offline | default |" in index
    assert "(005-tiny.html)" in index


def test_banner_shows_final_verdict(tiny):
    nb = nbformat.read(tiny[0] / "005-tiny" / "executed.ipynb", as_version=4)
    first = next(out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    banner = first["data"]["text/html"]
    assert "VALIDATED" in banner and "verdict pending" not in banner  # update_display reached the saved notebook
    assert "backend: offline" in banner and "total: 1.5 [1.4, 1.6] &gt;= 1: pass" in banner


def test_html_has_outputs_title_and_no_code(tiny):
    page = (tiny[0] / "005-tiny.html").read_text()
    assert "<title>Tiny spike</title>" in page
    assert "only_in_code_7f3a" not in page and "report.record(" not in page  # --no-input
    assert "data:image/png;base64" in page and "<th>estimate [interval]</th>" in page and "<th>±</th>" not in page
    assert page.index(f'id="{report.BANNER_ID}"') < page.index('<h1 id="Tiny-spike"')  # the verdict before the prose
    assert "profile: default" in page and "backend: offline" in page
    assert "application/vnd.composer.results+json" not in page  # the table renders, not the raw JSON
    assert len(page) < 5_000_000


def test_runs_other_than_the_report_profile_never_write_reports(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(run, "RUN_REPORTS", tmp_path / "runs" / "reports")
    assert run.run("005", notebooks_dir=_notebooks(tmp_path, "005-tiny")) == 0
    assert not (tmp_path / "reports").exists()
    results = json.loads((tmp_path / "runs" / "reports" / "005-tiny.json").read_text())
    assert results["profile"] == "default" and report.PROFILE_ENV not in os.environ  # restored after the run


def test_json_is_the_recorded_results_with_effective_params(tiny):
    results = json.loads((tiny[0] / "005-tiny.json").read_text())
    recorded = report.read_results(tiny[0] / "005-tiny" / "executed.ipynb")
    assert results == recorded  # the notebook passed all its parameters, unchanged
    assert results["verdict"] == "VALIDATED" and [c["passed"] for c in results["criteria"]] == [True, True]
    assert results["params"]["teachers"] == ["a", "b"] and results["provenance"]["duration_s"] > 0


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"stepz": 3}, ["unknown parameter 'stepz'", "did you mean 'steps'?"]),
        ({"xyzzy": 3}, ["unknown parameter 'xyzzy'", "valid: steps, scale"]),
        ({"steps": 0}, ["'steps'", "must be at least 1", "got 0"]),
        ({"scale": 0}, ["'scale'", "must be more than 0, at most 10", "got 0"]),
        ({"scale": 11.5}, ["'scale'", "must be more than 0, at most 10", "got 11.5"]),
        ({"teachers": []}, ["'teachers'", "must be non-empty", "got []"]),
        ({"backend": "livee"}, ["'backend'", "must be offline | live", "got 'livee'"]),
        ({"steps": "five"}, ["'steps'", "expects int", "got str"]),
        ({"steps": True}, ["'steps'", "expects int", "got bool"]),
        ({"teachers": "a"}, ["'teachers'", "expects list"]),
        ({"label": FAKE_KEY}, ["'label'", "API key"]),
        ({"api_key_env": FAKE_KEY}, ["'api_key_env'", "environment variable"]),
    ],
)
def test_bad_parameters_refused_before_anything_runs(tmp_path, capsys, overrides, words):
    reports = tmp_path / "reports"
    reports.mkdir()
    code = run.run("005-tiny", overrides=overrides, notebooks_dir=_notebooks(tmp_path, "005-tiny"), reports_dir=reports)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert all(w in err for w in words), err
    assert list(reports.iterdir()) == []


def test_types_follow_defaults_and_annotations(tmp_path):
    notebooks = _notebooks(tmp_path, "005-tiny")
    check = lambda **o: run.effective_parameters("005-tiny", overrides=o, notebooks_dir=notebooks)[0]
    assert check(scale=2)["scale"] == 2  # an int is a float
    assert check(limit=[1, {"a": 2}])["limit"] == [1, {"a": 2}]  # a None default takes anything
    with pytest.raises(run.UsageError, match="expects float"):
        check(scale="x")
    nb = nbformat.read(notebooks / "005-tiny.ipynb", as_version=4)
    nb.cells[1].source = 'ratio: float = 1  # annotated\nnames: list[str] = []\nmaybe: Optional[int] = None\n'
    nbformat.write(nb, notebooks / "005-tiny.ipynb")
    assert check(ratio=0.5, names=["a"], maybe="anything") == {"ratio": 0.5, "names": ["a"], "maybe": "anything"}
    with pytest.raises(run.UsageError, match="'names' of 005-tiny expects list"):
        check(names="a")


@pytest.mark.parametrize("line, words", [
    ("steps = 0  # {at least 1} how many", "steps's default 0 is not at least 1"),
    ("steps = 1  # {more than 0, at most 2} how many\nscale = 2  # a >= b", "parameter line 'scale = 2  # a >= b'"),
    ("steps = 3  # {1 or more} how many", "{1 or more} is not an allowed-values clause"),
])
def test_a_notebook_whose_clause_is_broken_or_refuses_its_default_is_refused(tmp_path, line, words):
    notebooks = _notebooks(tmp_path, "005-tiny")
    nb = nbformat.read(notebooks / "005-tiny.ipynb", as_version=4)
    nb.cells[1].source = line + "\n"
    nbformat.write(nb, notebooks / "005-tiny.ipynb")
    with pytest.raises(run.UsageError, match=re.escape(words)):
        run.effective_parameters("005-tiny", notebooks_dir=notebooks)


def test_every_spike_declares_typed_parameters_whose_defaults_meet_their_clauses():
    for slug in run.slugs():
        spec = run.notebook_parameters(run.NOTEBOOKS / f"{slug}.ipynb")  # refuses a default outside its clause
        untyped = [name for name, p in spec.items() if p.kind is None and p.default is not None]
        assert not untyped, f"{slug}: parameters without a type: {untyped}"
        assert spec["backend"].allowed == "offline | live", slug
        for profile in run.PROFILES:  # the shipped profiles' values meet the clauses too
            run.effective_parameters(slug, profile=profile)


def test_non_literal_default_refused(tmp_path):
    notebooks = _notebooks(tmp_path, "005-tiny")
    nb = nbformat.read(notebooks / "005-tiny.ipynb", as_version=4)
    nb.cells[1].source = "steps = int('3')\n"
    nbformat.write(nb, notebooks / "005-tiny.ipynb")
    with pytest.raises(run.UsageError, match="not a literal"):
        run.effective_parameters("005-tiny", notebooks_dir=notebooks)


def test_precedence_default_profile_file_cli(tmp_path):
    notebooks = _notebooks(tmp_path, "005-tiny")
    (tmp_path / "params" / "report").mkdir(parents=True)
    (tmp_path / "params" / "report" / "005-tiny.yaml").write_text("steps: 4\nscale: 2\nlabel: profile\n")
    (tmp_path / "mine.yaml").write_text("scale: 3\nlabel: file\n")
    values, defaults = run.effective_parameters(
        "005-tiny", profile="report", params_file=tmp_path / "mine.yaml", overrides={"label": "cli"},
        notebooks_dir=notebooks, params_dir=tmp_path / "params",
    )
    assert (values["steps"], values["scale"], values["label"], values["seed"]) == (4, 3, "cli", 0)
    assert defaults["steps"] == 3
    # the default profile reads no file; a missing profile file is no error
    assert run.effective_parameters("005-tiny", notebooks_dir=notebooks, params_dir=tmp_path / "params")[0]["steps"] == 3
    assert run.effective_parameters("005-tiny", profile="live", notebooks_dir=notebooks, params_dir=tmp_path / "params")[0]["steps"] == 3


def test_bad_yaml_files_name_the_file(tmp_path, capsys):
    notebooks = _notebooks(tmp_path, "005-tiny")
    (tmp_path / "params" / "report").mkdir(parents=True)
    profile = tmp_path / "params" / "report" / "005-tiny.yaml"
    profile.write_text("stepz: 4\n")
    kwargs = dict(notebooks_dir=notebooks, reports_dir=tmp_path / "reports", params_dir=tmp_path / "params")
    assert run.run("005", profile="report", **kwargs) == 2
    assert f"{profile}: unknown parameter 'stepz'" in capsys.readouterr().err
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert run.run("005", params_file=tmp_path / "list.yaml", **kwargs) == 2
    assert "list.yaml: expected a mapping" in capsys.readouterr().err
    assert run.run("005", profile="nightly", **kwargs) == 2
    assert "unknown profile 'nightly'" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()


def test_select_slugs_prefixes_and_run_order(tmp_path):
    for name in ["004-ab", "zz-other", "001-cost", "002b-prime", "010-new", "005-trainer", "003-pairs", "002a-trl"]:
        (tmp_path / f"{name}.ipynb").write_text("{}")
    assert run.slugs(tmp_path) == ["005-trainer", "001-cost", "002a-trl", "002b-prime", "003-pairs", "004-ab", "010-new", "zz-other"]
    assert run.select("002a", tmp_path) == ["002a-trl"]
    assert run.select("004-ab", tmp_path) == ["004-ab"]
    assert run.select("all", tmp_path) == run.slugs(tmp_path)
    with pytest.raises(run.UsageError, match="ambiguous spike '002'; valid: 005-trainer, 001-cost"):
        run.select("002", tmp_path)


def test_unknown_spike_lists_valid_ones(tmp_path, capsys):
    code = run.run("007", notebooks_dir=_notebooks(tmp_path, "005-tiny", "001-boom"), reports_dir=tmp_path / "reports")
    assert code == 2
    assert capsys.readouterr().err == "error: unknown spike '007'; valid: 005-tiny, 001-boom\n"
    assert not (tmp_path / "reports").exists()


def test_failing_cell_keeps_previous_reports(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    good = report.record("001-boom", title="Boom", criteria=[report.Criterion("c", threshold=0, comparator=">", estimate=1)],
                         metrics={}, params={}, backend="offline", seed=0, started=report.start())
    previous = {"001-boom.html": b"<html>good</html>", "001-boom.json": json.dumps(good).encode()}
    for name, data in previous.items():
        (reports / name).write_bytes(data)
    code = run.run("001", notebooks_dir=_notebooks(tmp_path, "001-boom"), reports_dir=reports)
    err = capsys.readouterr().err
    assert code == 1
    assert "001-boom: cell 3 (In [3]) raised ValueError: boom: the fixture fails on purpose" in err
    assert str(reports / "001-boom" / "executed.ipynb") in err
    for name, data in previous.items():
        assert (reports / name).read_bytes() == data
    executed = nbformat.read(reports / "001-boom" / "executed.ipynb", as_version=4)
    assert any(out.output_type == "error" for cell in executed.cells if cell.cell_type == "code" for out in cell.outputs)


def test_all_runs_in_order_and_stops_at_first_failure(tmp_path, capsys):
    reports = tmp_path / "reports"
    notebooks = _notebooks(tmp_path, "005-tiny", "002a-silent", "005-tiny:003-never")
    assert run.run("all", notebooks_dir=notebooks, reports_dir=reports) == 1
    captured = capsys.readouterr()
    assert "005-tiny: VALIDATED" in captured.out
    assert "002a-silent: the notebook recorded no results" in captured.err
    assert (reports / "005-tiny.json").exists() and not (reports / "002a-silent.json").exists()
    assert (reports / "002a-silent" / "executed.ipynb").exists() and not (reports / "003-never").exists()
    assert "| 005-tiny | **VALIDATED** |" in (reports / "README.md").read_text()  # the index still covers what ran
    assert run.run("all", overrides={"seed": 1}, notebooks_dir=notebooks, reports_dir=reports) == 2


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "composer", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_cli_injects_parameters_for_real(tmp_path):
    notebooks = _notebooks(tmp_path, "005-tiny")
    (tmp_path / "mine.yaml").write_text("scale: 0.25\nsteps: 9\n")
    proc = _cli("run", "005", "--notebooks-dir", str(notebooks), "--reports-dir", str(tmp_path / "r"),
                "--params-file", str(tmp_path / "mine.yaml"), "-p", "steps=2", "-p", "teachers=[x, y, z]")
    assert proc.returncode == 0, proc.stderr
    assert "005-tiny: steps=2, scale=0.25, teachers=['x', 'y', 'z']" in proc.stdout
    results = json.loads((tmp_path / "r" / "005-tiny.json").read_text())
    # total = (0 + 1) * 0.25 fails >= 1; three teachers pass >= 2
    assert results["verdict"] == "PARTIAL" and results["metrics"]["total"] == 0.25
    assert results["params"]["teachers"] == ["x", "y", "z"]


def test_cli_exit_codes(tmp_path):
    notebooks = _notebooks(tmp_path, "005-tiny")
    proc = _cli("run", "005", "--notebooks-dir", str(notebooks), "--reports-dir", str(tmp_path / "r"), "-p", "stepz=1")
    assert proc.returncode == 2 and "unknown parameter 'stepz'" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_help_documents_run(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0
    for word in ["--profile", "NAME=VALUE", "--params-file", "--reports-dir", "--notebooks-dir", "executed.ipynb", "exit status", "005, 001, 002a"]:
        assert word in text


def test_help_lists_spikes_benches_and_a_spikes_typed_parameters(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    listed = capsys.readouterr().out + "\n"
    assert all(f"  {slug}\n" in listed for slug in run.slugs())
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "  trainer    ComposerTrainer's overhead" in capsys.readouterr().out
    notebooks = _notebooks(tmp_path, "005-tiny")
    assert cli.main(["run", "005", "--help", "--notebooks-dir", str(notebooks)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("005-tiny: Tiny spike\n")
    assert "  steps (int) = 3 {at least 1}\n      how many integers to sum\n" in text
    assert '  backend (str) = "offline" {offline | live}\n' in text and "  limit (any) = null\n" in text
    assert cli.main(["run", "nope", "-h"]) == 2 and "unknown spike 'nope'" in capsys.readouterr().err


def test_p_needs_name_equals_value(capsys):
    assert cli.main(["run", "005", "-p", "steps"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err


def test_bench_dispatch(tmp_path, monkeypatch, capsys):
    import composer.bench

    (tmp_path / "echo.py").write_text("def main(argv):\n    print(argv)\n    return 7\n")
    monkeypatch.setattr(composer.bench, "__path__", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "composer.bench.echo", raising=False)
    assert cli.main(["bench", "echo", "--n", "3"]) == 7
    assert "['--n', '3']" in capsys.readouterr().out
    assert cli.main(["bench", "nope"]) == 2
    assert capsys.readouterr().err == "error: unknown bench 'nope'; available: echo\n"


def test_a_bench_runs_without_the_notebook_stack(tmp_path):
    """The device check's CUDA image has torch and TRL but no papermill or nbconvert: `bench NAME` must not import
    them (here made unimportable in a fresh interpreter)."""
    (tmp_path / "echo.py").write_text("def main(argv):\n    print(argv)\n    return 7\n")
    code = ("import sys; [sys.modules.__setitem__(m, None) for m in ('papermill', 'nbconvert', 'nbformat')]\n"
            "import composer.bench; composer.bench.__path__ = [sys.argv[1]]\n"
            "from composer import cli; sys.exit(cli.main(['bench', 'echo', '--n', '3']))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 7, done.stderr[-2000:]
    assert done.stdout == "['--n', '3']\n"


def test_the_index_headline_is_the_criterion_that_decides_the_verdict(tmp_path):
    prov = {"git_sha": "abc1234def", "git_dirty": False, "started_utc": "2026-12-01T00:00:00+00:00"}
    rows = [{"name": "tests failed", "estimate": 0, "ci_low": 0, "ci_high": 0, "comparator": "<=", "threshold": 0,
             "passed": True},
            {"name": "overhead", "estimate": 1.5, "ci_low": 0.9, "ci_high": 2.0, "comparator": "<=", "threshold": 1.2,
             "passed": None}]
    for slug, criteria in (("005-x", rows), ("001-y", rows[:1])):
        (tmp_path / f"{slug}.json").write_text(json.dumps({"spike": slug, "verdict": "V", "criteria": criteria,
                                                           "backend": "offline", "profile": "report",
                                                           "provenance": prov}))
    run.write_index(tmp_path)
    index = (tmp_path / "README.md").read_text()
    assert "| 005-x | **V** | overhead: 1.5 [0.9, 2] <= 1.2: undecided | offline | report |" in index
    assert "| 001-y | **V** | tests failed: 0 <= 0: pass |" in index
