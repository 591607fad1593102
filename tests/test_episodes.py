"""composer.episodes: a turn's episodes call their tools at once, with the serial loop's results.

    .venv/bin/pytest -q tests/test_episodes.py

Real GRPOTrainer generation batches (TRL's own tool loop) with the sampler scripted, run once with TRL's serial loop
and once concurrently: the same completions, tool messages, masks, rewards and per-environment call order. The
toy environment's scripts take the loop through what it does besides calling tools (several calls in one turn, an
unknown tool, arguments that are not a dict, a tool that raises, an overlong result rolled back, the iteration
limit); the coding environment's run edits and real gradings. No timing is asserted: that the calls overlap is
shown by a barrier every episode's first call must reach before any goes on.
"""

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from datasets import Dataset

from composer import episodes
from composer.collection import collect
from composer.env.embedded import tasks
from composer.env.environment import EnvConfig, env_reward, gold_edits

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
call = collect.tool_call_text


@pytest.fixture(scope="module")
def model_path():
    from composer.models import tiny_model

    return tiny_model()


class Ledger:
    """A toy environment: every call is logged (episode, tool, argument, thread) in the test's shared `log`."""

    log: list = []
    barrier: threading.Barrier | None = None  # every episode's first call waits here when set
    resets = 0

    def reset(self, **row):
        Ledger.resets += 1
        self.name, self.first = f"{row['task']}/{Ledger.resets}", True
        self.notes = []

    def _log(self, tool, argument=None):
        if self.first and Ledger.barrier is not None:
            Ledger.barrier.wait(timeout=120)
        self.first = False
        Ledger.log.append((self.name, tool, argument, threading.current_thread().name))

    def note(self, text: str) -> str:
        """Write a note.

        Args:
            text: The note.
        """
        self._log("note", text)
        self.notes.append(text)
        return f"{self.name} noted {text}"

    def boom(self) -> str:
        """Fail."""
        self._log("boom")
        raise RuntimeError(f"{self.name} exploded")

    def big(self) -> str:
        """Answer at length."""
        self._log("big")
        return "word " * 3000


def _turns(*calls) -> str:
    """One assistant turn holding these calls, each a (name, arguments) pair."""
    return "".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>\n'
                   for n, a in calls) + "<|im_end|>"


SCRIPTS = {
    "several": [_turns(("note", {"text": "a"}), ("note", {"text": "b"})),
                _turns(("boom", {}), ("note", {"text": "c"})), "Done.<|im_end|>"],
    "broken": [_turns(("note", {"text": "x"})), _turns(("nope", {}), ("note", {"text": "y"})),
               _turns(("note", "not a dict"), ("note", {"text": "z"})), "Done.<|im_end|>"],
    "overlong": [_turns(("note", {"text": "p"})), _turns(("big", {}), ("note", {"text": "q"})),
                 _turns(("note", {"text": "never"}))],
    "endless": [_turns(("note", {"text": str(k)})) for k in range(6)],
}


def _sampler(trainer, scripts):
    tok = trainer._tokenizer

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        out = []
        for ids in prompt_ids:
            text = tok.decode(ids, skip_special_tokens=False)
            task = next(t for t in scripts if f"task {t}." in text)
            turn = text.count("<|im_start|>assistant") - 1  # the prompt ends with the next turn's header
            script = scripts[task]
            out.append(tok(script[min(turn, len(script) - 1)], add_special_tokens=False).input_ids)
        return out, None

    trainer._generate_single_turn = generate


def _toy_batch(model_path, tmp_path, concurrent: bool):
    from trl import GRPOConfig, GRPOTrainer

    from composer.models import load_tokenizer

    rows = [{"prompt": [{"role": "user", "content": f"Do task {t}."}], "task": t} for t in SCRIPTS]
    args = GRPOConfig(str(tmp_path / ("c" if concurrent else "s")), use_cpu=True, bf16=False, report_to=[],
                      per_device_train_batch_size=8, num_generations=2, max_completion_length=600,
                      max_tool_calling_iterations=3, disable_tqdm=True, save_strategy="no")
    cls = episodes.with_concurrent_tools(GRPOTrainer) if concurrent else GRPOTrainer
    trainer = cls(str(model_path), reward_funcs=[lambda environments, **kw: [len(e.notes) for e in environments]],
                  args=args, train_dataset=Dataset.from_list(rows), processing_class=load_tokenizer(model_path),
                  environment_factory=Ledger)
    _sampler(trainer, SCRIPTS)
    generated = []
    generate = trainer._generate

    def keep(prompts):
        out = generate(prompts)
        generated.append(out)
        return out

    trainer._generate = keep
    Ledger.log, Ledger.resets = [], 0
    Ledger.barrier = threading.Barrier(2 * len(rows)) if concurrent else None
    try:
        output = trainer._generate_and_score_completions([r for r in rows for _ in range(2)])
    finally:
        Ledger.barrier = None
    prompt_ids, completion_ids, tool_mask, completions = generated[0][:4]
    return dict(completions=completions, completion_ids=completion_ids, tool_mask=tool_mask,
                rewards=[len(e.notes) for e in trainer.environments], advantages=output["advantages"].tolist(),
                metrics={k: v for k, v in trainer._metrics["train"].items() if k.startswith("tools/")},
                log=list(Ledger.log))


