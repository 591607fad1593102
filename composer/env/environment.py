"""The coding environment: an OpenEnv Environment over one SWE-bench-shaped task per episode.

    from composer.env.defences import probes
    from composer.env.environment import CodingAction, CodingEnv, EnvConfig

    records, _ = probes.rewarded(4, seed=0)     # embedded tasks with held-out probes (reset refuses the others)
    env = CodingEnv(records, EnvConfig(max_steps=30))
    obs = env.reset(instance=records[0])        # or reset(instance_id=...), reset(seed=i), reset() (round robin)
    obs = env.step(CodingAction(tool="view", args={"path": "calc/stats.py"}))
    obs = env.call("run_tests")                 # the same as step(CodingAction(tool="run_tests"))
    obs.text, obs.info.tests, obs.reward, obs.done
    env.close()

    # TRL: one TRLCodingEnv per rollout; its public methods are the tools
    GRPOTrainer(..., train_dataset=Dataset.from_list(records), environment_factory=TRLCodingEnv,
                reward_funcs=[env_reward])

Served over HTTP/WebSocket by composer.env.server. Tools (CodingAction.args holds the arguments):

    list_files(path=".")  view(path, start=1, end=None)  search(pattern, path=".")
    edit(path, start, end, new_text)  apply_patch(diff)  run_tests(test_ids=None)  submit()

Episode rules (decisions, with the reason):
- Each episode works in its own temporary folder (removed on reset, close, or garbage collection),
  so sandbox.run_pytest's "one run per repo folder" holds and episodes never see each other.
- run_tests: where cold runs start from the fork server (sandbox.forked_runs(): root with
  bubblewrap), each call is a sandbox.run_pytest in a fresh sandbox with pytest already imported
  (nothing an earlier call left in /tmp or memory is there). Elsewhere it goes through one warm
  worker.PytestWorker per episode: its first call starts a sandboxed server that has pytest
  imported, each call forks a fresh child of it (same limits), about 3x cheaper than a cold run
  that starts an interpreter; the worker ends with the episode. `warm_tests` forces either way
  (True: the worker, False: cold runs); None (default) picks as above.
- `visible_tests` (default True): the agent's copy has the task's test_patch applied, so
  run_tests shows which tests fail and how; a tiny policy gets no signal otherwise. With False
  the copy is what a SWE-bench agent sees (no tests): run_tests then runs whatever tests the
  copy holds, never the hidden ones.
- submit() ends the episode and grades it through swebench.evaluate, where the policy cannot
  reach: a fresh copy at base_commit, plus the agent's changes to source files only (tests,
  conftest.py, pytest/tox/setup.cfg/pyproject configuration, *.pth and site customization come
  from the base and test_patch: composer.env.defences.grading), plus test_patch; FAIL_TO_PASS +
  PASS_TO_PASS in one cold pytest run in a fresh sandbox (its own namespaces, uid and /tmp:
  nothing a run_tests call left anywhere is there), with canary tests planted among the task's
  (composer.env.defences.canaries), held-out probes (composer.env.defences.probes) and the values the tests compare
  made plain; reward 1.0 when all pass, every canary came out as it must and every probe recorded
  the gold value, else 0.0. A change whose source files reach the grading's own machinery
  (composer.env.defences.tampering's decisive findings) scores 0 (`flag_tampering`, default True); its other
  findings are kept for review and score nothing. What was reset, flagged, named for review or
  forged is in the trace record's outcome["tampering"].
- Embedded tasks are graded only where a grading run has a filesystem of its own ("root-ns" or
  "user-ns": sandbox.grading_refusal): grading's files are on disk (the probes' expected values and
  the task records in the composer cache), and a run with the caller's file access reads them and
  forges its reward. Elsewhere ("plain") reset refuses, naming what the host lacks, unless
  EnvConfig(grade_uncontained=True) or COMPOSER_GRADE_UNCONTAINED=1 opts in for a smoke run, which
  is logged and named in each submit's info.grading.
- Real instances whose tests pytest does not run (django's runtests.py, sympy's bin/test, sphinx's tox) get none
  of grading's layers but the tampering scan: reset refuses them unless EnvConfig(grade_scan_only=True) or
  COMPOSER_GRADE_SCAN_ONLY=1 opts in (container.scan_only_refusal). Those pytest runs without held-out probes
  (container.held_out found none) are refused likewise unless EnvConfig(grade_without_probes=True) or
  COMPOSER_GRADE_WITHOUT_PROBES=1 (container.probes_refusal), and so are embedded tasks without them
  (probes.refusal: about 1 in 5 of tasks.generate's; probes.rewarded makes task sets of the others).
- The step that reaches max_steps without submitting ends the episode with truncated=True and
  reward 0.0, ungraded: like mini-swe-agent's LimitsExceeded, no submission, nothing resolved.
- Real SWE-bench records (any repo but composer-embedded/...) run in a container from the instance image
  (composer.env.real.container): the tools work on a host copy of its /testbed, mounted back into it; run_tests runs
  the image's own environment there, bounded by real_test_timeout_s; the task's tests stay hidden whatever
  visible_tests says; submit is graded by the swebench harness's eval script in a fresh container. reset raises
  (before any model work) when the engine or the image is missing.
- Every call counts as a step, failed ones included: an unknown tool, bad or missing arguments,
  a path outside the repo, an edit over max_edit_bytes, binary content, tests that hang, fork or
  flood. All come back as an observation with info.ok False; step() never raises. Calls after
  the episode ended get an error observation and are not counted.
- Observations carry everything for tracing in fields (text, info), not in `metadata`, which
  openenv 0.3.0 does not send over the wire. With `trace_path` every step is also appended as a
  composer.traces.StepRecord (see to_step_record).
"""

