"""The coding environment in-process and as a TRL environment_factory: tools, rewards, hostile input, traces.

    .venv/bin/pytest tests/test_env_environment.py

Tasks are real embedded tasks (tasks.generate) and every test run is a real sandboxed pytest run; the
gold fix comes from the task's gold patch (gold_edits), so a reward of 1.0 means the hidden tests passed.
"""

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from composer import traces
from composer.env import tools
from composer.env.containment import sandbox
from composer.env.defences import layers
from composer.env.embedded import tasks
from composer.env.containment.worker import PytestWorker
from composer.env.environment import (
    TOOLS,
    CodingAction,
    CodingEnv,
    EnvConfig,
    TRLCodingEnv,
    env_reward,
    gold_edits,
    tool_schemas,
)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0)


@pytest.fixture
def env(records):
    env = CodingEnv(records)
    env.reset(instance=records[0])
    yield env
    env.close()


def graded(record) -> tuple[list[str], list[str]]:
    return json.loads(record["FAIL_TO_PASS"]), json.loads(record["PASS_TO_PASS"])


def module_of(record) -> str:
    return gold_edits(record)[0]["path"]


# ---------------------------------------------------------------- file tools on a plain folder


def test_view_numbers_lines_and_pages(tmp_path):
    (tmp_path / "a.py").write_text("".join(f"line {i}\n" for i in range(1, 301)))
    page = tools.view(tmp_path, "a.py", max_lines=200)
    assert page.splitlines()[1] == "  1 | line 1" and "200 | line 200" in page and "start=201" in page
    assert tools.view(tmp_path, "a.py", 5, 6) == "a.py (lines 5-6 of 300)\n5 | line 5\n6 | line 6"
    assert "299 | line 299\n300 | line 300" in tools.view(tmp_path, "a.py", 299, 999)
    for start, end, message in [(0, None, "outside"), (301, None, "outside"), (5, 4, "before")]:
        with pytest.raises(tools.ToolError, match=message):
            tools.view(tmp_path, "a.py", start, end)


def test_edit_replaces_inserts_deletes_and_creates(tmp_path):
    (tmp_path / "a.py").write_text("one\ntwo\nthree\n")
    tools.edit(tmp_path, "a.py", 2, 2, "TWO\n2b", max_bytes=100)
    assert (tmp_path / "a.py").read_text() == "one\nTWO\n2b\nthree\n"
    tools.edit(tmp_path, "a.py", 1, 0, "zero\n", max_bytes=100)  # end = start - 1 inserts
    tools.edit(tmp_path, "a.py", 6, 5, "four\n", max_bytes=100)  # one past the end appends
    tools.edit(tmp_path, "a.py", 3, 4, "", max_bytes=100)  # "" deletes
    assert (tmp_path / "a.py").read_text() == "zero\none\nthree\nfour\n"
    tools.edit(tmp_path, "pkg/new.py", 1, 0, "x = 1\n", max_bytes=100)
    assert (tmp_path / "pkg/new.py").read_text() == "x = 1\n"
    for args, message in [(("a.py", 9, 9, ""), "outside"), (("a.py", 2, 7, ""), "end=7"),
                          (("gone.py", 1, 1, "x"), "no such file"), (("a.py", 1, 1, "x" * 101), "limit is 100"),
                          (("a.py", 1, 1, "a\0b"), "NUL"), (("a.py", 1, 1, "\ud800"), "UTF-8"),
                          # names patch reads otherwise than grading never enter a diff: edit will not create them
                          (("conftest.py x", 1, 0, "x = 1\n"), "unsupported file name"),
                          (("tests/a\u2028b.py", 1, 0, "x = 1\n"), "unsupported file name")]:
        with pytest.raises(tools.ToolError, match=message):
            tools.edit(tmp_path, *args, max_bytes=100)
    assert (tmp_path / "a.py").read_text() == "zero\none\nthree\nfour\n"
    assert not (tmp_path / "conftest.py x").exists() and not (tmp_path / "tests").exists()


def test_edit_never_writes_through_a_hard_link(tmp_path):
    outside = tmp_path / "host.txt"
    outside.write_text("host\n")
    (tmp_path / "repo").mkdir()
    os.link(outside, tmp_path / "repo" / "linked.txt")  # what the agent's own code could plant
    tools.edit(tmp_path / "repo", "linked.txt", 1, 1, "agent\n", max_bytes=100)
    assert outside.read_text() == "host\n" and (tmp_path / "repo" / "linked.txt").read_text() == "agent\n"


