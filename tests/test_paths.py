"""composer.paths.shown: what a report prints for a path."""

from composer.paths import ROOT, shown


def test_shown_is_relative_inside_the_repository_and_never_absolute(tmp_path):
    assert shown(ROOT / "README.md") == "README.md"
    assert shown(ROOT / "data" / "real-traces") == "data/real-traces"
    (tmp_path / "traces.jsonl").write_text("")
    assert shown(tmp_path / "traces.jsonl") == "<outside the repository>/traces.jsonl"
    assert shown(ROOT / "runs" / "not-written-yet.jsonl") == "runs/not-written-yet.jsonl"
    assert shown("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"  # a model name, not a path here
