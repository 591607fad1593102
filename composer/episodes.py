"""Episodes that do not wait in line: each tool-calling turn runs every episode's tool calls at once.

    from trl import GRPOTrainer
    from composer.episodes import with_concurrent_tools
    trainer = with_concurrent_tools(GRPOTrainer)(model, reward_funcs=..., args=..., environment_factory=...)
    # composer.collection.collect.build_trainer does this by default (concurrent_tools=True): 002a's collection, 004's arms
    python -m composer bench episodes      # one step's tools and gradings, serial against concurrent

TRL 1.16's tool loop (GRPOTrainer._tool_call_loop) runs a turn's tool calls one episode after another, so a step's
gradings (submit grades inside the loop: a sandboxed pytest run here, a fresh container live) add up: 16 episodes
take 16 gradings' time. Here, when the loop asks for a turn's first tool result, every episode's calls of that turn
start in a thread pool, one worker per episode running its calls in their own order (an edit before a run_tests
stays before it); the loop then takes the results in its own order. Generation stays batched per turn, and
rollouts, tool messages, failure counts and rewards are the serial loop's: each environment gets the same calls in
the same order, and each call's result or exception is handed back as if it had run there and then.

The hook, and why: the loop has no method of its own between parsing a turn's completions and calling their tools,
and copying it (~250 lines of masks, rollbacks and image plumbing) would fork TRL. It does look up each episode's
tools in self._sync_tool_dicts, so for the loop's duration those become stand-ins that answer from the prefetch.
Which episodes call what in a turn is read off the `completions` lists the loop extends in place: an episode is in
the turn when its last message is newer than the previous turn's start and carries tool calls (one whose overlong
results were rolled back is back at its old length; one that stopped calling tools ends on a message without calls).
Only the calls the serial loop would make are prefetched (type "function", a synchronous tool of that episode,
arguments a dict); async tools stay on TRL's event loop. A stand-in asked for a call that was not prefetched, or a
prefetched call never asked for, means this mirror of TRL (pinned: 1.16) is wrong: the step stops (OutOfStep).

Thread safety: TRL gives every rollout its own environment, and one environment's calls never overlap (one worker
runs them, in order). What environments share is built for it: the sandbox's fork server sends under a lock,
sandbox uids are O_EXCL files, each grading has its own temporary folder (composer.policies.rollouts already steps
environments side by side). A standalone tool (GRPOTrainer's `tools=`, one function for every episode) would run
from several threads at once: it must be thread-safe (this project passes none). The pool lives as long as the
trainer: a process a tool starts (a warm pytest worker under bubblewrap) dies with the thread that started it.
"""

import functools
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait

WORKERS = 16  # threads per process: a turn's episodes at once, up to this many (a process's share of a live step)


class OutOfStep(BaseException):
    """The tool loop asked for other calls than were prefetched. Not an Exception: TRL's loop turns those into the
    tool's answer and goes on."""


def _runnable(tool_call, tools: dict) -> tuple[str, dict] | None:
    """(name, arguments) of a call the serial loop would make to one of `tools` (synchronous ones), else None."""
    if not isinstance(tool_call, dict) or tool_call.get("type") != "function":
        return None
    function = tool_call.get("function")
    if not isinstance(function, dict):
        return None
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or name not in tools or not isinstance(arguments, dict) \
            or not all(isinstance(k, str) for k in arguments):  # else `**arguments` fails before the tool runs
        return None
    return name, arguments


def _run(calls: list) -> deque:
    """One episode's calls of a turn, in order: (True, result) or (False, the exception) each."""
    out = deque()
    for tool, arguments in calls:
        try:
            out.append((True, tool(**arguments)))
        except Exception as e:  # the serial loop catches these too, and goes on to the episode's next call
            out.append((False, e))
    return out


class _Prefetch:
    """One run of the tool loop: the stand-in tools and the calls running behind them."""

    def __init__(self, completions: list, tool_dicts: list[dict], pool: ThreadPoolExecutor):
        self.completions, self.tool_dicts, self.pool = completions, tool_dicts, pool
        self.seen = [0] * len(completions)  # each episode's message count when the current turn started
        self.turn = {}  # episode -> [the calls not yet asked for, their future]

    def stand_ins(self) -> list[dict]:
        return [{name: self._stand_in(i, name) for name in tools} for i, tools in enumerate(self.tool_dicts)]

    def _stand_in(self, i: int, name: str):
        @functools.wraps(self.tool_dicts[i][name])  # its name: TypeErrors of `**arguments` quote it, as TRL's call's
        def tool(**arguments):
            return self._answer(i, name, arguments)
        return tool

    def _start_turn(self) -> None:
        for i, messages in enumerate(self.completions):
            last = messages[-1] if len(messages) > self.seen[i] else {}
            tools = self.tool_dicts[i]
            calls = [c for c in (_runnable(call, tools) for call in last.get("tool_calls") or []) if c]
            if calls:
                self.turn[i] = [deque(calls), self.pool.submit(_run, [(tools[n], a) for n, a in calls])]
        self.seen = [len(messages) for messages in self.completions]

    def _answer(self, i: int, name: str, arguments: dict):
        if not self.turn:  # every call of the last turn was taken: this is the next turn's first
            self._start_turn()
        calls, future = self.turn.get(i, (None, None))
        if not calls or not _same(calls[0], (name, arguments)):
            self.finish()
            raise OutOfStep(f"the tool loop called {name} for episode {i}, but "
                            + (f"{calls[0][0]} was prefetched" if calls else "nothing was prefetched for it"))
        calls.popleft()
        ok, value = future.result().popleft()
        if not calls:
            del self.turn[i]
        if ok:
            return value
        raise value

    def finish(self) -> list:
        """Wait for whatever still runs (nothing may touch an environment after the loop); the calls never asked for."""
        wait([future for _, future in self.turn.values()])
        return [(i, name) for i, (calls, _) in self.turn.items() for name, _ in calls]


def _same(a, b) -> bool:
    return a == b or repr(a) == repr(b)  # repr: a float("nan") argument is not == itself


class ConcurrentTools:
    """The mixin (see the module docstring); with_concurrent_tools puts it in front of a GRPOTrainer class.
    tool_workers <= 1 runs TRL's serial loop untouched."""

    tool_workers = WORKERS

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, *rest):
        if self.tool_workers <= 1:
            return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, *rest)
        if getattr(self, "_episode_pool", None) is None:
            self._episode_pool = ThreadPoolExecutor(self.tool_workers, thread_name_prefix="composer-episodes")
        own = self._sync_tool_dicts
        prefetch = _Prefetch(completions, own, self._episode_pool)
        self._sync_tool_dicts = prefetch.stand_ins()
        try:
            out = super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, *rest)
        finally:
            self._sync_tool_dicts = own
            left = prefetch.finish()
        if left:
            raise OutOfStep(f"prefetched calls the tool loop never asked for (episode, tool): {left[:5]}")
        return out


def with_concurrent_tools(trainer_cls: type, workers: int = WORKERS) -> type:
    """`trainer_cls` (GRPOTrainer or a subclass) whose tool loop runs a turn's episodes at once, `workers` threads."""
    return type(f"ConcurrentTools{trainer_cls.__name__}", (ConcurrentTools, trainer_cls), {"tool_workers": workers})
