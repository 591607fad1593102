"""The embedded coding environment as a verifiers v1 taskset: what PRIME-RL's orchestrator runs.

    from composer.env import taskset                             # registers the taskset id "composer-coding"
    from composer.env.defences import probes

    config = taskset.taskset_config(probes.rewarded(4, seed=0, split="test")[0])   # or CodingTasksetConfig(...)
    env = taskset.load_env(config, runtime="subprocess")                        # a verifiers SingleAgentEnv
    # rollouts and their v1 traces.jsonl: composer.collection.prime.collect(...)

verifiers 0.4.0 (pinned; v1 API only) splits an environment into a Taskset (data in, tasks out),
a Task (setup, tools, stop conditions, rewards), tool servers (`Toolset`: MCP servers launched per
rollout) and a Harness (the agent program that talks to the model). Here:

- `CodingTaskset` yields one `CodingTask` per SWE-bench-shaped record (`records`, or `records_file`
  as `python -m composer.collection.prime tasks` writes it; real instances run in containers: composer.env.real.container). The
  prompt is what `CodingEnv.reset` shows, the system prompt composer.policies.SYSTEM: the student
  reads exactly what it was trained on.
- `CodingToolset` is an MCP server (a subprocess: `python -m composer.env.taskset`) holding one
  `CodingEnv` episode per rollout. Its seven tools are the environment's tools, advertised with
  the JSON schemas TRL renders (`environment.tool_schemas()`: name, description, parameters; TRL's
  `"return": {"type": "string"}` entry is the one difference, verifiers' chat program never sends
  one), under their bare names. It is taskset-scoped (one server for the whole collection,
  rollouts told apart by verifiers' per-rollout state channel) rather than task-scoped (one
  server process per rollout): the
  server imports verifiers, openenv and gradio, 10-25 s on 2 cores, which per rollout would
  dominate the collection. Each call updates the rollout's shared state (`CodingState`: steps,
  done, truncated, reward, a per-step log), which verifiers syncs back to the host.
- `CodingTask` stops the rollout when the episode is over (`@vf.stop`: submitted or step limit),
  records the environment's per-step log and outcome on `trace.info["coding_env"]` (the converter
  in composer.collection.prime reads it) and rewards `env_reward` = the episode reward (1.0 when submitted
  and every FAIL_TO_PASS / PASS_TO_PASS test passes).
- `CodingHarness` is verifiers' own `null` harness (its tool-calling chat loop, MCP client
  included) with one change: the program runs on this interpreter instead of a `uv`-provisioned
  script environment, so it needs no `uv` and no network. On a PRIME-RL machine either works
  (`harness.id = "null"` there uses uv).

verifiers resolves plugins by id through `importlib.import_module(id.replace("-", "_"))`, which
cannot name a submodule; importing this module registers it as the top-level module
`composer_coding`, so the id "composer-coding" resolves once composer.env.taskset is imported
(composer.collection.prime does it; a PRIME-RL worker needs the same import, see
params/live/002b-prime-rl-orchestrator.toml).

Failures: an exception inside the environment ends the rollout as errored (`CodingTask.finalize`
raises verifiers' TaskError with the reason); a tool call that hangs is cut by the agent's rollout
timeout (verifiers records that as a stop with is_timeout, not as an error: composer.collection.prime counts
it errored). Both are injectable for tests (`CodingToolsetConfig.crash_at` / `hang_at`). Only one
rollout's episode is affected; a crash of the shared server process itself would error every
rollout still running, the price of sharing it.
"""

import asyncio
import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

from composer.env import environment
from composer.env.embedded import tasks

TASKSET_ID = "composer-coding"
MODULE_ALIAS = TASKSET_ID.replace("-", "_")
SYSTEM = ("You are a coding agent in a Python repository. Fix the reported bug with the tools: "
          "one tool call per turn; submit when the tests pass.")  # == composer.policies.SYSTEM (tested)

sys.modules.setdefault(MODULE_ALIAS, sys.modules[__name__])


# ---------------------------------------------------------------------------------------------
# Configs, data, state


