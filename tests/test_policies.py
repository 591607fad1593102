"""The scripted expert, the demonstration format and the model rollout loop.

    .venv/bin/pytest tests/test_policies.py

Tasks are real embedded tasks and every episode runs in the real environment (sandboxed pytest),
so a reward of 1.0 means the hidden tests passed. Models are a stub that replays fixed text
(the loop's parsing and error paths) and an untrained tiny Qwen3 (the generation path).
"""

import copy
import json
import math
import re

import pytest
import torch
from transformers import DynamicCache

from composer import policies
from composer.env.embedded import tasks
from composer.env.environment import CodingEnv, EnvConfig
from composer.models import build_tokenizer, load_model, tiny_model


pytestmark = pytest.mark.usefixtures("module_cache")


@pytest.fixture(scope="module")
def records():
    return tasks.generate(5, seed=0, split="test")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture
def env(records):
    env = CodingEnv(records, policies.ENV_CONFIG)
    yield env
    env.close()


def test_expert_solves_tasks_by_the_short_route(env, records):
    for i, record in enumerate(records):
        messages, reward, info = policies.demonstrate(env, record, seed=i)
        assert reward == 1.0 and info["submitted"], record["instance_id"]
        assert [name for name, _ in policies.tool_calls(messages)] == ["run_tests", "view", "edit", "run_tests", "submit"]
        edit = policies.tool_calls(messages)[2][1]
        source = messages[5]["content"].split("\n", 1)[1]  # the view: "path (lines ...)" then numbered lines
        first = source.splitlines()[edit["start"] - 1].split("| ", 1)[1]
        assert first.startswith(("def ", "class ")) and edit["new_text"].startswith(first.split("(")[0])  # a whole unit


def test_gold_fix_rewrites_the_one_unit_the_patch_touches(env, records):
    for record in records:
        env.reset(instance=record)
        path = policies.gold_edits(record)[0]["path"]
        source = (env.repo / path).read_text()
        fix = policies.gold_fix(record, source)
        assert policies._apply(source, [fix]) == policies._apply(source, policies.gold_edits(record))
        assert fix["new_text"].startswith(("def ", "class ")) and fix["end"] > fix["start"]


def test_gold_fix_refuses_a_patch_across_two_units():
    source = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    patch = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,6 +1,6 @@\n def f():\n-    return 1\n+    return 3\n"
             " \n \n def g():\n-    return 2\n+    return 4\n")
    with pytest.raises(ValueError, match="2 top-level units"):
        policies.gold_fix({"instance_id": "x", "patch": patch}, source)
    one = patch.replace("-    return 2\n+    return 4\n", "     return 2\n")
    assert policies.gold_fix({"instance_id": "x", "patch": one}, source) == {
        "path": "m.py", "start": 1, "end": 2, "new_text": "def f():\n    return 3\n"}


def test_noisy_expert_takes_detours_and_still_submits(env, records):
    noise = policies.Noise(explore=1.0, wrong_edit=1.0, skip_rerun=1.0)
    names = []
    for i, record in enumerate(records):
        messages, reward, info = policies.demonstrate(env, record, noise=noise, seed=i)
        assert info["submitted"] and reward == 1.0, record["instance_id"]
        names.append([name for name, _ in policies.tool_calls(messages)])
        assert names[-1][-2] != "run_tests"  # skip_rerun=1: straight from the last edit to submit
    assert all("search" in n or "list_files" in n for n in names)  # every episode explores a little first
    assert any(n.count("edit") == 2 for n in names)  # some got a wrong first edit, then the fix


def test_demonstrations_render_in_qwen3_format_and_reparse(env, records, tokenizer):
    messages, _, _ = policies.demonstrate(env, records[0], noise=policies.Noise(explore=1.0, wrong_edit=1.0))
    text = policies.render(tokenizer, messages)
    assert text.startswith("<|im_start|>system\n" + policies.SYSTEM + "\n\n# Tools\n")
    assert '{"type": "function", "function": {"name": "edit"' in text  # the environment's schemas are in the prompt
    assert text.count("<tool_response>") == (len(messages) - 2) // 2
    run_tests = '<|im_start|>assistant\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call><|im_end|>\n'
    assert run_tests in text
    blocks = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", text, re.DOTALL)
    assert [policies.parse_tool_call(b) for b in blocks] == policies.tool_calls(messages)


def test_parse_tool_call_rejects_malformed_text():
    assert policies.parse_tool_call('<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>') == (
        "view", {"path": "a.py"})
    assert policies.parse_tool_call('<tool_call>{"name": "submit", "arguments": "{}"}') == ("submit", {})
    for text in ["no call", "<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
                 '<tool_call>{"name": "view", "arguments": [1]}</tool_call>', "<tool_call>[]</tool_call>"]:
        assert policies.parse_tool_call(text) is None, text