import functools
import inspect
import json
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import BaseModel, Field, ValidationError, validate_call
from transformers.utils import get_json_schema

from composer import traces
from composer.env import tools
from composer.env.containment import patches, sandbox
from composer.env.defences import probes
from composer.env.real import container, swebench
from composer.env.embedded.tasks import SCHEMA_FIELDS, materialize
from composer.env.containment.worker import PytestWorker

TOOLS = ("list_files", "view", "search", "edit", "apply_patch", "run_tests", "submit")
MAX_TEST_IDS = 500
INFO_ARG_CHARS = 1000  # string arguments echoed in info are clipped to this (the trace keeps them whole)


@dataclass(frozen=True)
class EnvConfig:
    max_steps: int = 30
    visible_tests: bool = True
    max_edit_bytes: int = 20_000  # new_text of edit, diff of apply_patch
    max_observation_chars: int = 8_000  # the text the model sees, head and tail kept
    test_timeout_s: float = 20.0  # per pytest run, run_tests and the grading run alike
    warm_tests: bool | None = None  # a per-episode PytestWorker for run_tests; None: only without the fork server
    flag_tampering: bool = True  # a submission whose source changes reach the grading's machinery scores 0
    # grade embedded tasks even where test runs can read grading's files ("plain" mode): smoke runs only, and said in
    # each submit's info.grading (sandbox.grading_refusal: reset refuses such a host otherwise)
    grade_uncontained: bool = False
    # grade real instances whose tests pytest does not run (django, sympy, sphinx), where only the tampering scan
    # stands: said in the report (container.scan_only_refusal: reset refuses them otherwise)
    grade_scan_only: bool = False
    # grade tasks (embedded or real) that have no held-out probes, where a submission answering only the inputs the
    # tests show passes: said in the report (probes.refusal, container.probes_refusal: reset refuses them otherwise)
    grade_without_probes: bool = False
    real_test_timeout_s: float = 1800.0  # per test run on a real instance (run_tests, grading): harness default
    view_max_lines: int = 200
    search_max_matches: int = 50
    list_max_files: int = 200


class CodingAction(Action):
    """One tool call: CodingAction(tool="edit", args={"path": ..., "start": ..., "end": ..., "new_text": ...})."""

    tool: str = Field(description=f"one of {', '.join(TOOLS)}")
    args: dict[str, Any] = Field(default_factory=dict, description="the tool's keyword arguments")


