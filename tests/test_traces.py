"""Trace schema, JSONL writer/reader, crash repair and the mini-swe-agent importer (on the 23 real traces)."""

import importlib.util
import json
import shutil
from pathlib import Path

import jinja2.sandbox
import jsonschema
import pytest

from composer import traces
from composer.paths import ROOT
from composer.traces import SCHEMA_VERSION, StepRecord, TraceError, TraceWriter

RUN = traces.MINI_SWE_AGENT_RUN


def record(trace_id="t0", step=0, **overrides) -> dict:
    rec = {
        "schema_version": SCHEMA_VERSION,
        "trace_id": trace_id,
        "step": step,
        "state": {"messages": [{"role": "user", "content": "fix the bug"}], "env": {"cwd": "/testbed"}},
        "action": {
            "text": "ls",
            "tool_call": {"name": "bash", "arguments": {"command": "ls"}, "id": "c0"},
            "token_ids": [1, 2, 3],
            "logprobs": [-0.1, -0.2, -0.3],
            "mask": [1, 1, 0],
        },
        "observation": "<returncode>0</returncode>",
        "reward": None,
        "done": False,
        "truncated": False,
        "source": "composer-embedded",
    }
    rec.update(overrides)
    return rec


def write_lines(path, *lines: str):
    path.write_bytes("".join(lines).encode())


def line(**kw) -> str:
    return json.dumps(record(**kw)) + "\n"


# --- writer / reader -------------------------------------------------------------------------


def test_round_trip(tmp_path):
    path = tmp_path / "runs" / "traces.jsonl"
    last = record(step=1, reward=1.0, done=True, outcome={"resolved": True})
    written = [StepRecord.model_validate(record(step=0)), last]  # a model or a plain dict
    with TraceWriter(path) as w:
        assert w.repaired is None
        for r in written:
            w.write(r)
    back = traces.import_jsonl(path)
    assert back == [StepRecord.model_validate(r) if isinstance(r, dict) else r for r in written]
    assert path.read_bytes().count(b"\n") == 2
    assert list(traces.group_traces(back)) == ["t0"]