class CodingToolsetConfig(vf.ToolsetConfig):
    """The environment's knobs (composer.env.environment.EnvConfig), plus fault injection for tests."""

    max_steps: int = 8
    visible_tests: bool = True
    max_observation_chars: int = 1200
    test_timeout_s: float = 10.0
    max_open_episodes: int = 64
    """Episodes kept open at once; the least recently used is closed past this (rollouts that ended unsubmitted)."""
    crash_at: dict[str, int] = Field(default_factory=dict)
    """Test hook, instance_id -> step (1-based): the environment raises there, as a crashing environment would."""
    hang_at: dict[str, int] = Field(default_factory=dict)
    """Test hook, instance_id -> step (1-based): that tool call hangs for an hour (a wedged environment)."""

    def env_config(self) -> environment.EnvConfig:
        return environment.EnvConfig(max_steps=self.max_steps, visible_tests=self.visible_tests,
                                max_observation_chars=self.max_observation_chars, test_timeout_s=self.test_timeout_s)


class CodingTaskConfig(vf.TaskConfig):
    tools: CodingToolsetConfig = CodingToolsetConfig()


class CodingTasksetConfig(vf.TasksetConfig):
    id: str = TASKSET_ID
    task: CodingTaskConfig = CodingTaskConfig()
    records: list[dict] = Field(default_factory=list)
    """SWE-bench-shaped task records (the 12 fields of composer.env.embedded.tasks.SCHEMA_FIELDS), in order."""
    records_file: Path | None = None
    """Or a .json/.jsonl of records (composer.env.real.swebench.load_instances reads it); used when records is empty."""


class CodingData(vf.TaskData):
    instance: dict
    """The SWE-bench record, as strings (FAIL_TO_PASS / PASS_TO_PASS are JSON lists)."""


class CodingState(vf.State):
    """Shared between the rollout's tool server (which writes it) and the host (stop, reward, finalize)."""

    rollout: str | None = None
    """The rollout's trace id: which episode of the shared tool server is this rollout's."""
    instance: dict | None = None
    """The task record (set by CodingTask.setup; the shared server opens the episode from it)."""
    steps: int = 0
    done: bool = False
    truncated: bool = False
    submitted: bool = False
    reward: float | None = None
    episode_id: str | None = None
    patch: str | None = None
    """The agent's changes as a diff, when the episode ended (what submit graded)."""
    env_error: str | None = None
    """Set when the environment itself failed (not the policy's call): the rollout is errored."""
    log: list[dict] = Field(default_factory=list)
    """One entry per tool call: step, tool, ok, error, done, truncated, reward, tests."""


# ---------------------------------------------------------------------------------------------
# The tool server