class StepInfo(BaseModel):
    """What happened at a step, for tracing (sent over the wire, unlike Observation.metadata)."""

    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    ok: bool = True
    error: str | None = None
    tests: dict[str, bool] | None = None  # outcome per test id, from run_tests or the grading run of submit
    step: int = 0  # steps taken so far in the episode, this one included
    done: bool = False
    truncated: bool = False
    instance_id: str | None = None
    episode_id: str | None = None
    grading: str | None = None  # submit's: how the reward was graded (sandbox.grading_note: contained or not)


class CodingObservation(Observation):
    text: str = Field(default="", description="what the model reads")
    info: StepInfo = Field(default_factory=StepInfo)


class CodingState(State):
    instance_id: str | None = None
    max_steps: int = 0
    visible_tests: bool = True
    done: bool = False
    truncated: bool = False
    submitted: bool = False
    reward: float | None = None


@dataclass
class _Episode:
    instance: dict
    episode_id: str
    tmp: tempfile.TemporaryDirectory
    repo: Path
    pristine: dict[str, bytes]  # the copy as the agent got it: what its diff is taken against
    test_paths: frozenset[str]  # files test_patch touches: never part of the agent's diff
    default_tests: list[str]
    messages: list[dict]  # the chat as the environment sees it, for trace records
    steps: int = 0
    done: bool = False
    truncated: bool = False
    submitted: bool = False
    reward: float | None = None
    patch: str | None = None
    tampering: dict | None = None  # grading's: {"reset": [paths], "flagged"/"review": [findings], "forged": [...]}
    worker: PytestWorker | None = None  # run_tests' warm pytest; None where runs are forked, or once done
    workspace: container.Workspace | None = None  # a real instance's container (its run_tests); None if embedded


@dataclass
class _Result:
    text: str
    tests: dict[str, bool] | None = None
    error: str | None = None
    grading: str | None = None


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n... [{len(text) - limit} characters cut] ...\n"
    head = (limit - len(marker)) * 2 // 3
    return text[:head] + marker + text[len(text) - (limit - len(marker) - head):]


def _utf8(text: str) -> str:
    """text without lone surrogates (a JSON "\\ud800" decodes to one; no UTF-8 writer accepts it)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _json_safe(value):
    """value as JSON carries it: other objects by repr, lone surrogates replaced."""
    return json.loads(_utf8(json.dumps(value, default=repr, ensure_ascii=False)))


def _tests_summary(outcomes: dict[str, bool]) -> str:
    failed = [t for t, ok in outcomes.items() if not ok]
    if not failed:
        return f"all {len(outcomes)} tests passed"
    shown = ", ".join(failed[:20]) + (f" and {len(failed) - 20} more" if len(failed) > 20 else "")
    return f"{len(failed)} of {len(outcomes)} tests failed: {shown}"


INSTRUCTIONS = """\
Fix the issue above in the repository (your working directory). Tools:
  list_files(path=".")              list files
  view(path, start=1, end=None)     show numbered lines of a file
  search(pattern, path=".")         regular-expression search, one line per match
  edit(path, start, end, new_text)  replace lines start..end (inclusive) with new_text
  apply_patch(diff)                 apply a unified diff (paths a/... b/...)
  run_tests(test_ids=None)          run {tests}
  submit()                          finish; your changes are graded by the task's tests