def test_search_lists_list_files_and_bounds(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("x = f()\n" * 80)
    (tmp_path / "blob.bin").write_bytes(b"def \0\xff")
    assert tools.search(tmp_path, r"def \w+") == "a.py:1: def f():\na.py:4: def g():"
    assert tools.search(tmp_path, "f\\(", "sub", max_matches=3).endswith("(stopped at 3 matches)")
    assert tools.search(tmp_path, "nothing_here").startswith("no matches")
    with pytest.raises(tools.ToolError, match="regular expression"):
        tools.search(tmp_path, "(")
    (tmp_path / "slow.txt").write_text("a" * 100_000 + "b\n")
    start = time.monotonic()  # a backtracking engine never ends on this (2^50,000 ways); RE2 is linear in the text
    assert tools.search(tmp_path, "^(a|aa)+$", "slow.txt").startswith("no matches")
    with pytest.raises(tools.ToolError, match="too large"):
        tools.search(tmp_path, "((((a{100}){100}){100}){100})")  # compiling it would take gigabytes
    assert time.monotonic() - start < 60  # a hang guard: milliseconds with RE2
    assert tools.list_files(tmp_path) == "a.py\nblob.bin\nslow.txt\nsub/b.py"
    assert tools.list_files(tmp_path, limit=2).endswith("(2 more; list a subdirectory)")


def test_repo_diff_applies_back_onto_the_original(tmp_path):
    before_dir, after_dir = tmp_path / "before", tmp_path / "after"
    for d in (before_dir, after_dir):
        (d / "pkg").mkdir(parents=True)
        (d / "pkg" / "keep.py").write_text("a = 1\nb = 2\n")
        (d / "pkg" / "gone.py").write_text("old\n")
        (d / "tests.py").write_text("t\n")
    (after_dir / "pkg" / "keep.py").write_text("a = 1\nb = 3")  # no final newline
    (after_dir / "pkg" / "gone.py").unlink()
    (after_dir / "pkg" / "new.py").write_text("new\n")
    (after_dir / "tests.py").write_text("changed\n")
    (after_dir / "image.bin").write_bytes(b"\0\1")
    diff, left_out = tools.repo_diff(tools.snapshot(before_dir), after_dir, exclude={"tests.py"})
    assert left_out == ["image.bin"] and "tests.py" not in diff
    tools.apply_patch(before_dir, diff, max_bytes=10_000)
    assert (before_dir / "pkg" / "keep.py").read_text() == "a = 1\nb = 3"
    assert (before_dir / "pkg" / "new.py").read_text() == "new\n" and not (before_dir / "pkg" / "gone.py").exists()
    assert (before_dir / "tests.py").read_text() == "t\n"


# ---------------------------------------------------------------- episodes


def test_reset_picks_the_task_and_gives_a_private_copy(records):
    env = CodingEnv(records)
    obs = env.reset(instance=records[0])
    assert records[0]["problem_statement"].strip() in obs.text and "submit()" in obs.text
    assert f"{module_of(records[0])}\n" in obs.text and "tests/test_" in obs.text  # the file list, tests visible
    assert obs.info.step == 0 and not obs.done and obs.reward is None
    assert obs.info.instance_id == records[0]["instance_id"]
    first = env.repo
    assert Path(tempfile.gettempdir()).resolve() in first.resolve().parents
    assert env.reset(seed=1).info.instance_id == records[1]["instance_id"] and not first.exists()
    assert [env.reset().info.instance_id for _ in range(2)] == [r["instance_id"] for r in records]  # round robin
    assert env.reset(instance_id=records[1]["instance_id"], episode_id="e1").info.episode_id == "e1"
    assert env.state.instance_id == records[1]["instance_id"] and env.state.step_count == 0
    with pytest.raises(ValueError, match="no task"):
        env.reset(instance_id="nope")
    with pytest.raises(ValueError, match="missing field"):
        env.reset(instance={"instance_id": "x"})
    last = env.repo
    env.close()
    assert not last.exists() and env.repo is None
    assert CodingEnv().step(CodingAction(tool="list_files")).info.error.startswith("no episode")


def test_gold_fix_is_rewarded_and_traced(records, tmp_path):
    record = records[0]
    f2p, p2p = graded(record)
    env = CodingEnv(records, trace_path=tmp_path / "traces.jsonl")
    env.reset(instance=record, episode_id="ep0")
    obs = env.call("run_tests")
    assert obs.info.ok and obs.info.tests == {**{t: False for t in f2p}, **{t: True for t in p2p}}
    assert f"{len(f2p)} of {len(f2p) + len(p2p)} tests failed" in obs.text
    assert env.call("view", path=module_of(record)).info.ok
    for edit in gold_edits(record):
        obs = env.call("edit", **edit)
        assert obs.info.ok, obs.text
    assert all(env.call("run_tests").info.tests.values())
    assert env.diff().startswith(f"diff --git a/{module_of(record)}")
    obs = env.call("submit")
    assert (obs.reward, obs.done, obs.info.done, obs.info.truncated) == (1.0, True, True, False)
    assert obs.info.tests == dict.fromkeys(f2p + p2p, True) and "resolved" in obs.text
    late = env.call("list_files")
    assert late.done and not late.info.ok and late.info.step == obs.info.step  # not counted
    assert env.state.submitted and env.state.reward == 1.0
    env.close()

    steps = traces.group_traces(traces.read_traces(tmp_path / "traces.jsonl"))["ep0"]
    assert [s.step for s in steps] == list(range(obs.info.step)) and [s.done for s in steps][-2:] == [False, True]
    assert steps[0].state.messages[0]["content"].startswith(record["problem_statement"].strip()[:40])
    assert steps[0].action.tool_call.name == "run_tests" and steps[1].state.messages[-1]["role"] == "tool"
    assert steps[-1].reward == 1.0 and steps[-1].outcome["resolved"] and "@@" in steps[-1].outcome["patch"]
    assert tuple(steps[-1].outcome["tampering"]["layers"]) == layers.NAMES  # which layers graded it, in the record
    assert steps[0].task_id == record["instance_id"] and steps[0].meta["tests"] == {**{t: False for t in f2p},
                                                                                    **{t: True for t in p2p}}


def test_wrong_fix_and_rewritten_tests_get_zero(env, records):
    f2p, p2p = graded(records[0])
    edit = gold_edits(records[0])[0]
    env.call("edit", path=edit["path"], start=edit["start"], end=edit["start"] - 1, new_text="# looked here\n")
    test_file = f2p[0].split("::")[0]
    n = len((env.repo / test_file).read_text().splitlines())
    env.call("edit", path=test_file, start=1, end=n, new_text="def test_fine():\n    pass\n")  # cheat on visible tests
    assert env.call("run_tests", test_ids=[test_file]).info.tests == {test_file: True}
    obs = env.call("submit")
    assert obs.reward == 0.0 and obs.done and "not resolved" in obs.text
    assert not any(obs.info.tests[t] for t in f2p) and all(obs.info.tests[t] for t in p2p)  # the real tests ran


def test_hidden_tests_and_the_gold_patch(records):
    f2p, p2p = graded(records[1])
    env = CodingEnv(config=EnvConfig(visible_tests=False))
    obs = env.reset(instance=records[1])
    assert not (env.repo / "tests").exists() and "tests/" not in obs.text
    obs = env.call("run_tests")  # the copy holds no tests: nothing to run, an error observation
    assert not obs.info.ok and "no tests" in obs.text
    assert env.call("apply_patch", diff=records[1]["patch"]).info.ok
    obs = env.call("submit")
    assert obs.reward == 1.0 and obs.info.tests == dict.fromkeys(f2p + p2p, True)
    env.close()


def test_submitting_nothing_gets_zero(env):
    obs = env.call("submit")
    assert obs.reward == 0.0 and obs.done and "without changes" in obs.text


def test_step_limit_truncates_with_zero_reward(records):
    env = CodingEnv(records, EnvConfig(max_steps=3))
    env.reset()
    assert not env.call("list_files").done and not env.call("nope").done
    obs = env.call("view", path="README.md")
    assert (obs.done, obs.info.truncated, obs.reward, obs.info.step) == (True, True, 0.0, 3)
    assert "step limit" in obs.text and env.state.truncated and not env.state.submitted
    assert env.call("submit").info.step == 3  # over: refused, not counted
    env.close()


BAD_CALLS = [
    ({"tool": "rm_rf", "args": {}}, "unknown tool 'rm_rf'"),
    ({"tool": "view", "args": {}}, "path: Missing required argument"),
    ({"tool": "edit", "args": {"path": "README.md", "start": "one", "end": 1, "new_text": ""}}, "start: Input should"),
    ({"tool": "view", "args": {"path": "README.md", "color": True}}, "color: Unexpected keyword"),
    ({"tool": "view", "args": "README.md"}, "args: Input should be a valid dictionary"),
    ({"args": {}}, "tool: Field required"),
    (42, "expected a CodingAction"),
    ({"tool": "view", "args": {"path": "../../../../etc/passwd"}}, "escapes the repository"),
    ({"tool": "view", "args": {"path": "/etc/passwd"}}, "absolute path"),
    ({"tool": "list_files", "args": {"path": ".."}}, "escapes the repository"),
    ({"tool": "search", "args": {"pattern": "root", "path": "/etc"}}, "absolute path"),
    ({"tool": "edit", "args": {"path": "../evil.py", "start": 1, "end": 0, "new_text": "x"}}, "escapes"),
    ({"tool": "apply_patch", "args": {"diff": "--- a/../evil.py\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x\n"}}, "escapes"),
    ({"tool": "apply_patch", "args": {"diff": "not a diff"}}, "no file headers"),
    ({"tool": "edit", "args": {"path": "README.md", "start": 1, "end": 1, "new_text": "x" * 20_001}}, "limit is 20000"),
    ({"tool": "edit", "args": {"path": "README.md", "start": 1, "end": 1, "new_text": "\0ELF"}}, "NUL"),
    ({"tool": "edit", "args": {"path": "README.md", "start": 40, "end": 41, "new_text": ""}}, "outside"),
    ({"tool": "view", "args": {"path": "missing.py"}}, "no such file"),
    ({"tool": "view", "args": {"path": "tests"}}, "is a directory"),
    ({"tool": "search", "args": {"pattern": "(unclosed"}}, "bad or unsupported regular expression"),
    ({"tool": "run_tests", "args": {"test_ids": ["t"] * 501}}, "at most 500"),
    ({"tool": "run_tests", "args": {"test_ids": "tests"}}, "test_ids: Input should be a valid list"),
]


@pytest.mark.parametrize("action,message", BAD_CALLS, ids=[m for _, m in BAD_CALLS])
def test_bad_calls_are_error_observations_that_count(records, tmp_path, monkeypatch, action, message):
    # the environment's folders go in a private temp root: the shared /tmp has other runs' folders come and go
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = CodingEnv(records)
    env.reset(instance=records[0])
    assert env.repo.parent.parent == tmp_path
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if ".git" not in p.parts}
    obs = env.step(action)
    assert not obs.info.ok and message in obs.info.error and obs.text.startswith("error: ")
    assert obs.info.step == 1 and env.state.step_count == 1 and not obs.done
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if ".git" not in p.parts}
    assert after == before  # the refused call wrote, created and deleted nothing
    env.close()


