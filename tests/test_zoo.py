"""The model zoo at its smoke profile: build, cache, report table, and the SFT it rests on.

    .venv/bin/pytest tests/test_zoo.py

The smoke profile trains four very small models on a handful of real demonstrations in seconds;
the report profile (python -m composer.zoo) is never run here.
"""

import io

import pytest

from composer import policies, zoo
from composer.models import build_tokenizer, load_model


pytestmark = pytest.mark.usefixtures("module_cache")


@pytest.fixture(scope="module")
def built():
    zoo.TRAINED.clear()  # earlier tests in this process may have built the smoke zoo in their own cache
    return zoo.zoo("smoke")


def test_smoke_profile_builds_four_models(built):
    paths = built
    assert list(paths) == ["student", "teacher-large", "teacher-medium", "teacher-explorer"]
    assert sorted(zoo.TRAINED) == sorted(paths)
    for name, path in paths.items():
        rec = zoo.info(path)
        assert (path / "model.safetensors").exists() and (path / "tokenizer.json").exists()
        assert rec["spec"]["name"] == name and rec["params"] > 0
        assert [len(v) for v in rec["losses"].values()] == [rec["spec"]["pretrain_steps"], rec["spec"]["sft_steps"],
                                                            rec["spec"]["full_steps"]]
    assert zoo.info(paths["student"])["params"] < min(zoo.info(p)["params"] for n, p in paths.items() if n != "student")


def test_second_call_loads_from_the_cache(built):
    paths = built
    trained, mtimes = list(zoo.TRAINED), {n: (p / "zoo.json").stat().st_mtime for n, p in paths.items()}
    assert zoo.zoo("smoke") == paths
    assert zoo.TRAINED == trained
    assert {n: (p / "zoo.json").stat().st_mtime for n, p in paths.items()} == mtimes


def test_one_model_is_the_same_checkpoint_and_a_bad_name_is_refused(built):
    paths = built
    assert zoo.model("smoke", "student") == paths["student"]
    with pytest.raises(ValueError, match="no model 'teacher' .* student, teacher-large"):
        zoo.model("smoke", "teacher")


def test_report_table_has_the_required_columns(built):
    rows = zoo.report("smoke")
    assert [r["model"] for r in rows] == list(built)
    for r in rows:
        assert set(zoo.COLUMNS) <= set(r)
        assert 0.0 <= r["ci95"][0] <= r["pass@1"] <= r["ci95"][1] <= 1.0 and r["n_tasks"] == zoo.PROFILES["smoke"].n_test
    student = rows[0]
    assert student["role"] == "student" and student["vs_student"] is None and student["above_student"] is None
    for r in rows[1:]:  # the gap is paired over the same tasks and the rule reads its lower bound
        low_high = r["vs_student"][1:]
        assert r["vs_student"][0] == pytest.approx(r["pass@1"] - student["pass@1"])
        assert low_high[0] <= r["vs_student"][0] <= low_high[1] and r["above_student"] == (low_high[0] > 0)
    text = zoo.table(rows)
    for header in ("model", "params", "train_s", "pass@1", "95% CI (Wilson)", "n", "vs student"):
        assert header in text.splitlines()[0]
    assert len(text.splitlines()) == 1 + len(rows)


def test_each_phase_writes_lines_in_a_commands_log(built, tmp_path, monkeypatch):
    """`make reports > log`: making the tasks, the demonstrations and the evaluations each say where they are (not
    only training), from a cache that holds none of them."""
    from composer import progress

    log = io.StringIO()
    monkeypatch.setenv("COMPOSER_CACHE", str(tmp_path))
    monkeypatch.setenv(progress.ENV, "command")
    monkeypatch.setattr("sys.stderr", log)
    smoke = zoo.PROFILES["smoke"]
    zoo.demonstrations(smoke, "clean")
    zoo.evaluation(built["student"], smoke)
    lines = log.getvalue().splitlines()
    for phase, n in (("train tasks", smoke.n_train), ("zoo demonstrations (clean)", smoke.n_train),
                     ("test tasks", smoke.n_test), ("episodes", smoke.n_test)):
        assert any(line.startswith(f"{phase}: 100%") and f" {n}/{n} [" in line for line in lines), (phase, lines)


def test_mask_covers_exactly_what_the_model_generates():
    tokenizer = build_tokenizer()
    messages = [{"role": "system", "content": policies.SYSTEM}, {"role": "user", "content": "Fix it."},
                policies.tool_call_message("run_tests", {}, "c1"), policies.tool_message("1 failed", "c1", "run_tests"),
                policies.tool_call_message("submit", {}, "c2"), policies.tool_message("submitted", "c2", "submit")]
    ids, mask = zoo.encode(tokenizer, messages)
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == (
        '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call><|im_end|>'
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>')
    assert tokenizer.decode(ids) == policies.render(tokenizer, messages)


def test_sft_lowers_the_assistant_token_loss(built):
    paths = built
    tokenizer = build_tokenizer()
    profile = zoo.PROFILES["smoke"]
    demos = zoo.demonstrations(profile, "clean")
    examples = [zoo.encode(tokenizer, d["messages"]) for d in demos]
    path = paths["teacher-large"]
    before = zoo.assistant_loss(load_model(zoo.info(path)["base"]), examples)
    after = zoo.assistant_loss(load_model(path), examples)
    assert after < before - 0.5, (before, after)
    losses = zoo.info(path)["losses"]
    assert losses["full"][-1] < losses["pretrain"][0]


def test_pretraining_windows_come_from_the_library_at_its_share():
    import random

    transcript, library = ([7] * 2000, [1] * 2000), [[2] * 600, [3] * 40]
    def draw(share):
        return [w for w, _ in zoo._batch("pretrain", [transcript], 10, random.Random(0), library, share)]

    assert all(set(w) <= {2, 3} for w in draw(1.0))  # only library code
    assert all(set(w) == {7} for w in draw(0.0))  # only transcripts, past the shared prefix
    assert all(len(w) <= zoo.LM_WINDOW for w in draw(1.0))