Change the source code, not the tests. You have {max_steps} tool calls."""


class CodingEnv(Environment[CodingAction, CodingObservation, CodingState]):
    """See the module docstring. tasks: records to draw from when reset() gets no `instance`."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # all state is per instance, all files in its own temp folder

    def __init__(self, tasks: list[dict] | None = None, config: EnvConfig | None = None, *,
                 trace_path: str | Path | None = None):
        super().__init__()
        self.tasks = list(tasks or [])
        self.config = config or EnvConfig()
        self.trace_path = trace_path
        self._writer = None
        self._ep: _Episode | None = None
        self._next = 0  # round-robin position in tasks

    # --- OpenEnv API -----------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, instance: dict | None = None,
              instance_id: str | None = None) -> CodingObservation:
        """Start an episode on `instance`, else on the task named instance_id, else tasks[seed % n], else the
        next task in turn. Raises ValueError for an unknown id, a record that is not a valid embedded task, or
        no task at all (reset is driven by trusted code; only step() takes the policy's input)."""
        instance = swebench.validate_instance(instance) if instance is not None else self._pick(seed, instance_id)
        real = swebench.is_real(instance)
        if real and (refused := container.scan_only_refusal(instance, self.config.grade_scan_only)):
            raise RuntimeError(f"cannot start an episode on {instance['instance_id']}: {refused}")  # before an image
        if real and (missing := swebench.real_missing(instance)):
            raise RuntimeError(f"cannot start an episode on {instance['instance_id']}: " + "; and ".join(missing))
        if real and (refused := container.probes_refusal(instance, self.config.grade_without_probes)):
            raise RuntimeError(f"cannot start an episode on {instance['instance_id']}: {refused}")
        if not real and (refused := sandbox.grading_refusal(self.config.grade_uncontained)):
            raise RuntimeError(f"cannot start an episode on {instance['instance_id']}: {refused}")
        if not real and (refused := probes.refusal(instance, self.config.grade_without_probes)):
            raise RuntimeError(f"cannot start an episode on {instance['instance_id']}: {refused}")
        self._end()
        tmp = tempfile.TemporaryDirectory(prefix="composer-env-", ignore_cleanup_errors=True)
        workspace = None
        try:
            if real:
                workspace = container.Workspace(instance, Path(tmp.name) / "repo")
                repo = workspace.repo
            else:
                repo = materialize(instance, Path(tmp.name) / "repo", with_tests=self.config.visible_tests)
        except Exception:
            tmp.cleanup()
            raise
        visible = self.config.visible_tests and not real
        graded = json.loads(instance["FAIL_TO_PASS"]) + json.loads(instance["PASS_TO_PASS"])
        self._ep = ep = _Episode(
            instance=instance, episode_id=episode_id or uuid.uuid4().hex, tmp=tmp, repo=repo,
            pristine=tools.snapshot(repo), test_paths=frozenset(patches.diff_paths(instance["test_patch"])),
            default_tests=graded if visible else [], messages=[], workspace=workspace,
            worker=PytestWorker(repo, timeout_s=self.config.test_timeout_s)  # starts at the first run_tests
            if self._warm() and not real else None)
        which = "the task's tests" if visible else "the tests in the repository"
        text = "\n\n".join([
            instance["problem_statement"].strip(),
            INSTRUCTIONS.format(tests=which, max_steps=self.config.max_steps),
            "Files:\n" + tools.list_files(repo, limit=self.config.list_max_files)])
        ep.messages.append({"role": "user", "content": text})
        return CodingObservation(text=text, info=StepInfo(instance_id=instance["instance_id"],
                                                          episode_id=ep.episode_id))

    def step(self, action: CodingAction | dict, timeout_s: float | None = None) -> CodingObservation:
        """Run one tool call; never raises. timeout_s is ignored: config.test_timeout_s bounds each test run."""
        ep = self._ep
        if ep is None or ep.done:
            why = "no episode is running: call reset() first" if ep is None else "the episode is over: call reset()"
            return CodingObservation(text=f"error: {why}", done=True, info=StepInfo(
                ok=False, error=why, step=ep.steps if ep else 0, done=True, truncated=bool(ep and ep.truncated),
                instance_id=ep and ep.instance["instance_id"], episode_id=ep and ep.episode_id))
        ep.steps += 1
        name, args = None, {}
        try:
            if isinstance(action, dict):
                action = CodingAction.model_validate(action)
            if not isinstance(action, CodingAction):
                raise tools.ToolError(f"expected a CodingAction or a dict, got {type(action).__name__}")
            name, args = action.tool, action.args
            if name not in TOOLS:
                raise tools.ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
            result = getattr(self, f"_tool_{name}")(**args)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'action'}: {x['msg']}" for x in e.errors())
            result = _Result("", error=f"bad arguments for {name or 'the action'}: {problems}")
        except tools.ToolError as e:
            result = _Result("", error=str(e))
        except Exception as e:  # a bug of ours must not end a training run either: report it as the step's error
            result = _Result("", error=f"internal error in {name}: {type(e).__name__}: {e}")
        return self._observe(action, name, args, result)

    @property
    def state(self) -> CodingState:
        ep = self._ep
        base = dict(max_steps=self.config.max_steps, visible_tests=self.config.visible_tests)
        if ep is None:
            return CodingState(**base)
        return CodingState(**base, episode_id=ep.episode_id, step_count=ep.steps,
                           instance_id=ep.instance["instance_id"], done=ep.done, truncated=ep.truncated,
                           submitted=ep.submitted, reward=ep.reward)

    def close(self) -> None:
        self._end()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # --- conveniences --------------------------------------------------------------------

    def call(self, tool: str, **args) -> CodingObservation:
        """step(CodingAction(tool=tool, args=args))."""
        return self.step(CodingAction(tool=tool, args=args))

    @property
    def repo(self) -> Path | None:
        """The agent's working copy (None between episodes)."""
        return self._ep.repo if self._ep else None

    def diff(self) -> str:
        """The agent's changes so far as a git-style diff, test_patch's files left out: its SWE-bench model_patch."""
        return tools.repo_diff(self._ep.pristine, self._ep.repo, exclude=self._ep.test_paths)[0] if self._ep else ""

    # --- internals -----------------------------------------------------------------------

    def _warm(self) -> bool:
        return self.config.warm_tests if self.config.warm_tests is not None else not sandbox.forked_runs()

    def _pick(self, seed: int | None, instance_id: str | None) -> dict:
        if instance_id is not None:
            found = [t for t in self.tasks if t["instance_id"] == instance_id]
            if not found:
                raise ValueError(f"no task {instance_id!r} among the {len(self.tasks)} this environment holds")
            return found[0]
        if not self.tasks:
            raise ValueError("no task: pass reset(instance=record), or tasks= to CodingEnv")
        if seed is not None:
            return self.tasks[seed % len(self.tasks)]
        self._next += 1
        return self.tasks[(self._next - 1) % len(self.tasks)]

    def _end(self) -> None:
        if self._ep is not None:
            _stop_processes(self._ep)  # before the folder goes: nothing runs in it any more
            self._ep.tmp.cleanup()
            self._ep = None

    def _observe(self, action, name, args, result: _Result) -> CodingObservation:
        ep, cfg = self._ep, self.config
        if ep.submitted:
            ep.done = True
        elif ep.steps >= cfg.max_steps:
            ep.done = ep.truncated = True
            ep.reward = 0.0
            result.text += f"\n\n[step limit of {cfg.max_steps} reached: the episode ends unsubmitted, reward 0]"
        if ep.done:
            _stop_processes(ep)  # no run_tests can follow: free its process now, not at the next reset
        error = result.error and _utf8(result.error)
        text = _utf8(f"error: {error}\n{result.text}".strip() if error else result.text)
        shown = {k: _clip(v, INFO_ARG_CHARS) if isinstance(v, str) else v for k, v in args.items()} \
            if isinstance(args, dict) else {}
        obs = CodingObservation(
            text=_clip(text, cfg.max_observation_chars), done=ep.done, reward=ep.reward if ep.done else None,
            info=StepInfo(tool=name and _utf8(name), args=_json_safe(shown), ok=error is None, error=error,
                          tests=result.tests, step=ep.steps, done=ep.done, truncated=ep.truncated,
                          instance_id=ep.instance["instance_id"], episode_id=ep.episode_id, grading=result.grading))
        if self.trace_path is not None:
            outcome = {"resolved": ep.reward == 1.0, "reward": ep.reward, "submitted": ep.submitted,
                       "patch": ep.patch, "tampering": ep.tampering} if ep.done else None
            if self._writer is None:
                self._writer = traces.TraceWriter(self.trace_path)
            self._writer.write(to_step_record(obs, action, ep.messages, trace_id=ep.episode_id, outcome=outcome))
        call_id = f"call_{ep.steps}"
        ep.messages += [{"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": _utf8(str(name)), "arguments": json.dumps(_json_safe(args))}}]},
                        {"role": "tool", "tool_call_id": call_id, "content": obs.text}]
        return obs

    # --- the tools (pydantic checks the arguments: a wrong type or name is a ValidationError) ---

    @validate_call
    def _tool_list_files(self, path: str = ".") -> _Result:
        return _Result(tools.list_files(self._ep.repo, path, limit=self.config.list_max_files))

    @validate_call
    def _tool_view(self, path: str, start: int = 1, end: int | None = None) -> _Result:
        return _Result(tools.view(self._ep.repo, path, start, end, max_lines=self.config.view_max_lines))

    @validate_call
    def _tool_search(self, pattern: str, path: str = ".") -> _Result:
        return _Result(tools.search(self._ep.repo, pattern, path, max_matches=self.config.search_max_matches))

    @validate_call
    def _tool_edit(self, path: str, start: int, end: int, new_text: str) -> _Result:
        return _Result(tools.edit(self._ep.repo, path, start, end, new_text, max_bytes=self.config.max_edit_bytes))

    @validate_call
    def _tool_apply_patch(self, diff: str) -> _Result:
        changed = tools.apply_patch(self._ep.repo, diff, max_bytes=self.config.max_edit_bytes)
        return _Result("patch applied; changed: " + ", ".join(changed))

    @validate_call
    def _tool_run_tests(self, test_ids: list[str] | None = None) -> _Result:
        ids = self._ep.default_tests if test_ids is None else test_ids
        if len(ids) > MAX_TEST_IDS or any(len(t) > 500 or _utf8(t) != t for t in ids):
            raise tools.ToolError(f"at most {MAX_TEST_IDS} test ids, each valid text of up to 500 characters")
        worker, workspace = self._ep.worker, self._ep.workspace
        if workspace is not None:
            run = workspace.run_tests(ids, timeout_s=self.config.real_test_timeout_s)
        elif worker is not None:
            run = worker.run(ids)
        else:
            run = sandbox.run_pytest(self._ep.repo, ids, timeout_s=self.config.test_timeout_s)
        summary = _tests_summary(run.outcomes) if run.outcomes else "no test ran"
        return _Result(f"{summary}\n\n{run.output}", tests=run.outcomes, error=run.error)

    @validate_call
    def _tool_submit(self) -> _Result:
        ep = self._ep
        iid = ep.instance["instance_id"]
        ep.patch, left_out = tools.repo_diff(ep.pristine, ep.repo, exclude=ep.test_paths)
        pred = {"instance_id": iid, "model_name_or_path": "composer-env", "model_patch": ep.patch}
        _stop_processes(ep)  # nothing of the episode's test runs is alive while it is graded
        timeout_s = self.config.real_test_timeout_s if ep.workspace else self.config.test_timeout_s
        summary = swebench.evaluate([pred], [ep.instance], run_id=ep.episode_id, timeout_s=timeout_s,
                                    flag_tampering=self.config.flag_tampering,
                                    grade_uncontained=self.config.grade_uncontained,
                                    grade_scan_only=self.config.grade_scan_only)
        report = summary["instances"][iid]
        # the trace record's tampering carries which layers graded it ("layers": absent where the tests never ran)
        ep.submitted, ep.reward = True, 1.0 if report["resolved"] else 0.0
        ep.tampering = {**report["tampering"], **({"layers": report["layers"]} if "layers" in report else {})}
        status = report.get("tests_status") or {}
        outcomes = {t: ok for kind in ("FAIL_TO_PASS", "PASS_TO_PASS") for ok in (True, False)
                    for t in status.get(kind, {}).get("success" if ok else "failure", [])}
        if not ep.patch.strip():
            text = "submitted without changes to the source: not resolved (reward 0)"
        else:
            verdict = "resolved (reward 1)" if report["resolved"] else "not resolved (reward 0)"
            text = f"submitted: {verdict}; graded tests: {_tests_summary(outcomes) if outcomes else 'none ran'}"
        if left_out:
            text += f"\n(left out of the diff, binary, too large or not a plain name: {', '.join(left_out[:10])})"
        if ep.tampering["reset"]:
            text += f"\n(graded with the base's version of: {', '.join(ep.tampering['reset'][:10])})"
        if ep.tampering["flagged"] and self.config.flag_tampering:
            text += f"\n(scored 0: the change reaches the grading itself: {'; '.join(ep.tampering['flagged'][:5])})"
        if ep.tampering.get("forged"):
            text += f"\n(scored 0: outcomes forged: {len(ep.tampering['forged'])} canary test(s) came out wrong)"
        grading = summary["grading"]
        if not swebench.is_real(ep.instance) and not probes.held_out(ep.instance):  # reset took it on the opt-in
            grading += "; " + probes.opted_in_note(self.config.grade_without_probes)
        return _Result(text, tests=outcomes or None, error=report["error"], grading=grading)