class CodingToolset(vf.Toolset[CodingToolsetConfig, CodingState]):
    TOOL_PREFIX = None  # bare tool names, as the student was trained with (list_files, view, ...)

    def __init__(self, config: CodingToolsetConfig) -> None:
        super().__init__(config)
        self.envs: OrderedDict[str, environment.CodingEnv] = OrderedDict()  # rollout -> its open episode
        self._exit_stack.callback(self._close_all)

    def _close_all(self) -> None:
        while self.envs:
            self.envs.popitem()[1].close()

    def register(self, mcp) -> None:
        super().register(mcp)
        # Advertise exactly the schemas TRL renders from TRLCodingEnv (names, descriptions, argument docs), so
        # both substrates put the same system prompt in front of the student. The signatures below take any
        # value for any argument, so every call reaches the environment, which validates it and counts a bad
        # one as a step (an error observation), as it does over TRL. (mcp 2.0.0's tool registry.)
        schemas = {s["function"]["name"]: s["function"] for s in environment.tool_schemas()}
        for name, registered in mcp._tool_manager._tools.items():
            if name in schemas:
                registered.description = schemas[name]["description"]
                registered.parameters = schemas[name]["parameters"]

    def _episode(self, state: CodingState) -> environment.CodingEnv:
        env = self.envs.get(state.rollout)
        if env is None:
            if state.rollout is None or state.instance is None:
                raise RuntimeError("the rollout's state names no task (CodingTask.setup did not run)")
            env = environment.CodingEnv(config=self.config.env_config())
            env.reset(instance=state.instance)
            self.envs[state.rollout] = env
            while len(self.envs) > self.config.max_open_episodes:
                self.envs.popitem(last=False)[1].close()
        self.envs.move_to_end(state.rollout)
        return env

    def _step(self, state: CodingState, tool: str, args: dict):
        if self.config.crash_at.get((state.instance or {}).get("instance_id")) == state.steps + 1:
            raise RuntimeError(f"injected environment crash at step {state.steps + 1}")
        return self._episode(state).call(tool, **args)

    async def _call(self, tool: str, **args) -> str:
        args = {k: v for k, v in args.items() if v is not None}  # left out: the environment's default
        state = self.state
        if state.env_error:
            return f"error: the environment failed earlier: {state.env_error}"
        if self.config.hang_at.get((state.instance or {}).get("instance_id")) == state.steps + 1:
            await asyncio.sleep(3600)
        try:
            obs = await asyncio.to_thread(self._step, state, tool, args)
        except Exception as e:  # the environment's own failure, not the policy's: the rollout is errored
            state.env_error = f"{type(e).__name__}: {e}"
            state.done = True
            self._drop(state.rollout)
            return f"error: the environment failed: {state.env_error}"
        info = obs.info
        state.steps, state.done, state.truncated = info.step, info.done, info.truncated
        state.episode_id = info.episode_id
        if obs.done:
            state.reward = None if obs.reward is None else float(obs.reward)
            state.submitted = self.envs[state.rollout].state.submitted
            state.patch = self.envs[state.rollout].diff()
            self._drop(state.rollout)
        state.log.append({"step": info.step, "tool": info.tool, "ok": info.ok, "error": info.error,
                          "done": info.done, "truncated": info.truncated,
                          "reward": None if obs.reward is None else float(obs.reward), "tests": info.tests})
        return obs.text

    def _drop(self, rollout: str | None) -> None:
        env = self.envs.pop(rollout, None)
        if env is not None:
            env.close()

    # The tools: TRLCodingEnv's names and arguments (the advertised schemas are TRL's, see register). Every
    # argument takes any value and may be left out (None; each optional one defaults to None or to what the
    # environment defaults to anyway). The environment checks them, so a call with a missing or mistyped
    # argument is a step with an error observation, not an MCP validation error that never reaches the
    # environment and lets a looping policy run past max_steps into max_turns.

    @vf.tool
    async def list_files(self, path: Any = None) -> str:
        """List the files of the repository, one path per line."""
        return await self._call("list_files", path=path)

    @vf.tool
    async def view(self, path: Any = None, start: Any = None, end: Any = None) -> str:
        """Show lines of a file, each prefixed with its line number."""
        return await self._call("view", path=path, start=start, end=end)

    @vf.tool
    async def search(self, pattern: Any = None, path: Any = None) -> str:
        """Search files for a regular expression; one "file:line: text" per matching line."""
        return await self._call("search", pattern=pattern, path=path)

    @vf.tool
    async def edit(self, path: Any = None, start: Any = None, end: Any = None, new_text: Any = None) -> str:
        """Replace lines start..end (1-based, inclusive) of a file with new_text."""
        return await self._call("edit", path=path, start=start, end=end, new_text=new_text)

    @vf.tool
    async def apply_patch(self, diff: Any = None) -> str:
        """Apply a unified diff to the repository (paths a/... and b/..., as git diff writes them)."""
        return await self._call("apply_patch", diff=diff)

    @vf.tool
    async def run_tests(self, test_ids: Any = None) -> str:
        """Run tests with pytest and report which pass."""
        return await self._call("run_tests", test_ids=test_ids)

    @vf.tool
    async def submit(self) -> str:
        """Finish the task: your changes are graded by the task's tests. Call it once, when done."""
        return await self._call("submit")


# ---------------------------------------------------------------------------------------------
# Task, taskset, harness


class CodingTask(vf.Task[CodingData, CodingState, CodingTaskConfig]):
    @property
    def key(self) -> str:
        return self.data.instance["instance_id"]

    async def setup(self, trace: vf.Trace, runtime) -> None:
        trace.state.rollout, trace.state.instance = trace.id, self.data.instance

    @vf.stop
    def episode_over(self, trace: vf.Trace) -> bool:
        """The environment ended the episode (submit, or the step limit): no further model call."""
        return trace.state.done

    async def finalize(self, trace: vf.Trace, runtime) -> None:
        trace.info["coding_env"] = record_state(trace.state)
        if trace.state.env_error:
            raise vf.TaskError(f"the environment failed at step {trace.state.steps + 1}: {trace.state.env_error}")

    @vf.reward
    async def env_reward(self, trace: vf.Trace) -> float:
        """The episode reward: 1.0 when submitted and resolved, else 0.0 (also when unsubmitted)."""
        return float(trace.state.reward or 0.0)

    @vf.metric
    async def env_steps(self, trace: vf.Trace) -> float:
        return float(trace.state.steps)