def test_concurrent_tools_give_the_serial_loops_rollouts_calls_and_rewards(model_path, tmp_path):
    serial = _toy_batch(model_path, tmp_path, concurrent=False)
    concurrent = _toy_batch(model_path, tmp_path, concurrent=True)
    for key in ("completions", "completion_ids", "tool_mask", "rewards", "advantages", "metrics"):
        assert concurrent[key] == serial[key], key
    # each environment saw the same calls in the same order; only the threads differ
    assert [e[:3] for e in concurrent["log"]] != [e[:3] for e in serial["log"]]  # interleaved across episodes ...
    for name in {e[0] for e in serial["log"]}:
        assert [e[:3] for e in concurrent["log"] if e[0] == name] == [e[:3] for e in serial["log"] if e[0] == name]
    assert {e[3] for e in serial["log"]} == {"MainThread"}
    assert all(e[3].startswith("composer-episodes") for e in concurrent["log"])  # ... and run off the loop's thread
    # the loop's own edges happened: an error answer, an unknown tool, bad arguments, a rollback, the limit
    tool_texts = [m["content"] for c in serial["completions"] for m in c if m["role"] == "tool"]
    assert any("exploded" in t for t in tool_texts) and any("Tool nope not found" in t for t in tool_texts)
    assert any("argument after ** must be a mapping" in t for t in tool_texts)
    calls = {(e[0].split("/")[0], e[1], e[2]) for e in serial["log"]}
    assert ("overlong", "note", "q") in calls and ("overlong", "note", "never") not in calls  # ran, rolled back
    assert not any(m["role"] == "tool" and "word word" in m["content"] for c in serial["completions"] for m in c)
    assert ("endless", "note", "2") in calls and ("endless", "note", "3") not in calls  # 3 iterations
    assert serial["rewards"] == [3, 3, 3, 3, 2, 2, 3, 3]


def test_a_call_the_loop_never_makes_is_not_prefetched_and_a_mismatch_stops_the_step():
    completions = [[{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
        {"type": "function", "function": {"name": "g", "arguments": {"x": 2}}},  # not a tool of the episode
        {"type": "function", "function": {"name": "f", "arguments": [3]}},  # ** would refuse it
        {"type": "other", "function": {"name": "f", "arguments": {}}}]}],
        [{"role": "assistant", "content": "no call"}]]
    ran = []
    tools = [{"f": lambda **a: ran.append(a) or len(ran)}, {"f": lambda **a: ran.append(a)}]
    with ThreadPoolExecutor(2) as pool:
        prefetch = episodes._Prefetch(completions, tools, pool)
        stand_ins = prefetch.stand_ins()
        assert stand_ins[0]["f"](x=1) == 1 and ran == [{"x": 1}] and prefetch.finish() == []
        with pytest.raises(episodes.OutOfStep, match="nothing was prefetched"):
            stand_ins[1]["f"](x=5)  # episode 1 made no call this turn (and its message is old now)


def test_the_coding_environment_edits_and_grades_the_same_either_way(model_path, tmp_path):
    records = tasks.generate(2, seed=0)
    solved, unsolved = records
    first = gold_edits(unsolved)[0]
    plans = {solved["instance_id"]: [*(call("edit", **e) for e in gold_edits(solved)), call("submit")],
             unsolved["instance_id"]: [call("view", path=first["path"], start=1, end=3),
                                       call("edit", path=first["path"], start=1, end=0, new_text="# here\n"),
                                       call("submit")]}
    runs = {}
    for concurrent in (False, True):
        trainer = collect.build_trainer(
            model_path, records, tmp_path / str(concurrent), prompts_per_step=2, generations=2, checkpoint=False,
            env_config=EnvConfig(max_steps=8, max_observation_chars=1200, test_timeout_s=10.0),
            max_completion_length=4000, concurrent_tools=concurrent)
        assert isinstance(trainer, episodes.ConcurrentTools) == concurrent
        collect.scripted_sampler(plans)(trainer)
        rows = [r for r in collect.dataset(records) for _ in range(2)]
        try:
            trainer._generate_and_score_completions(rows)
            runs[concurrent] = ([[m["content"] for m in e.env._ep.messages if m["role"] == "tool"]
                                 for e in trainer.environments], env_reward(trainer.environments))
        finally:
            collect.close_environments(trainer)
    assert runs[True] == runs[False]
    observations, rewards = runs[True]
    assert rewards == [1.0, 1.0, 0.0, 0.0] and all("submitted" in o[-1] for o in observations)