def _stop_processes(ep: _Episode) -> None:
    """End the episode's test processes: the warm worker, or a real instance's container (its files stay)."""
    if ep.worker is not None:
        ep.worker.close()
        ep.worker = None
    if ep.workspace is not None:
        ep.workspace.close()


# --- traces --------------------------------------------------------------------------------


def to_step_record(obs: CodingObservation, action, messages: list[dict], *, trace_id: str,
                   outcome: dict | None = None, source: str = "openenv") -> traces.StepRecord:
    """The composer.traces record of one step: `messages` is the chat before the action (the environment's
    view: the task message, then one assistant tool call and one tool answer per earlier step)."""
    info = obs.info
    tool_call = None
    if isinstance(action, CodingAction):
        tool_call = traces.ToolCall(name=_utf8(action.tool), arguments=_json_safe(action.args), id=f"call_{info.step}")
        text = f'<tool_call>\n{json.dumps({"name": tool_call.name, "arguments": tool_call.arguments})}\n</tool_call>'
    else:  # not even a tool call: keep what was sent
        text = json.dumps(_json_safe(action))
    return traces.StepRecord(
        schema_version=traces.SCHEMA_VERSION, trace_id=trace_id, step=info.step - 1,
        state=traces.State(messages=_json_safe(messages), env={"instance_id": info.instance_id}),
        action=traces.Action(text=text, tool_call=tool_call), observation=obs.text,
        reward=None if obs.reward is None else float(obs.reward), done=obs.done, truncated=info.truncated,
        error=info.error, source=source, task_id=info.instance_id, outcome=outcome,
        meta={"tool": info.tool, "ok": info.ok, "tests": info.tests})


