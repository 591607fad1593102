"""composer.env.taskset: the embedded environment as a verifiers v1 taskset (no rollouts here; see
test_collection_prime.py).

    .venv/bin/pytest tests/test_env_taskset.py
"""

import asyncio

import pytest
import verifiers.v1 as vf

from composer import policies
from composer.env import environment
from composer.env.embedded import tasks
from composer.env import taskset


@pytest.fixture(scope="module")
def records():
    return tasks.generate(2, seed=0, split="test", difficulty=tasks.Difficulty(n_functions=1))


def test_the_plugin_id_resolves_to_this_module():
    from verifiers.v1.utils.loaders import default_harness_id, taskset_class

    assert taskset_class(taskset.TASKSET_ID) is taskset.CodingTaskset
    assert default_harness_id(taskset.TASKSET_ID) == taskset.TASKSET_ID  # the bundled harness, not verifiers' bash
    assert taskset.CodingTaskset.task_type() is taskset.CodingTask


def test_tasks_show_what_the_student_was_trained_on(records):
    loaded = list(taskset.CodingTaskset(taskset.taskset_config(records)))
    assert [t.data.id for t in loaded] == [r["instance_id"] for r in records]
    assert [t.key for t in loaded] == [r["instance_id"] for r in records]
    assert taskset.SYSTEM == policies.SYSTEM and loaded[0].data.system_prompt == policies.SYSTEM
    env = environment.CodingEnv(config=taskset.CodingToolsetConfig().env_config())
    try:
        assert loaded[0].data.prompt == env.reset(instance=records[0]).text
    finally:
        env.close()
    assert taskset.CodingToolsetConfig().env_config() == policies.ENV_CONFIG  # the zoo's episode settings by default


def test_env_config_picks_the_subprocess_runtime_and_limits(records):
    config = taskset.env_config(taskset.taskset_config(records, max_steps=3), max_turns=5, rollout_timeout_s=9)
    assert config.agent.runtime.type == "subprocess" and config.agent.harness.id == taskset.TASKSET_ID
    assert config.agent.max_turns == 5 and config.agent.timeout.rollout == 9
    assert config.taskset.task.tools.max_steps == 3
    env = vf.load_environment(config)
    assert isinstance(env, vf.SingleAgentEnv) and isinstance(env.taskset, taskset.CodingTaskset)


def test_a_bad_tool_setting_is_refused():
    with pytest.raises(ValueError):
        taskset.taskset_config([], max_steps="many")


def test_tools_advertise_trls_schemas():
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("t")
    taskset.CodingToolset(taskset.CodingToolsetConfig()).register(server)
    listed = asyncio.run(server.list_tools())
    ours = {t.name: {"name": t.name, "description": t.description, "parameters": t.input_schema} for t in listed}
    trl = {s["function"]["name"]: s["function"] for s in environment.tool_schemas()}
    assert sorted(ours) == sorted(environment.TOOLS)
    # Name, description and parameters are TRL's; TRL's rendering also carries "return": {"type": "string"},
    # which verifiers' chat program never sends (it builds OpenAI tools from name/description/input schema).
    assert ours == {name: {k: v for k, v in f.items() if k != "return"} for name, f in trl.items()}
    assert all(f["return"] == {"type": "string"} for f in trl.values())


def _state(record, rollout="r0"):
    return taskset.CodingState(rollout=rollout, instance=record)


def _call(toolset, state, tool, **args):
    from verifiers.v1.mcp.server import _call_state

    token = _call_state.set(state)
    try:
        return asyncio.run(toolset._call(tool, **args))
    finally:
        _call_state.reset(token)


def test_toolset_runs_one_episode_per_rollout_and_logs_each_step(records):
    toolset = taskset.CodingToolset(taskset.CodingToolsetConfig(max_steps=4))
    a, b = _state(records[0], "a"), _state(records[1], "b")
    try:
        assert "tests" in _call(toolset, a, "run_tests")
        _call(toolset, b, "list_files")
        assert set(toolset.envs) == {"a", "b"} and a.steps == 1 and b.steps == 1
        text = _call(toolset, a, "submit")
        assert "submitted" in text and a.done and a.submitted and a.reward == 0.0 and not a.truncated
        assert a.patch == "" and "a" not in toolset.envs  # the finished episode is closed
        assert [s["tool"] for s in a.log] == ["run_tests", "submit"] and a.log[-1]["done"]
        assert taskset.record_state(a)["log"] == a.log and "instance" not in taskset.record_state(a)
    finally:
        toolset._close_all()


def test_step_limit_truncates(records):
    toolset = taskset.CodingToolset(taskset.CodingToolsetConfig(max_steps=2))
    s = _state(records[0])
    _call(toolset, s, "list_files")
    _call(toolset, s, "list_files")
    assert s.done and s.truncated and s.reward == 0.0 and not s.submitted