def record_state(state: CodingState) -> dict:
    """The state as recorded on the trace (verifiers never serializes `trace.state`)."""
    return state.model_dump(mode="json", exclude={"artifacts", "instance"})


class CodingTaskset(vf.Taskset[CodingTask, CodingTasksetConfig]):
    @classmethod
    def toolsets(cls, config: CodingTasksetConfig) -> list[vf.Toolset]:
        return [CodingToolset(config.task.tools)]

    def load(self):
        records = self.config.records
        if not records and self.config.records_file is not None:
            from composer.env.real import swebench
            records = swebench.load_instances(str(self.config.records_file))
        env = environment.CodingEnv(config=self.config.task.tools.env_config())
        try:
            for record in records:
                instance = {k: record[k] for k in tasks.SCHEMA_FIELDS}
                prompt = env.reset(instance=instance).text  # the task message, as CodingEnv/TRL show it
                yield CodingTask(CodingData(id=instance["instance_id"], name=instance["instance_id"], prompt=prompt,
                                            system_prompt=SYSTEM, instance=instance), self.config.task)
        finally:
            env.close()


class CodingHarness(NullHarness):
    """verifiers' `null` harness (chat loop + MCP tools), its program run by this interpreter rather than uv."""

    async def setup(self, runtime) -> None:
        return None

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system_prompt, prompt = self.resolve_prompt(data)
        args = [f"--base-url={endpoint}", f"--api-key={secret}", f"--model={ctx.model}"]
        if tool_interception_url:
            args.append(f"--tool-interception-url={tool_interception_url}")
        if system_prompt:
            args.append(f"--system-prompt={system_prompt}")
        if mcp_urls:
            servers = {name: {"url": url, "timeout": self.config.tool_timeout} for name, url in mcp_urls.items()}
            args.append("--mcp-config=" + json.dumps({"mcpServers": servers}))
        if not isinstance(prompt, str):
            raise vf.HarnessError("CodingHarness takes a text prompt")
        args.append(f"--prompt={prompt}")
        path = f".vf-chat-program-{trace.id}.py"
        await runtime.write(path, CHAT_PROGRAM_SOURCE.encode())
        return await runtime.run_program([sys.executable, path, *args], {**self.config.resolved_env})


# ---------------------------------------------------------------------------------------------
# Building configs and the env


def taskset_config(records: list[dict], **tools) -> CodingTasksetConfig:
    """A taskset config over these records; `tools` are CodingToolsetConfig fields (max_steps, ...)."""
    return CodingTasksetConfig(records=[{k: r[k] for k in tasks.SCHEMA_FIELDS} for r in records],
                               task=CodingTaskConfig(tools=CodingToolsetConfig(**tools)))


def env_config(taskset: CodingTasksetConfig, *, runtime: str = "subprocess", max_turns: int | None = None,
               rollout_timeout_s: float | None = None, harness: str = TASKSET_ID) -> vf.SingleAgentEnvConfig:
    """The single-agent env config: this taskset, the harness, a runtime ("subprocess" offline), and the
    agent's limits (max_turns: model calls per rollout; rollout_timeout_s: the agent stage's wall clock)."""
    agent = {"harness": {"id": harness}, "runtime": {"type": runtime}, "max_turns": max_turns,
             "timeout": {"rollout": rollout_timeout_s}}
    return vf.SingleAgentEnvConfig.model_validate({"taskset": taskset, "agent": agent})


def load_env(taskset: CodingTasksetConfig, **kwargs) -> vf.Env:
    """A verifiers SingleAgentEnv over this taskset (kwargs: see env_config)."""
    return vf.load_environment(env_config(taskset, **kwargs))


__all__ = ["CodingTaskset", "CodingHarness", "CodingTask", "CodingToolset", "CodingTasksetConfig",
           "CodingToolsetConfig", "CodingTaskConfig", "CodingData", "CodingState"]


if __name__ == "__main__":  # the tool server, as verifiers launches it: python -m composer.env.taskset
    CodingToolset.run()