def test_invalid_text_in_a_call_is_an_error_and_traces_cleanly(records, tmp_path):
    env = CodingEnv(records, trace_path=tmp_path / "t.jsonl")
    env.reset()
    for tool, args in [("view", {"path": "\ud800.py"}), ("edit", {"path": "README.md", "start": 1, "end": 1,
                       "new_text": "\ud800"}), ("run_tests", {"test_ids": ["tests/\ud800.py"]}), ("\ud800", {})]:
        obs = env.call(tool, **args)
        assert not obs.info.ok and obs.text.startswith("error: ")
        obs.model_dump_json()  # what the server sends
    env.close()
    assert len(list(traces.read_traces(tmp_path / "t.jsonl"))) == 4


def test_binary_files_and_escaping_symlinks(env):
    (env.repo / "blob.bin").write_bytes(b"\x7fELF\0\1")
    (env.repo / "latin1.txt").write_bytes("café".encode("latin-1"))
    (env.repo / "etc").symlink_to("/etc")
    for path, message in [("blob.bin", "NUL"), ("latin1.txt", "not valid UTF-8"), ("etc/passwd", "escapes")]:
        obs = env.call("view", path=path)
        assert not obs.info.ok and message in obs.info.error
    obs = env.call("edit", path="etc/hostname", start=1, end=1, new_text="pwned\n")
    assert not obs.info.ok and "escapes" in obs.info.error and env.state.step_count == 4