def test_writer_appends_by_default_and_resume_false_starts_afresh(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(record(step=0))
    with TraceWriter(path) as w:
        w.write(record(step=1))
    assert [r.step for r in traces.read_traces(path)] == [0, 1]
    with TraceWriter(path, resume=False) as w:
        w.write(record(step=7))
    assert [r.step for r in traces.read_traces(path)] == [7]


def test_writer_refuses_invalid_records_and_writes_nothing(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(record(step=0))
        before = path.read_bytes()
        with pytest.raises(TraceError, match=r"t\.jsonl: record not written: step: Input should be a valid integer"):
            w.write(record(step="1"))
        with pytest.raises(TraceError, match=r"unsupported schema_version '0\.9'"):
            w.write(record(schema_version="0.9"))
        ok = StepRecord.model_validate(record(step=1))
        ok.reward = float("nan")  # mutated after validation: caught when re-validating the line to write
        with pytest.raises(TraceError, match="reward: Input should be a finite number"):
            w.write(ok)
    assert path.read_bytes() == before


BAD_LINES = {
    "bad JSON": ('{"schema_version": "1.0", "trace_id": \n', "invalid JSON: Expecting value"),
    "wrong type": (line(step="three"), "step: Input should be a valid integer (got 'three')"),
    "negative step": (line(step=-1), "step: Input should be greater than or equal to 0"),
    "missing field": (json.dumps({k: v for k, v in record().items() if k != "observation"}) + "\n", "observation: Field required"),
    "missing nested field": (line(state={"env": {}}), "state.messages: Field required"),
    "extra field": (line(rewards=[1.0]), "rewards: Extra inputs are not permitted"),
    "extra nested field": (line(action={"text": "x", "tool": "bash"}), "action.tool: Extra inputs are not permitted"),
    "unknown schema_version": (line(schema_version="2.0", new_field=1), "unsupported schema_version '2.0' (this reader supports '1.0')"),
    "not an object": ("[1, 2]\n", "expected a JSON object, got list"),
    "empty line": ("\n", "empty line"),
    "non-finite reward": (line().replace('"reward": null', '"reward": NaN'), "reward: Input should be a finite number"),
    "per-token arrays": (line(action={"text": "x", "token_ids": [1, 2], "logprobs": [-1.0]}), "per-token arrays differ in length"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_line_names_file_line_and_reason(tmp_path, case):
    bad, reason = BAD_LINES[case]
    path = tmp_path / "t.jsonl"
    write_lines(path, line(step=0), bad, line(step=1))
    with pytest.raises(TraceError) as info:
        list(traces.read_traces(path))
    assert str(info.value) == f"{path}:2: " + info.value.reason
    assert reason in info.value.reason
    assert (info.value.path, info.value.lineno) == (path, 2)


def test_torn_last_line_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    write_lines(path, line(step=0), line(step=1), line(step=2)[:40])
    with pytest.raises(TraceError, match=rf"^{path}:3: torn last line \(no trailing newline; invalid JSON"):
        list(traces.read_traces(path))


def test_complete_last_record_without_newline_is_accepted(tmp_path):
    path = tmp_path / "t.jsonl"
    write_lines(path, line(step=0), line(step=1).rstrip("\n"))
    assert [r.step for r in traces.read_traces(path)] == [0, 1]


def test_collect_keeps_good_lines_and_lists_bad(tmp_path):
    path = tmp_path / "t.jsonl"
    write_lines(path, line(step=0), "oops\n", line(step=1), line(extra=1), line(step=2), line(step=3)[:30])
    reader = traces.read_traces(path, on_error="collect")
    assert [r.step for r in reader] == [0, 1, 2]
    assert [(p.lineno, p.path) for p in reader.problems] == [(2, path), (4, path), (6, path)]
    assert "torn last line" in reader.problems[-1].reason


def test_reader_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace file"):
        traces.read_traces(tmp_path / "missing.jsonl")
    (tmp_path / "t.jsonl").write_text("")
    with pytest.raises(ValueError, match="on_error"):
        traces.read_traces(tmp_path / "t.jsonl", on_error="ignore")


# --- crash and resume ------------------------------------------------------------------------


def test_resume_truncates_a_torn_tail_and_reports_it(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(record(step=0))
        w.write(record(step=1))
    intact = path.read_bytes()
    with open(path, "ab") as f:  # the crash: half a record, no newline
        f.write(line(step=2)[:100].encode())
    with pytest.warns(UserWarning, match="truncated a torn last line"):
        w = TraceWriter(path)
    assert w.repaired.startswith(f"{path}:3: truncated a torn last line (100 bytes")
    assert path.read_bytes() == intact  # nothing else lost
    with w:
        w.write(record(step=2))
    assert [r.step for r in traces.read_traces(path)] == [0, 1, 2]


def test_resume_after_crash_inside_a_long_line(tmp_path):
    # Lines much longer than the tail-scan chunk, and garbage (zeros) instead of a clean prefix.
    path = tmp_path / "t.jsonl"
    big = [{"role": "tool", "content": "x" * 200_000}]
    with TraceWriter(path) as w:
        for step in range(3):
            w.write(record(step=step, state={"messages": big}))
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(line(step=3, state={"messages": big}).encode()[:150_000] + b"\0" * 5000)
    with pytest.warns(UserWarning):
        w = TraceWriter(path)
    w.close()
    assert w.repaired.startswith(f"{path}:4: truncated")
    assert path.read_bytes() == intact


def test_resume_adds_a_missing_newline_without_losing_the_record(tmp_path):
    path = tmp_path / "t.jsonl"
    write_lines(path, line(step=0), line(step=1).rstrip("\n"))
    with pytest.warns(UserWarning, match="appended one"):
        with TraceWriter(path) as w:
            w.write(record(step=2))
    assert w.repaired.startswith(f"{path}:2: the last record had no trailing newline")
    assert [r.step for r in traces.read_traces(path)] == [0, 1, 2]


def test_resume_on_clean_or_empty_file_reports_nothing(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("")
    with TraceWriter(path) as w:
        assert w.repaired is None
        w.write(record())
    with TraceWriter(path) as w:
        assert w.repaired is None


# --- grouping --------------------------------------------------------------------------------


def test_group_traces_sorts_and_checks_contiguity():
    order = [("b", 2), ("a", 0), ("b", 0), ("b", 1)]
    recs = [StepRecord.model_validate(record(trace_id=t, step=s, done=(s == 2))) for t, s in order]
    groups = traces.group_traces(recs)
    assert {k: [r.step for r in v] for k, v in groups.items()} == {"b": [0, 1, 2], "a": [0]}
    assert groups.problems == []

    gap = [StepRecord.model_validate(record(step=s)) for s in (0, 2, 2, 4)]
    with pytest.raises(TraceError, match=r"trace 't0': steps are not 0\.\.3: missing \[1, 3\], duplicated \[2\]"):
        traces.group_traces(gap)
    early = [StepRecord.model_validate(record(step=s, done=s == 0)) for s in (0, 1)]
    with pytest.raises(TraceError, match="done at step 0 but the trace continues to step 1"):
        traces.group_traces(early)

    groups = traces.group_traces(recs + [StepRecord.model_validate(record(trace_id="c", step=1))], on_error="collect")
    assert sorted(groups) == ["a", "b"]
    assert [str(p) for p in groups.problems] == ["trace 'c': steps are not 0..0: missing [0], duplicated []"]


# --- JSON Schema -----------------------------------------------------------------------------


def test_committed_schema_file_is_up_to_date(tmp_path):
    fresh = tmp_path / "trace.schema.json"
    traces.export_json_schema(fresh)
    assert fresh.read_bytes() == traces.SCHEMA_PATH.read_bytes(), \
        "stale: run `python -c 'from composer import traces; traces.export_json_schema()'`"


def test_json_schema_agrees_with_the_model():
    schema = json.loads(traces.SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    full = record(error="boom", task_id="x", outcome={"resolved": False}, meta={"seed": 0})
    minimal = {k: v for k, v in record(action={"text": "hi"}, state={"messages": []}).items()}
    for good in (full, minimal):
        StepRecord.model_validate(good)
        validator.validate(json.loads(StepRecord.model_validate(good).model_dump_json()))
    bad = [
        {k: v for k, v in full.items() if k != "done"},
        {**full, "surprise": 1},
        {**full, "schema_version": "2.0"},
        {**full, "step": "0"},
        {**full, "step": -1},
        {**full, "trace_id": ""},
        {**full, "action": {"text": "x", "tool_call": {"name": "bash"}}},
        {**full, "state": {"messages": ["not a dict"]}},
    ]
    for b in bad:
        with pytest.raises(Exception):
            StepRecord.model_validate(b)
        assert not validator.is_valid(b), b


# --- mini-swe-agent importer -----------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir():
    d = traces.real_traces_dir() / RUN  # shipped in the repository: a clone anywhere has it
    assert d.is_dir() and (d.parent / "README.md").is_file()
    return d


@pytest.fixture(scope="module")
def real(run_dir):
    return traces.group_traces(traces.import_real_traces())


@pytest.fixture(scope="module")
def raw(run_dir):
    return {p.name.removesuffix(".traj.json"): json.loads(p.read_text()) for p in sorted(run_dir.glob("*.traj.json"))}


def test_real_traces_one_step_per_assistant_turn(real, raw):
    assert len(real) == 23 and set(real) == set(raw)
    counts = {k: len(v) for k, v in real.items()}
    assert counts == {k: sum(m["role"] == "assistant" for m in t["messages"]) for k, t in raw.items()}
    assert min(counts.values()) == 48 and max(counts.values()) == 176 and sum(counts.values()) == 1843
    assert not real.problems  # contiguous 0..n-1, done only at the end


def test_real_traces_actions_observations_and_states(real, raw):
    for task_id, steps in real.items():
        msgs = [m for m in raw[task_id]["messages"] if m["role"] != "exit"]
        turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        for rec, i in zip(steps, turns):
            src = msgs[i]
            assert (rec.trace_id, rec.task_id, rec.source) == (task_id, task_id, "mini-swe-agent")
            if src.get("tool_calls"):
                call = rec.action.tool_call
                assert call is not None and call.name == "bash" and call.id == src["tool_calls"][0]["id"]
                assert call.arguments["command"] == src["extra"]["actions"][0]["command"]
                arguments = src["tool_calls"][0]["function"]["arguments"]
                block = '<tool_call>\n{"name": "bash", "arguments": ' + arguments + "}\n</tool_call>"
                assert rec.action.text == (src["content"] + "\n" if src["content"] else "") + block
            # state: exactly the chat before the turn, in OpenAI format
            assert len(rec.state.messages) == i
            assert [m["role"] for m in rec.state.messages] == [m["role"] for m in msgs[:i]]
            assert [m["content"] for m in rec.state.messages] == [m["content"] for m in msgs[:i]]
            assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in rec.state.messages)
            assert rec.meta["model"] == "deepseek/deepseek-chat" and rec.meta["usage"]["prompt_tokens"] > 0
        for rec in steps[:-1]:
            assert rec.observation.startswith(("<returncode>", "<exception>"))
            assert rec.state.messages[-1]["role"] in ("tool", "user") and rec.reward is None and rec.outcome is None


def test_action_text_is_what_the_qwen3_chat_template_renders(real):
    # The text a Qwen3 student would have to emit for the same turn (TRL's template, rendered as HF does).
    template = Path(importlib.util.find_spec("trl").submodule_search_locations[0]) / "chat_templates" / "qwen3.jinja"
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    steps = real["pydicom__pydicom-1256"]
    rendered = env.from_string(template.read_text()).render(messages=steps[-1].state.messages)
    for rec in steps[:-1]:
        assert f"<|im_start|>assistant\n{rec.action.text}<|im_end|>" in rendered


def test_real_traces_outcomes_match_the_harness_report(real, run_dir):
    report = json.loads((run_dir / "swebench-eval-report.json").read_text())
    last = {k: v[-1] for k, v in real.items()}
    assert {k for k, r in last.items() if r.outcome["resolved"]} == set(report["resolved_ids"])
    assert len(report["resolved_ids"]) == 8
    for r in last.values():
        assert r.done and not r.truncated and r.observation is None
        assert r.reward == float(r.outcome["resolved"]) and r.outcome["exit_status"] == "Submitted"
        assert r.outcome["submission"].startswith("diff --git")
    # The one command that timed out inside the run shows up as that step's error.
    errors = [(k, r.step) for k, v in real.items() for r in v if r.error]
    assert len(errors) == 1 and errors[0][0] == "pydicom__pydicom-1256"


def test_real_trace_round_trip_and_json_schema(real, tmp_path):
    steps = real["sqlfluff__sqlfluff-2419"]
    with TraceWriter(tmp_path / "t.jsonl") as w:
        for r in steps:
            w.write(r)
    assert traces.import_jsonl(tmp_path / "t.jsonl") == steps
    validator = jsonschema.Draft202012Validator(json.loads(traces.SCHEMA_PATH.read_text()))
    for r in (steps[0], steps[-1]):
        validator.validate(json.loads(r.model_dump_json()))


def test_a_missing_traces_folder_fails_loudly_naming_it(tmp_path):
    assert traces.real_traces_dir() == ROOT / "data" / "real-traces"
    with pytest.raises(FileNotFoundError, match="real traces not found at .*nowhere"):
        traces.import_real_traces(tmp_path / "nowhere")


def edited_traj(run_dir, tmp_path, edit, name="sqlfluff__sqlfluff-2419"):
    traj = json.loads((run_dir / f"{name}.traj.json").read_text())
    edit(traj)
    path = tmp_path / f"{name}.traj.json"
    path.write_text(json.dumps(traj))
    return path


def test_importer_limits_crashes_and_unusual_turns(run_dir, tmp_path):
    def exit_with(status):
        def edit(traj):
            traj["info"]["exit_status"] = status
        return edit

    last = traces.import_mini_swe_agent(edited_traj(run_dir, tmp_path, exit_with("LimitsExceeded")))[-1]
    assert last.truncated and last.done and last.error is None and last.reward is None
    assert last.outcome["resolved"] is None and last.outcome["exit_status"] == "LimitsExceeded"
    last = traces.import_mini_swe_agent(edited_traj(run_dir, tmp_path, exit_with("RuntimeError")))[-1]
    assert not last.truncated and last.error == "the run ended with exit status RuntimeError"

    def text_based(traj):  # backtick configs: no tool_calls, the command only in extra.actions
        for m in traj["messages"]:
            if m["role"] == "assistant":
                m["tool_calls"] = None
    steps = traces.import_mini_swe_agent(edited_traj(run_dir, tmp_path, text_based))
    assert steps[0].action.tool_call.arguments["command"].startswith("find . -type f")
    assert "<tool_call>" not in steps[0].action.text

    def two_calls(traj):
        m = traj["messages"][2]
        m["tool_calls"] = m["tool_calls"] * 2
    with pytest.raises(TraceError, match="assistant turn 0 has 2 tool calls"):
        traces.import_mini_swe_agent(edited_traj(run_dir, tmp_path, two_calls))

    def old_format(traj):
        traj["trajectory_format"] = "mini-swe-agent-1"
    with pytest.raises(TraceError, match="unsupported trajectory_format 'mini-swe-agent-1'"):
        traces.import_mini_swe_agent(edited_traj(run_dir, tmp_path, old_format))


def test_exit_status_yaml_must_agree(run_dir, tmp_path):
    name = "sqlfluff__sqlfluff-2419"
    shutil.copy(run_dir / f"{name}.traj.json", tmp_path)
    shutil.copy(run_dir / "swebench-eval-report.json", tmp_path)
    (tmp_path / "exit_statuses_100.0.yaml").write_text(f"instances_by_exit_status:\n  LimitsExceeded:\n  - {name}\n")
    with pytest.raises(TraceError, match="exit status 'Submitted', but the run's exit_statuses yaml says 'LimitsExceeded'"):
        traces.import_real_traces(tmp_path)
    # a later re-run's file wins
    (tmp_path / "exit_statuses_200.0.yaml").write_text(f"instances_by_exit_status:\n  Submitted:\n  - {name}\n")
    steps = traces.import_real_traces(tmp_path)
    assert steps[-1].outcome == {**steps[-1].outcome, "resolved": True, "exit_status": "Submitted"}


def test_import_keeps_going_past_bad_files_naming_each(run_dir, tmp_path):
    good = ["marshmallow-code__marshmallow-1343", "marshmallow-code__marshmallow-1359"]
    for name in good:
        (tmp_path / name).mkdir()  # mini-swe-agent's own layout: <run>/<id>/<id>.traj.json
        shutil.copy(run_dir / f"{name}.traj.json", tmp_path / name)
    (tmp_path / "aaa-empty.traj.json").write_text("")
    (tmp_path / "bbb-torn.traj.json").write_text('{"trajectory_format": "mini-swe-agent-1.1", "messa')
    (tmp_path / "ccc-no-info.traj.json").write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1",
                                                                "messages": []}))
    records = traces.import_real_traces(tmp_path)
    assert sorted({r.trace_id for r in records}) == good
    assert not records.outcomes_known and all(r.outcome["resolved"] is None for r in records if r.done)
    reasons = {Path(f).name: why for f, why in records.skipped.items()}
    assert reasons["aaa-empty.traj.json"] == "an empty file"
    assert reasons["bbb-torn.traj.json"].startswith("not a JSON trajectory (Unterminated string")
    assert reasons["ccc-no-info.traj.json"] == "a mini-swe-agent-1.1 field is missing or malformed (KeyError: 'info')"
    shutil.copy(run_dir / "swebench-eval-report.json", tmp_path)  # with the harness report: outcomes known
    again = traces.import_real_traces(tmp_path)
    assert again.outcomes_known and {r.outcome["resolved"] for r in again if r.done} <= {True, False}
    assert again.sha256 != records.sha256 and again.sha256 == traces.import_real_traces(tmp_path).sha256


def test_a_folder_with_nothing_importable_names_its_files(tmp_path):
    (tmp_path / "x.traj.json").write_text("[]")
    with pytest.raises(TraceError, match=r"no trace could be imported \(x.traj.json: unsupported trajectory_format 'list'"):
        traces.import_real_traces(tmp_path)
    (tmp_path / "x.traj.json").unlink()
    with pytest.raises(TraceError, match="no .traj.json files"):
        traces.import_real_traces(tmp_path)


def test_load_traces_reads_every_kind_of_source(run_dir, tmp_path):
    one = traces.load_traces(run_dir / "marshmallow-code__marshmallow-1343.traj.json")
    assert {r.trace_id for r in one} == {"marshmallow-code__marshmallow-1343"} and not one.outcomes_known
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_bytes(b"".join(r.model_dump_json().encode() + b"\n" for r in one[:3]) + b"not json\n")
    loaded = traces.load_traces(jsonl)
    assert loaded == one[:3] and list(loaded.skipped) == [f"{jsonl}:4"] and len(loaded.sha256) == 64
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(TraceError, match=r"empty.jsonl: no trace records \(0 unreadable lines; the file is empty\)"):
        traces.load_traces(tmp_path / "empty.jsonl")
    (tmp_path / "bad.jsonl").write_text("{}\n")
    with pytest.raises(TraceError, match=r"bad.jsonl: no trace records \(1 unreadable lines; the first: "):
        traces.load_traces(tmp_path / "bad.jsonl")
    with pytest.raises(FileNotFoundError, match="traces not found at .*nowhere: expected \"real\""):
        traces.load_traces(tmp_path / "nowhere")
    assert len(traces.load_traces("real")) == len(traces.import_real_traces())


def test_preview_cuts_long_messages_and_token_arrays_saying_how_much(run_dir):
    record = traces.import_mini_swe_agent(run_dir / "marshmallow-code__marshmallow-1343.traj.json")[3]
    record = record.model_copy(update={"action": record.action.model_copy(
        update={"token_ids": list(range(100)), "mask": [True] * 100, "logprobs": [-0.5] * 100})})
    shown = traces.preview(record, chars=50, tokens=4)
    assert shown["action"]["token_ids"] == [0, 1, 2, 3, "... [96 more]"] and shown["action"]["mask"][-1] == "... [96 more]"
    long = [m["content"] for m in shown["state"]["messages"] if "more characters]" in m["content"]]
    assert long and all(c.split(" ... [")[0] == c[:50] for c in long)
    assert record.action.token_ids == list(range(100))  # the record itself is untouched