class ScriptedModel:
    """Stands in for a causal LM that replays a fixed list of completions, one a turn: the tiny Qwen3 runs (so its
    caches and positions are real), and its logits are replaced by the script's next token."""

    def __init__(self, tokenizer, completions):
        self.model = load_model(tiny_model("policy-test"))
        self.config, self.device = copy.copy(self.model.config), self.model.device
        self.config.max_position_embeddings = 1 << 20  # the script's turns are never cut for context
        self.tokenizer, self.completions, self.pending = tokenizer, list(completions), []

    def __call__(self, input_ids, **kwargs):
        out = self.model(input_ids=input_ids, **kwargs)
        if kwargs.get("logits_to_keep") == 1:  # prefill: a new turn
            self.pending = self.tokenizer(self.completions.pop(0) + "<|im_end|>", add_special_tokens=False).input_ids
        out.logits = torch.full_like(out.logits, -math.inf)
        out.logits[..., self.pending.pop(0)] = 0.0
        return out


@pytest.fixture
def prompts(monkeypatch):
    """The prompt of every turn, as the rollout renders it."""
    seen, prefill = [], policies.prefill
    monkeypatch.setattr(policies, "prefill", lambda model, ids, cache: seen.append(ids) or prefill(model, ids, cache))
    return seen


def test_rollout_survives_malformed_output(env, records, tokenizer, prompts):
    model = ScriptedModel(tokenizer, [
        "Let me look. <tool_call>\n{\"name\": \"view\", \"arguments\": {\"path\": ",  # cut-off JSON
        '<tool_call>\n{"name": "no_such_tool", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'])
    messages, reward, info = policies.rollout(model, tokenizer, env, records[0], max_steps=5)
    assert info["steps"] == 3 and info["malformed"] == 1 and info["submitted"] and reward == 0.0
    assert messages[2] == {"role": "assistant", "content": "Let me look. <tool_call>\n{\"name\": \"view\", "
                                                           "\"arguments\": {\"path\": "}
    assert messages[3]["content"].startswith("error: unknown tool ''")
    assert messages[5]["content"].startswith("error: unknown tool 'no_such_tool'")
    assert "without changes" in messages[7]["content"]
    # each prompt is the canonical render of the conversation so far, ending in the generation prompt
    assert tokenizer.decode(prompts[2]) == policies.render(tokenizer, messages[:6], add_generation_prompt=True)


def test_rollout_replaying_the_expert_resolves_the_task(env, records, tokenizer):
    demo, _, _ = policies.demonstrate(env, records[1])
    blocks = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", policies.render(tokenizer, demo), re.DOTALL)
    model = ScriptedModel(tokenizer, blocks)
    messages, reward, info = policies.rollout(model, tokenizer, env, records[1], max_new_tokens=1024)
    assert reward == 1.0 and info["malformed"] == 0
    assert policies.tool_calls(messages) == policies.tool_calls(demo)


def greedy_turn(model, tokenizer, ids, cache, max_new_tokens=6):
    logits = policies.prefill(model, ids, cache)
    return policies.decode(model, [cache], [logits], eos=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                           max_new_tokens=max_new_tokens)[0]


@torch.no_grad()
def test_a_turn_reuses_the_cache_without_changing_tokens(tokenizer):
    model = load_model(tiny_model("policy-test"))
    messages = [{"role": "system", "content": policies.SYSTEM}, {"role": "user", "content": "Fix calc/ops.py"}]
    cache = DynamicCache(config=model.config)
    first = greedy_turn(model, tokenizer, policies._prompt_ids(tokenizer, messages), cache)
    before = cache.get_seq_length()
    messages += [policies.tool_call_message("run_tests", {}, "call_1"),
                 policies.tool_message("3 failed", "call_1", "run_tests")]
    ids = policies._prompt_ids(tokenizer, messages)
    reused = greedy_turn(model, tokenizer, ids, cache)
    fresh = greedy_turn(model, tokenizer, ids, DynamicCache(config=model.config))
    assert len(first) == 6 and reused == fresh
    assert cache.get_seq_length() == len(ids) and before == len(policies._prompt_ids(tokenizer, messages[:2]))


@torch.no_grad()
def test_a_batched_turn_gives_each_row_what_it_gets_alone(tokenizer):
    """Rows of different lengths decoded together (their caches left-padded into one batch, rows leaving as they
    end): greedy, each row's tokens are its tokens alone; sampled, each row draws from its own RNG, so its tokens
    follow its seed, not its batch. The rows' own caches are left as they were."""
    model = load_model(tiny_model("policy-test"))
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts = [policies._prompt_ids(tokenizer, [{"role": "system", "content": policies.SYSTEM},
                                                {"role": "user", "content": text}])
               for text in ("Fix calc/ops.py", "The test for add fails: assert -1 == 3. Find the bug.", "Go")]
    assert len({len(p) for p in prompts}) == 3

    def turns(rows, **kwargs):
        caches = [DynamicCache(config=model.config) for _ in rows]
        logits = [policies.prefill(model, ids, cache) for ids, cache in zip(rows, caches)]
        out = policies.decode(model, caches, logits, eos=eos, max_new_tokens=8, **kwargs)
        assert [c.get_seq_length() for c in caches] == [len(ids) for ids in rows]
        return out

    together = turns(prompts)
    assert together == [turns([p])[0] for p in prompts] and all(len(t) == 8 for t in together)

    def sampled(rows, seeds):
        return turns(rows, temperature=1.0, rngs=[torch.Generator().manual_seed(s) for s in seeds])

    batch = sampled(prompts, [1, 2, 3])
    assert batch == [sampled([p], [s])[0] for p, s in zip(prompts, [1, 2, 3])]
    assert sampled(prompts[:1], [1]) != sampled(prompts[:1], [4]) and batch[0] != together[0]