def test_policy_errors_are_steps_not_environment_failures(records):
    toolset = taskset.CodingToolset(taskset.CodingToolsetConfig())
    s = _state(records[0])
    try:
        text = _call(toolset, s, "view", path="../../etc/passwd")
        assert text.startswith("error:") and s.env_error is None and not s.log[-1]["ok"]
    finally:
        toolset._close_all()


def test_calls_with_bad_arguments_reach_the_environment_as_steps(records):
    # Through MCP's own validation, as verifiers calls the tools: a missing or mistyped argument must be a
    # step with an error observation (else a looping policy never meets max_steps), as over TRL.
    from mcp.server.mcpserver import MCPServer
    from verifiers.v1.mcp.server import _call_state

    toolset = taskset.CodingToolset(taskset.CodingToolsetConfig(max_steps=3))
    server = MCPServer("t")
    toolset.register(server)
    s = _state(records[0])
    token = _call_state.set(s)

    def call(name, arguments):  # MCP's validation of the arguments, then the tool, under this rollout's state
        validate = server._tool_manager._tools[name].fn_metadata.call_fn_with_arg_validation
        return asyncio.run(validate(getattr(toolset, name), True, arguments, None))

    try:
        assert "error" in call("edit", {"path": "calc/ops.py"}) and s.steps == 1 and not s.log[-1]["ok"]
        assert "error" in call("view", {"path": "calc/ops.py", "start": "first"}) and s.steps == 2
        assert "step limit" in call("run_tests", {"test_ids": 7}) and s.done and s.truncated
        assert [e["tool"] for e in s.log] == ["edit", "view", "run_tests"]
    finally:
        _call_state.reset(token)
        toolset._close_all()


def test_an_environment_crash_marks_the_rollout(records):
    toolset = taskset.CodingToolset(taskset.CodingToolsetConfig(crash_at={records[0]["instance_id"]: 2}))
    s = _state(records[0])
    _call(toolset, s, "list_files")
    text = _call(toolset, s, "list_files")
    assert "environment failed" in text and "injected environment crash at step 2" in s.env_error and s.done
    assert "failed earlier" in _call(toolset, s, "submit") and s.steps == 1  # nothing runs after a crash
    assert not toolset.envs


def test_a_state_without_a_task_is_an_environment_failure():
    toolset = taskset.CodingToolset(taskset.CodingToolsetConfig())
    s = taskset.CodingState()
    _call(toolset, s, "list_files")
    assert "names no task" in s.env_error


def test_finalize_turns_an_environment_failure_into_an_error(records):
    task = next(iter(taskset.CodingTaskset(taskset.taskset_config(records[:1]))))
    trace = vf.Trace(task=vf.TraceTask(type="CodingTask", data=task.data), agent=vf.AgentInfo(config=vf.AgentConfig()),
                     state=taskset.CodingState(env_error="RuntimeError: boom", steps=1))
    with pytest.raises(vf.TaskError, match="failed at step 2: RuntimeError: boom"):
        asyncio.run(task.finalize(trace, None))
    assert trace.info["coding_env"]["env_error"] == "RuntimeError: boom"
    ok = vf.Trace(task=vf.TraceTask(type="CodingTask", data=task.data), agent=vf.AgentInfo(config=vf.AgentConfig()),
                  state=taskset.CodingState(done=True, reward=1.0))
    asyncio.run(task.finalize(ok, None))
    assert task.episode_over(ok) and asyncio.run(task.env_reward(ok)) == 1.0


def test_setup_hands_the_task_to_the_shared_server(records):
    task = next(iter(taskset.CodingTaskset(taskset.taskset_config(records[:1]))))
    trace = vf.Trace(task=vf.TraceTask(type="CodingTask", data=task.data), agent=vf.AgentInfo(config=vf.AgentConfig()),
                     state=taskset.CodingState())
    asyncio.run(task.setup(trace, None))
    assert trace.state.rollout == trace.id and trace.state.instance["instance_id"] == records[0]["instance_id"]


def test_the_prime_rl_orchestrator_config_plugs_this_taskset_in(records, tmp_path, monkeypatch):
    """params/live/002b-prime-rl-orchestrator.toml: its env block is a valid verifiers env config for this taskset
    (what PRIME-RL's orchestrator hands verifiers), and records_file loads the tasks."""
    import json
    import tomllib

    from composer.paths import ROOT

    config = tomllib.loads((ROOT / "params/live/002b-prime-rl-orchestrator.toml").read_text())
    [source] = config["orchestrator"]["train"]["source"]
    (tmp_path / "composer-tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.chdir(tmp_path)
    env_config = vf.resolve_env_config(source["env"])
    assert isinstance(env_config.taskset, taskset.CodingTasksetConfig) and env_config.agent.runtime.type == "subprocess"
    assert env_config.taskset.task.tools.max_steps == 8 and env_config.agent.harness.id == taskset.TASKSET_ID
    env = vf.load_environment(env_config)
    assert [t.data.id for t in env.taskset] == [r["instance_id"] for r in records]
    assert config["orchestrator"]["batch_size"] * config["max_steps"] == 100  # rollouts: 002b's report scale