HOSTILE = {
    "loops forever": "while True:\n    pass\n",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "floods stdout": "import os\nwhile True:\n    os.write(1, b'x' * 65536)\n",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_code_under_run_tests_is_an_error_observation(records, name):
    env = CodingEnv(config=EnvConfig(test_timeout_s=2))
    env.reset(instance=records[0])
    module = module_of(records[0])
    env.call("edit", path=module, start=1, end=0, new_text=HOSTILE[name])
    start = time.monotonic()
    obs = env.call("run_tests")
    assert time.monotonic() - start < 60  # a hang guard: cut at its 2 s timeout, each takes seconds
    assert not obs.info.ok and obs.info.error and len(obs.text) <= env.config.max_observation_chars
    if name == "loops forever":  # cut by the episode's own timeout, not a default one
        assert obs.info.error == "timed out after 2s", obs.info.error
    assert env.state.step_count == 2 and not obs.done
    assert env.call("view", path=module, start=1, end=1).info.ok  # the environment carries on
    env.call("edit", path=module, start=1, end=HOSTILE[name].count("\n"), new_text="")
    obs = env.call("run_tests")  # and so does run_tests, on a (re)started worker
    f2p, p2p = graded(records[0])
    assert obs.info.ok and obs.info.tests == {**{t: False for t in f2p}, **{t: True for t in p2p}}, obs.text
    env.close()


# ---------------------------------------------------------------- the warm worker


def running(pid) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def counting(monkeypatch, owner, name) -> list:
    calls, real = [], getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls


@pytest.mark.skipif(sandbox.isolation()["mode"] == "plain", reason="no warm worker without a PID namespace")
def test_run_tests_runs_warm_sees_edits_and_grading_runs_cold_on_a_fresh_copy(records, monkeypatch):
    f2p, p2p = graded(records[0])
    cold = counting(monkeypatch, sandbox, "run_pytest")
    warm = counting(monkeypatch, PytestWorker, "run")
    env = CodingEnv(records, EnvConfig(warm_tests=True))
    env.reset(instance=records[0])
    worker = env._ep.worker
    assert env.call("run_tests").info.tests == {**{t: False for t in f2p}, **{t: True for t in p2p}}
    pid = worker.pid
    for edit in gold_edits(records[0]):
        env.call("edit", **edit)
    assert env.call("run_tests").info.tests == dict.fromkeys(f2p + p2p, True)  # the edit is seen
    assert (len(warm), len(cold), worker.pid, worker.starts, worker.fallback) == (2, 0, pid, 1, None)
    obs = env.call("submit")
    assert obs.reward == 1.0 and len(warm) == 2 and len(cold) == 1  # graded by a cold run in a fresh sandbox
    graded_in = cold[0][0][0]
    assert graded_in != env.repo and not graded_in.exists()  # on its own fresh copy, removed after
    assert not running(pid) and worker.pid is None and env._ep.worker is None  # the worker ended before grading
    env.close()


@pytest.mark.skipif(sandbox.isolation()["mode"] == "plain", reason="no warm worker without a PID namespace")
def test_the_worker_ends_with_reset_close_and_the_step_limit(records):
    env = CodingEnv(records, EnvConfig(max_steps=2, warm_tests=True))
    pids = []
    for end in ("reset", "close", "step limit"):
        env.reset(instance=records[0])
        assert env.call("run_tests").info.ok
        pids.append(env._ep.worker.pid)
        assert running(pids[-1])
        if end == "reset":
            env.reset(instance=records[1])
        elif end == "close":
            env.close()
        else:
            assert env.call("list_files").done
        assert not running(pids[-1])
    assert len(set(pids)) == 3  # one worker per episode
    env.close()


def test_warm_tests_off_runs_cold(records, monkeypatch):
    cold = counting(monkeypatch, sandbox, "run_pytest")
    env = CodingEnv(records, EnvConfig(warm_tests=False))
    env.reset(instance=records[0])
    assert env._ep.worker is None and env.call("run_tests").info.tests and len(cold) == 1
    for edit in gold_edits(records[0]):
        env.call("edit", **edit)
    assert env.call("submit").reward == 1.0 and len(cold) == 2  # graded by a cold run too
    env.close()


def test_by_default_runs_start_from_the_fork_server_where_there_is_one(records, monkeypatch):
    cold = counting(monkeypatch, sandbox, "run_pytest")
    forked = counting(monkeypatch, sandbox, "_forked")
    env = CodingEnv(records)
    env.reset(instance=records[0])
    expected = sandbox.forked_runs()
    assert (env._ep.worker is None) is expected  # a per-episode worker only without the fork server
    env.call("run_tests")
    for edit in gold_edits(records[0]):
        env.call("edit", **edit)
    assert env.call("submit").reward == 1.0
    if expected:  # root with bubblewrap (the dev VM and CI): every run a fresh sandbox from the fork server
        assert len(cold) == 2 and len(forked) == 2 and sandbox._FORKSERVER.failed is None
    env.close()


# ---------------------------------------------------------------- TRL


def test_trl_tool_methods_directly(records):
    f2p, p2p = graded(records[0])
    trl_env = TRLCodingEnv()
    text = trl_env.reset(**records[0], prompt=[{"role": "user", "content": ""}])  # extra columns are ignored
    assert records[0]["problem_statement"].strip() in text and "run_tests" in text
    assert module_of(records[0]) in trl_env.list_files()
    assert trl_env.view(module_of(records[0]), 1, 2).startswith(f"{module_of(records[0])} (lines 1-2 of")
    assert "def " in trl_env.search(r"def \w+")
    assert f"{len(f2p)} of {len(f2p) + len(p2p)} tests failed" in trl_env.run_tests()
    assert trl_env.run_tests([p2p[0]]).startswith("all 1 tests passed")
    assert trl_env.view("../x").startswith("error: ")
    for edit in gold_edits(records[0]):
        assert not trl_env.edit(**edit).startswith("error")
    assert "resolved (reward 1)" in trl_env.submit()
    assert env_reward([trl_env]) == [1.0] and env_reward([TRLCodingEnv()]) == [0.0]
    with pytest.raises(ValueError, match="SWE-bench fields"):
        trl_env.reset(prompt="no record")
    trl_env.env.close()


def test_trl_calls_with_bad_arguments_are_steps_and_the_step_limit_holds(records):
    # TRL calls a tool as method(**arguments): missing or unknown arguments must reach the environment (an
    # error observation that counts as a step), or a policy repeating them would never meet max_steps.
    trl_env = TRLCodingEnv(EnvConfig(max_steps=3))
    trl_env.reset(**records[0])
    assert trl_env.edit(path=module_of(records[0])).startswith("error: ")  # start, end, new_text missing
    assert trl_env.env.state.step_count == 1
    assert trl_env.view(path=module_of(records[0]), line=3).startswith("error: ")  # an unknown argument
    assert "step limit of 3 reached" in trl_env.run_tests(test_ids="not a list")
    assert trl_env.env.state.done and trl_env.env.state.truncated and env_reward([trl_env]) == [0.0]
    trl_env.env.close()


def test_tool_schemas_as_trl_renders_them():
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert list(schemas) == sorted(TOOLS)  # TRL's order (the GRPO test checks it in TRL's own prompt)
    for name, fn in schemas.items():
        assert fn["description"] and all(p["description"] for p in fn["parameters"].get("properties", {}).values())
    assert schemas["edit"]["parameters"]["required"] == ["path", "start", "end", "new_text"]
    assert schemas["view"]["parameters"]["required"] == ["path"]
    assert schemas["run_tests"]["parameters"]["properties"]["test_ids"]["type"] == "array"
    assert not schemas["submit"]["parameters"].get("properties")


def test_grpo_trainer_runs_a_step_with_the_environment(records, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from composer.models import load_tokenizer, tiny_model

    path = tiny_model()
    tokenizer = load_tokenizer(path)
    trainer = GRPOTrainer(
        model=str(path), reward_funcs=[env_reward], train_dataset=Dataset.from_list(records),
        processing_class=tokenizer, environment_factory=TRLCodingEnv,
        args=GRPOConfig(str(tmp_path), use_cpu=True, bf16=False, max_steps=1, per_device_train_batch_size=2,
                        num_generations=2, max_completion_length=32, report_to=[], save_strategy="no",
                        disable_tqdm=True, logging_steps=1))
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["rewards/env_reward/mean"] == 0.0 and log["reward_std"] == 0.0  # a random model never submits
    rewards = env_reward(trainer.environments)
    assert rewards == [0.0, 0.0] and all(type(r) is float for r in rewards)
    # TRL's own plumbing: it reset each rollout's environment with a dataset row and found exactly our tools...
    assert all(e.env.state.instance_id in {r["instance_id"] for r in records} for e in trainer.environments)
    assert sorted(trainer._sync_tool_dicts[0]) == sorted(TOOLS)
    assert module_of(records[0]) in trainer._sync_tool_dicts[0]["list_files"]() or \
        module_of(records[1]) in trainer._sync_tool_dicts[0]["list_files"]()
    # ...and renders them into the prompt through the chat template.
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=trainer.tools, tokenize=False)
    assert all(f'"name": "{name}"' in prompt for name in TOOLS)
    at = [prompt.index(f'"name": "{s["function"]["name"]}"') for s in tool_schemas()]
    assert at == sorted(at)  # the order our models are trained with (composer.policies.render)