def test_a_row_that_ends_leaves_the_batch(tokenizer):
    """A row stops at its eos (kept) while the others go on to the budget (sampled rows, so the tokens vary)."""
    model = load_model(tiny_model("policy-test"))
    prompts = [policies._prompt_ids(tokenizer, [{"role": "user", "content": t}]) for t in ("a b c", "Fix it")]
    caches = [DynamicCache(config=model.config) for _ in prompts]
    logits = [policies.prefill(model, ids, cache) for ids, cache in zip(prompts, caches)]

    def turns(eos):
        rngs = [torch.Generator().manual_seed(s) for s in (1, 2)]
        return policies.decode(model, caches, logits, eos=eos, max_new_tokens=8, temperature=1.0, rngs=rngs)

    free = turns(eos=-1)
    stops = [k for k in range(1, 7) if free[0][k] not in free[0][:k] + free[1]]
    assert stops, free  # a token of the first row's that the second never draws
    assert turns(eos=free[0][stops[0]]) == [free[0][:stops[0] + 1], free[1]]


def test_rollouts_in_lockstep_are_the_rollouts_one_by_one(records, tokenizer):
    """Three sampled episodes on two environments (a batch of 2, then 1) end as they do one at a time."""
    model = load_model(tiny_model("policy-test"))
    config = EnvConfig(max_steps=2, max_observation_chars=400)
    envs = [CodingEnv(records, config) for _ in range(2)]
    episodes = [(records[0], 7), (records[1], 8), (records[0], 9)]
    kwargs = dict(max_steps=2, temperature=1.0, max_new_tokens=6)
    try:
        together = policies.rollouts(model, tokenizer, envs, episodes, **kwargs)
        alone = [policies.rollouts(model, tokenizer, envs[:1], [e], **kwargs)[0] for e in episodes]
    finally:
        for env in envs:
            env.close()
    assert together == alone
    assert [r[2]["instance_id"] for r in together] == [records[0]["instance_id"], records[1]["instance_id"],
                                                       records[0]["instance_id"]]
    assert together[0][0] != together[2][0]  # same task, other seed: the seeds were each episode's own


def test_evaluate_returns_pass_at_1_per_task(records):
    path = tiny_model("policy-test")
    config = EnvConfig(max_steps=2, max_observation_chars=400)
    scores = policies.evaluate(path, records[:2], k=1, env_config=config, max_new_tokens=4)
    assert list(scores) == [r["instance_id"] for r in records[:2]]
    assert all(0.0 <= s <= 1.0 for s in scores.values())
    scores, runs = policies.evaluate(path, records[:1], k=2, n=3, temperature=1.0, env_config=config,
                                     max_new_tokens=4, return_rollouts=True)
    assert len(runs) == 3 and all(r[3]["steps"] == 2 for r in runs)
    assert json.dumps(runs[0][1])  # rollouts are plain JSON, ready for a trace file


def test_evaluation_shards_together_are_the_whole_evaluation(records):
    """Sampled rollouts, 2 per task, over 3 tasks: shards (0, 2) and (1, 2) give exactly the one-process rollouts,
    each task drawn with the seeds it has in the whole list."""
    path = tiny_model("policy-test")
    config = EnvConfig(max_steps=2, max_observation_chars=400)
    kwargs = dict(k=1, n=2, temperature=1.0, env_config=config, max_new_tokens=6, return_rollouts=True)
    whole = policies.evaluate(path, records[:3], **kwargs)[1]
    shards = [policies.evaluate(path, records[:3], shard=(rank, 2), **kwargs)[1] for rank in (0, 1)]
    assert [r[0] for r in shards[0]] == [records[0]["instance_id"]] * 2 + [records[2]["instance_id"]] * 2
    assert shards[0][:2] + shards[1] + shards[0][2:] == whole
    assert len({json.dumps(r[1]) for r in whole}) > 1  # sampled: the rollouts differ, so the seeds are checked
    with pytest.raises(ValueError, match=r"shard \(2, 2\)"):
        policies.evaluate(path, records[:1], shard=(2, 2))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        policies.evaluate(path, records[:1], batch_size=0)