# --- TRL -------------------------------------------------------------------------------------


def _any_arguments(method):
    """A tool method that takes whatever arguments TRL passes: TRL calls tools as method(**arguments), so a call
    with missing or unknown arguments would raise TypeError before the environment saw it; it would then not
    count as a step, and a policy could loop on it past max_steps (002a: 6 of 100 rollouts called edit() with a
    path only until TRL's tool-loop limit cut them). Such a call goes to the environment as it came, which
    answers with an error observation and counts it, as over its other interfaces. functools.wraps keeps the
    method's signature and docstring, from which TRL and tool_schemas() build the tool's JSON schema."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def tool(self, *args, **arguments):
        if not args:  # TRL's call; a positional one comes from Python code and fails there as usual
            try:
                signature.bind(self, **arguments)
            except TypeError:
                return self.env.call(method.__name__, **arguments).text
        return method(self, *args, **arguments)

    return tool


class TRLCodingEnv:
    """A GRPOTrainer `environment_factory`: TRL makes one per rollout and exposes its public methods as tools.

    Dataset rows are SWE-bench records, one string column per field of tasks.SCHEMA_FIELDS, the columns
    SWE-bench Lite has: `Dataset.from_list(probes.rewarded(n, ...)[0])` (embedded tasks that have held-out probes:
    composer.env.defences.probes; a task without any leaves its reward to layers the code under test can rewrite),
    or real Lite records (they run in containers: composer.env.real.container). reset(**row) ignores any other
    column (e.g. a "prompt") and returns the task message, which TRL appends to the prompt's last message (an empty
    user message when the dataset has no "prompt").
    Score rollouts with `reward_funcs=[env_reward]`. There is deliberately no get_reward method: TRL
    would add it as a second reward source next to reward_funcs and count every reward twice.
    Another config: `environment_factory=lambda: TRLCodingEnv(EnvConfig(max_steps=10))`; give each
    instance its own trace_path (one TraceWriter per file).
    """

    def __init__(self, config: EnvConfig | None = None, trace_path: str | Path | None = None):
        self.env = CodingEnv(config=config, trace_path=trace_path)

    def reset(self, **row) -> str:
        missing = [k for k in SCHEMA_FIELDS if k not in row]
        if missing:
            raise ValueError(f"a dataset row must carry the SWE-bench fields; missing {missing}")
        return self.env.reset(instance={k: row[k] for k in SCHEMA_FIELDS}).text

    @_any_arguments
    def list_files(self, path: str = ".") -> str:
        """List the files of the repository, one path per line.

        Args:
            path: A directory (or file) relative to the repository root.
        """
        return self.env.call("list_files", path=path).text

    @_any_arguments
    def view(self, path: str, start: int = 1, end: int | None = None) -> str:
        """Show lines of a file, each prefixed with its line number.

        Args:
            path: The file, relative to the repository root.
            start: The first line to show (1-based).
            end: The last line to show (inclusive); the end of the file when omitted.
        """
        return self.env.call("view", path=path, start=start, end=end).text

    @_any_arguments
    def search(self, pattern: str, path: str = ".") -> str:
        """Search files for a regular expression; one "file:line: text" per matching line.

        Args:
            pattern: A Python regular expression.
            path: A directory or file to search, relative to the repository root.
        """
        return self.env.call("search", pattern=pattern, path=path).text

    @_any_arguments
    def edit(self, path: str, start: int, end: int, new_text: str) -> str:
        """Replace lines start..end (1-based, inclusive) of a file with new_text.

        Args:
            path: The file, relative to the repository root.
            start: The first line to replace.
            end: The last line to replace; start - 1 inserts new_text before line start.
            new_text: The replacement lines ("" deletes the lines).
        """
        return self.env.call("edit", path=path, start=start, end=end, new_text=new_text).text

    @_any_arguments
    def apply_patch(self, diff: str) -> str:
        """Apply a unified diff to the repository (paths a/... and b/..., as git diff writes them).

        Args:
            diff: The unified diff.
        """
        return self.env.call("apply_patch", diff=diff).text

    @_any_arguments
    def run_tests(self, test_ids: list[str] | None = None) -> str:
        """Run tests with pytest and report which pass.

        Args:
            test_ids: Test ids such as "tests/test_x.py::test_y"; the task's tests when omitted.
        """
        return self.env.call("run_tests", test_ids=test_ids).text

    @_any_arguments
    def submit(self) -> str:
        """Finish the task: your changes are graded by the task's tests. Call it once, when done."""
        return self.env.call("submit").text


def env_reward(environments: list[TRLCodingEnv], **kwargs) -> list[float]:
    """GRPO reward function: each rollout's episode reward (1.0 when submitted and resolved, else 0.0)."""
    return [float(e.env.state.reward or 0.0) for e in environments]


def tool_schemas() -> list[dict]:
    """The OpenAI-style JSON schemas of the tools, as TRL renders them into the prompt (via transformers).

    In TRL's order, by name (it lists the factory's methods with inspect.getmembers): a model trained on
    one order of the tool block and prompted with another during GRPO would read a different system turn."""
    env = TRLCodingEnv()
    return [get_json_schema(getattr(env, name)) for name in sorted(TOOLS)]


def gold_edits(instance: dict) -> list[dict]:
    """The gold patch as edit() arguments, one per hunk, last hunk first so earlier line numbers stay valid:
    what a scripted expert does (tests, benchmarks)."""
    edits, path, hunk = [], None, None
    for line in instance["patch"].splitlines(keepends=True):
        if line.startswith("+++ "):
            path = line[4:].strip().split("/", 1)[1]
        elif line.startswith("@@"):
            old = line.split()[1][1:].split(",")
            start, count = int(old[0]), int(old[1]) if len(old) > 1 else 1
            hunk = {"path": path, "start": start if count else start + 1, "end": start + count - 1 if count else start,
                    "new_text": ""}
            edits.append(hunk)
        elif hunk is not None and line[:1] in (" ", "+"):
            hunk["new_text"] += line[1:]
    return sorted(edits, key=lambda e: (e["path"], e["start"]), reverse=True)
