"""ComposerTrainer: spike 005's gate (exact GRPO reduction, accumulation invariance, a 5-step run)."""

import math
import os

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from composer.models import load_model, tiny_model
from composer.trainer import (ComposerConfig, ComposerTrainer, add_reference_logps, completion_logits, masks_cost_more,
                              unmasked_rows_logps)
from composer.trainer_checks import build_trainer

os.environ["HF_HUB_OFFLINE"] = "1"
PROMPTS = [
    [{"role": "user", "content": "Fix the bug in add(a, b)."}],
    [{"role": "user", "content": "Which test fails, and why?"}],
]
COMMON = dict(use_cpu=True, bf16=False, report_to=[], save_strategy="no", logging_steps=1, seed=0,
              max_completion_length=8, learning_rate=1e-3, disable_tqdm=True)
CHANNELS = dict(hint_distill_weight=0.5, trace_replay_weight=0.5)


def reward(completions, **kwargs):
    """Deterministic and varied within a group, so advantages are non-zero."""
    return [float(len(c[0]["content"]) % 3) / 2 for c in completions]


@pytest.fixture(scope="module")
def model_path():
    return tiny_model()


@pytest.fixture(scope="module")
def train_dataset():
    return Dataset.from_dict({"prompt": PROMPTS, "hint": ["return a + b", "run the tests first"]})


@pytest.fixture(scope="module")
def pairs(model_path, tokenizer):
    rows = Dataset.from_dict({
        "prompt": PROMPTS * 2,
        "chosen": ['<tool_call>{"name": "run_tests"}</tool_call>', "return a + b", "look at add", "pytest -x"],
        "rejected": ["submit", "return a - b", "give up", "rm -rf tests"],
    })
    return add_reference_logps(rows, load_model(model_path), tokenizer)


def make(trainer_cls, model_path, tokenizer, train_dataset, tmp_path, *, pairs=None, **config):
    return build_trainer(trainer_cls, model_path, str(tmp_path / "out"), train_dataset, tokenizer, pairs=pairs,
                         **{**COMMON, **config})


def generation_batch(trainer, n):
    torch.manual_seed(0)
    rows = [{"prompt": PROMPTS[i // 4 % 2], "hint": "return a + b"} for i in range(n)]
    return trainer._generate_and_score_completions(rows)


def loss_and_grads(trainer, inputs):
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


class ForwardCounter:
    def __init__(self, model):
        self.n = 0
        self.handle = model.register_forward_hook(self)

    def __call__(self, *args):
        self.n += 1


# ---------------------------------------------------------------- configuration is refused early


@pytest.mark.parametrize("field,value,message", [
    ("hint_distill_weight", -0.1, "hint_distill_weight"),
    ("trace_replay_weight", -1.0, "trace_replay_weight"),
    ("hint_distill_mode", "logits", "hint_distill_mode"),
    ("hint_distill_divergence", 1.5, "hint_distill_divergence"),
    ("hint_distill_divergence", 0.5, "sampled_token"),
    ("hint_teacher", "oracle", "hint_teacher"),
    ("trace_replay_beta", 0.0, "trace_replay_beta"),
    ("trace_replay_nll_weight", -0.5, "trace_replay_nll_weight"),
])
def test_bad_config_names_the_field(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        ComposerConfig(str(tmp_path), use_cpu=True, **{field: value})


def test_topk_mode_needs_k(tmp_path):
    with pytest.raises(ValueError, match="hint_distill_topk"):
        ComposerConfig(str(tmp_path), use_cpu=True, hint_distill_mode="topk")


def test_bad_datasets_refused_before_the_model_loads(tmp_path, train_dataset, pairs):
    # A model path that does not exist: reaching the loader would raise OSError, not ValueError.
    missing = str(tmp_path / "no-such-model")
    cases = [
        (dict(trace_replay_weight=1.0), None, train_dataset, "pairs_dataset is required"),
        (dict(trace_replay_weight=1.0), pairs.remove_columns("ref_chosen_logps"), train_dataset, "ref_chosen_logps"),
        (dict(hint_distill_weight=1.0), None, train_dataset.remove_columns("hint"), "hint_column 'hint'"),
    ]
    for config, pairs_dataset, dataset, message in cases:
        args = ComposerConfig(str(tmp_path), use_cpu=True, report_to=[], **config)
        with pytest.raises(ValueError, match=message):
            ComposerTrainer(missing, reward_funcs=[reward], args=args, train_dataset=dataset,
                            pairs_dataset=pairs_dataset)


def test_plain_grpo_config_is_refused(tmp_path, train_dataset):
    with pytest.raises(ValueError, match="ComposerConfig"):
        ComposerTrainer("unused", reward_funcs=[reward], args=GRPOConfig(str(tmp_path), use_cpu=True),
                        train_dataset=train_dataset)


# ---------------------------------------------------------------- exact reduction to GRPO


def test_zero_weights_reduce_exactly_to_grpo(model_path, tokenizer, train_dataset, pairs, tmp_path):
    stock = make(GRPOTrainer, model_path, tokenizer, train_dataset, tmp_path / "a")
    # Pairs and hints are supplied but their weights are 0: nothing of theirs may run.
    ours = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "b", pairs=pairs)
    counts = []
    for trainer in (stock, ours):
        counter = ForwardCounter(trainer.model)
        generation_batch(trainer, 4)
        counts.append(counter.n)
        counter.handle.remove()
    assert counts[0] == counts[1] > 0

    inputs = generation_batch(stock, 4)
    stock_counter, ours_counter = ForwardCounter(stock.model), ForwardCounter(ours.model)
    stock_loss, stock_grads = loss_and_grads(stock, inputs)
    our_loss, our_grads = loss_and_grads(ours, inputs)
    assert stock_counter.n == ours_counter.n == 1
    assert abs(stock_loss.item() - our_loss.item()) <= 1e-6
    assert stock_grads.keys() == our_grads.keys() and stock_grads
    for name, grad in stock_grads.items():
        assert (grad - our_grads[name]).abs().max().item() <= 1e-6, name


def test_channels_change_the_loss(model_path, tokenizer, train_dataset, pairs, tmp_path):
    """The reduction test above must be able to fail: with the channels on, the loss differs."""
    stock = make(GRPOTrainer, model_path, tokenizer, train_dataset, tmp_path / "a")
    ours = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "b", pairs=pairs, **CHANNELS)
    inputs = generation_batch(ours, 4)
    stock_inputs = {k: v for k, v in inputs.items() if not k.startswith("hint_")}
    assert abs(loss_and_grads(stock, stock_inputs)[0].item() - loss_and_grads(ours, inputs)[0].item()) > 1e-4


# ---------------------------------------------------------------- gradient accumulation


@pytest.mark.parametrize("mode,extra,size", [
    ("sampled_token", {}, 2), ("topk", {"hint_distill_topk": 5, "hint_distill_divergence": 0.5}, 2),
    ("sampled_token", {}, 1)])
def test_gradient_accumulation_invariance(model_path, tokenizer, train_dataset, pairs, tmp_path, mode, extra, size):
    """One micro-batch of 8 rollouts == two accumulated micro-batches of 4, with the same trace_replay_batch_size:
    the step's pairs are shared out over its micro-batches (at 1 pair, only the second one carries it)."""
    config = dict(hint_distill_mode=mode, trace_replay_batch_size=size, **CHANNELS, **extra)
    whole = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "a", pairs=pairs,
                 per_device_train_batch_size=8, **config)
    split = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "b", pairs=pairs,
                 per_device_train_batch_size=4, gradient_accumulation_steps=2, **config)
    split.current_gradient_accumulation_steps = 2
    # One prompt for all rows: TRL scores left-padded prompts without position ids, so mixing prompt
    # lengths would make a row's log-probs depend on its micro-batch, which is not what is tested here.
    torch.manual_seed(0)
    inputs = whole._generate_and_score_completions([{"prompt": PROMPTS[0], "hint": "return a + b"}] * 8)

    _, expected = loss_and_grads(whole, inputs)
    split.model.zero_grad()
    for half in split_tensor_dict(inputs, 2):
        split.compute_loss(split.model, half).backward()
    assert expected
    for name, param in split.model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], atol=1e-6, rtol=1e-4, msg=name)
    assert split._pair_cursor == whole._pair_cursor == size  # the step's pairs, however it was split


def test_a_steps_pairs_do_not_grow_with_its_micro_batches(model_path, tokenizer, train_dataset, pairs, tmp_path):
    """4 pairs per step over 16 accumulated micro-batches (the live profile's micro-batch of one rollout): one pair
    on every fourth micro-batch, 4 a step, and the next step goes on from where this one stopped."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, pairs=pairs, **CHANNELS,
                   trace_replay_batch_size=4)
    trainer.current_gradient_accumulation_steps = 16
    steps = [[trainer._next_pairs() for _ in range(16)] for _ in range(2)]
    assert [len(share) for share in steps[0]] == [0, 0, 0, 1] * 4
    taken = [i for step in steps for share in step for i in share]
    assert taken == [trainer._pair_order[k % len(pairs)] for k in range(8)] and trainer._pair_cursor == 8


# ---------------------------------------------------------------- a short run with every channel


def test_five_steps_lower_the_loss_and_move_every_parameter(model_path, tokenizer, train_dataset, pairs, tmp_path):
    # num_iterations=5 with one generation: five optimizer steps on one fixed batch.
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, pairs=pairs, max_steps=5,
                   num_iterations=5, learning_rate=3e-3, **CHANNELS)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 5
    assert logs[-1]["loss"] < logs[0]["loss"]
    for key in ("grpo_loss", "hint_distill_loss", "trace_replay_loss", "trace_replay/reward_accuracy",
                "trace_replay/margin"):
        assert key in logs[0], key
    assert logs[-1]["trace_replay_loss"] < logs[0]["trace_replay_loss"]
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert unchanged == []


def rows_with_shared_prompts(tokenizer, model):
    """6 rows over 2 distinct prompts of different lengths (so padding), completions of different lengths."""
    from composer.trainer import _collate, encode_pairs

    encoded = encode_pairs(tokenizer, [{"prompt": PROMPTS[0], "chosen": "return a + b", "rejected": "x"},
                                       {"prompt": PROMPTS[1], "chosen": "pytest -x tests", "rejected": "give up"}])
    prompts = [encoded[i]["prompt"] for i in (0, 1, 0, 0, 1, 1)]
    completions = [encoded[0]["chosen"], encoded[1]["chosen"], encoded[0]["rejected"], encoded[1]["rejected"],
                   encoded[0]["chosen"][:2], encoded[1]["rejected"][:1]]
    return _collate(prompts, completions, tokenizer.pad_token_id, next(model.parameters()).device)


def test_completion_logps_encode_each_distinct_prompt_once(model_path, tokenizer):
    """Distinct prompts once (all but their last token, into a cache), then every row's completion on its prompt's
    cache: equal in values and gradients to the whole-row forward; fused head and logits agree at temperature 1,
    the fused head applies its own temperature; with gradient checkpointing (no cache) whole rows run."""
    from trl.trainer.utils import add_fused_lm_head

    from composer.trainer import _whole_rows_logps, completion_token_logps

    model = load_model(model_path)
    model.train()
    batch = rows_with_shared_prompts(tokenizer, model)
    prompt, completion = batch["prompt_ids"].size(1), batch["completion_ids"].size(1)
    assert batch["prompt_mask"].sum(-1).unique().numel() == 2 and batch["completion_mask"].sum(-1).unique().numel() > 2
    shapes = []
    hook = model.register_forward_pre_hook(lambda _, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    params = [p for p in model.parameters() if p.requires_grad]

    def values_and_grads(fn, **kwargs):
        logps = fn(model, **batch, **kwargs)
        weights = torch.arange(1.0, 1 + logps.numel()).view_as(logps)  # every token weighs in, differently
        return logps.detach(), torch.autograd.grad((logps * weights).sum(), params)

    def same_grads(a, b):  # to float rounding: relative to the largest gradient entry (~200 here)
        return max((x - y).abs().max() / y.abs().max() for x, y in zip(a, b)) < 1e-5

    shared = values_and_grads(completion_token_logps)
    assert shapes == [(2, prompt - 1), (6, completion + 1)]
    shapes.clear()
    whole = values_and_grads(lambda m, **b: _whole_rows_logps(m, **b, fused=False))
    assert shapes == [(6, prompt + completion)]
    assert ((shared[0] != 0) == batch["completion_mask"].bool()).all()  # 0 exactly at padding
    torch.testing.assert_close(shared[0], whole[0], atol=1e-5, rtol=0)
    assert same_grads(shared[1], whole[1])
    add_fused_lm_head(model, temperature=1.0)
    fused = values_and_grads(completion_token_logps, fused=True)
    torch.testing.assert_close(fused[0], whole[0], atol=1e-5, rtol=0)
    assert same_grads(fused[1], whole[1])
    cooled = load_model(model_path)
    add_fused_lm_head(cooled, temperature=0.7)
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        logits = completion_logits(cooled, ids, mask, completion, temperature=0.7)
        expected = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"][..., None])[..., 0]
        torch.testing.assert_close(completion_token_logps(cooled, **batch, fused=True),
                                   expected * batch["completion_mask"], atol=1e-5, rtol=0)
    model.gradient_checkpointing_enable()
    shapes.clear()
    checkpointed = values_and_grads(completion_token_logps)
    hook.remove()
    assert shapes == [(6, prompt + completion)]
    torch.testing.assert_close(checkpointed[0], whole[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("unfused", [True, False], ids=["unmasked: a pair at a time", "packed"])
def test_pair_logps_sum_each_completion_on_its_prompt(model_path, tokenizer, pairs, unfused):
    """A pair's chosen and rejected sequence log-probs: its rows' token log-probs, summed; packed in one forward, or
    (`unmasked`, on CPU) one pair at a time on the cache of its prompt run with no mask (two forwards a pair)."""
    from composer.trainer import _collate, encode_pairs, pair_logps

    model = load_model(model_path)
    encoded = encode_pairs(tokenizer, pairs)
    with torch.no_grad():
        counter = ForwardCounter(model)
        chosen, rejected = pair_logps(model, encoded, tokenizer.pad_token_id, unmasked=unfused)
        counter.handle.remove()
        assert counter.n == (2 * len(encoded) if unfused else 1)
        for e, c, r in zip(encoded, chosen, rejected):
            batch = _collate([e["prompt"]] * 2, [e["chosen"], e["rejected"]], tokenizer.pad_token_id, "cpu")
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
            mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
            logits = completion_logits(model, ids, mask, batch["completion_ids"].size(1))
            token = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"][..., None])[..., 0]
            expected = (token * batch["completion_mask"]).sum(-1)
            torch.testing.assert_close(torch.stack([c, r]), expected, atol=1e-5, rtol=0)


def test_reference_logps_on_cpu_take_a_pair_at_a_time_unmasked(model_path, tokenizer, pairs):
    """Reference log-probs on CPU: each pair alone on its unmasked prompt (two forwards a pair, not one packed
    forward whose mask takes CPU's unfused attention), the values the packed forward gives."""
    from composer.trainer import encode_pairs, pair_logps

    model = load_model(model_path)
    rows = pairs.remove_columns(["ref_chosen_logps", "ref_rejected_logps"])
    counter = ForwardCounter(model)
    again = add_reference_logps(rows, model, tokenizer)
    counter.handle.remove()
    assert counter.n == 2 * len(rows)
    with torch.no_grad():
        packed = pair_logps(model, encode_pairs(tokenizer, rows), tokenizer.pad_token_id)
    for column, expected in zip(("ref_chosen_logps", "ref_rejected_logps"), packed):
        torch.testing.assert_close(torch.tensor(again[column]), expected, atol=1e-4, rtol=0)


def test_unmasked_pairs_keep_one_pair_for_the_backward(model_path, tokenizer, pairs):
    """On the unmasked path each pair is checkpointed: what the graph keeps for the backward after every pair's
    forward is less than one pair's activations (so the backward holds one pair's at a time, not the step's), the
    backward runs each pair's forward again, and the gradients are the packed forward's."""
    from composer.trainer import _collate, completion_token_logps, encode_pairs, pair_logps

    model = load_model(model_path)
    encoded = encode_pairs(tokenizer, pairs)

    def kept_and_grads(fn):
        kept = []
        model.zero_grad()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel() * t.element_size()) or t,
                                                      lambda t: t):
            chosen, rejected = fn()
        (chosen - 2 * rejected).sum().backward()
        return sum(kept), [p.grad.clone() for p in model.parameters()]

    first = encoded[0]
    one_pair, _ = kept_and_grads(lambda: completion_token_logps(
        model, **_collate([first["prompt"]] * 2, [first["chosen"], first["rejected"]], tokenizer.pad_token_id, "cpu"),
        unmasked_prompt=True).sum(-1).unbind())
    counter = ForwardCounter(model)
    kept, grads = kept_and_grads(lambda: pair_logps(model, encoded, tokenizer.pad_token_id, unmasked=True))
    counter.handle.remove()
    _, packed_grads = kept_and_grads(lambda: pair_logps(model, encoded, tokenizer.pad_token_id))
    assert kept < one_pair / 4
    assert counter.n == 2 * 2 * len(encoded)  # prompt and completions a pair, forward and again in the backward
    for grad, packed in zip(grads, packed_grads):
        torch.testing.assert_close(grad, packed, atol=1e-4, rtol=1e-4)
def test_hint_teacher_encodes_each_hinted_prompt_once(model_path, tokenizer, train_dataset, tmp_path):
    """A group's rollouts share their hinted prompt: the teacher encodes it once per group, and its log-probs are
    the ones TRL's own scoring of whole rows gives."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, hint_distill_weight=1.0,
                   per_device_train_batch_size=8, num_generations=4)
    inputs = generation_batch(trainer, 8)  # 2 prompts x 4 generations
    teacher = trainer._hint_teacher
    tokens = []
    hook = teacher.get_input_embeddings().register_forward_hook(lambda _, a, out: tokens.append(a[0].numel()))
    logps = trainer._hint_teacher_logps(trainer.model, inputs)
    hook.remove()
    prompt, completion = inputs["hint_prompt_ids"].size(1), inputs["completion_ids"].size(1)
    assert inputs["hint_prompt_ids"].unique(dim=0).size(0) == 2
    assert sum(tokens) <= 2 * (prompt - 1) + 8 * (completion + 1) < 8 * (prompt + completion)
    with torch.no_grad():
        ids = torch.cat([inputs["hint_prompt_ids"], inputs["completion_ids"]], 1)
        mask = torch.cat([inputs["hint_prompt_mask"], inputs["completion_mask"]], 1)
        whole = trainer._get_per_token_logps_and_entropies(teacher, ids, mask, completion)[0]
    torch.testing.assert_close(logps * inputs["completion_mask"], whole * inputs["completion_mask"], atol=1e-5,
                               rtol=0)


def test_reference_logps_match_the_initial_policy(model_path, tokenizer, train_dataset, pairs, tmp_path):
    """Stored reference log-probs equal the policy's at step 0, so the first DPO loss is exactly log 2."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, pairs=pairs,
                   trace_replay_weight=1.0, trace_replay_batch_size=4)
    inputs = generation_batch(trainer, 4)
    trainer.compute_loss(trainer.model, inputs)
    assert trainer._metrics["train"]["trace_replay_loss"][-1] == pytest.approx(torch.log(torch.tensor(2.0)).item(),
                                                                             abs=1e-5)


def test_the_nll_term_adds_each_chosen_actions_mean_token_nll(model_path, tokenizer, train_dataset, pairs, tmp_path):
    """At step 0 (policy = reference) a pair's DPO loss is log 2; the NLL term adds its weight times the chosen
    action's negative log-prob per token, which the stored reference log-probs give by hand."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, pairs=pairs,
                   trace_replay_weight=1.0, trace_replay_batch_size=4, trace_replay_nll_weight=0.5)
    trainer.compute_loss(trainer.model, generation_batch(trainer, 4))
    index = range(4)  # the step's pairs: the first 4 of the shuffled order, all of them here
    assert len(trainer._encoded_pairs) == 4
    nll = [-trainer._ref_logps[0, i].item() / len(trainer._encoded_pairs[i]["chosen"]) for i in index]
    metrics = trainer._metrics["train"]
    assert metrics["trace_replay/chosen_nll"][-1] == pytest.approx(sum(nll) / 4, rel=1e-4)
    assert metrics["trace_replay_loss"][-1] == pytest.approx(math.log(2) + 0.5 * sum(nll) / 4, rel=1e-4)


@pytest.mark.parametrize("config", [
    dict(hint_teacher="live"),
    dict(hint_teacher="ema", hint_teacher_ema_rate=0.5),
    dict(hint_source="sibling", sibling_success_reward=0.5),
    dict(hint_distill_mode="full", hint_distill_divergence=0.0),
])
def test_hint_variants_run_a_step(model_path, tokenizer, train_dataset, tmp_path, config):
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, max_steps=1,
                   hint_distill_weight=1.0, **config)
    trainer.train()
    value = trainer.state.log_history[0]["hint_distill_loss"]
    assert torch.isfinite(torch.tensor(value))
    if config.get("hint_teacher") == "ema":  # the teacher moved towards the student after the step
        student = dict(trainer.model.named_parameters())
        teacher = dict(trainer._hint_teacher.named_parameters())
        initial = dict(load_model(model_path).named_parameters())
        name = "model.layers.0.mlp.up_proj.weight"
        expected = 0.5 * initial[name] + 0.5 * student[name]
        torch.testing.assert_close(teacher[name], expected)


@pytest.mark.parametrize("teacher,scorings", [("frozen", 1), ("ema", 3)])
def test_frozen_teacher_scores_a_generation_once(model_path, tokenizer, train_dataset, tmp_path, teacher, scorings):
    """num_iterations 3: one generation, three optimizer steps. A frozen teacher's log-probs cannot change, so it
    scores the generation once; an EMA teacher moves after every step, so it scores every step. A scoring is two
    forwards: the distinct prompts, then the completions on their cache."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, max_steps=3, num_iterations=3,
                   hint_distill_weight=1.0, hint_teacher=teacher)
    counter = ForwardCounter(trainer._hint_teacher)
    trainer.train()
    assert counter.n == 2 * scorings
    assert all(h["hint_distill_loss"] != 0 for h in trainer.state.log_history if "loss" in h)  # the channel ran


def test_stored_teacher_logps_equal_the_loss_time_ones(model_path, tokenizer, train_dataset, tmp_path):
    """The log-probs stored at generation are the teacher's in its hinted context: the loss is the same when
    they are dropped and the teacher scores the batch inside the loss instead."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, hint_distill_weight=1.0)
    inputs = generation_batch(trainer, 4)
    stored = inputs["hint_teacher_logps"]
    assert stored.shape == inputs["completion_ids"].shape
    torch.testing.assert_close(stored, trainer._hint_teacher_logps(trainer.model, inputs))
    with_stored = trainer.compute_loss(trainer.model, dict(inputs))
    hint_with = trainer._metrics["train"]["hint_distill_loss"][-1]
    without = trainer.compute_loss(trainer.model, {k: v for k, v in inputs.items() if k != "hint_teacher_logps"})
    assert hint_with != 0 and trainer._metrics["train"]["hint_distill_loss"][-1] == pytest.approx(hint_with, abs=1e-6)
    torch.testing.assert_close(with_stored, without)


def test_sibling_hints_come_from_successful_siblings(model_path, tokenizer, train_dataset, tmp_path):
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, hint_distill_weight=1.0,
                   hint_source="sibling", sibling_success_reward=1.0)
    trainer._last_rewards = torch.tensor([[1.0], [0.0], [0.0], [0.0]])
    ids = torch.tensor([[5, 6], [7, 8], [9, 10], [11, 12]])
    hints = trainer._sibling_hints({"completion_ids": ids, "completion_mask": torch.ones_like(ids)})
    first = tokenizer.decode([5, 6])
    # The one success hints its three siblings and gets no hint of its own.
    assert hints == [None] + [f"A correct solution:\n{first}"] * 3


def test_peft_frozen_teacher_is_the_adapter_free_base(model_path, tokenizer, train_dataset, tmp_path):
    from peft import LoraConfig

    args = ComposerConfig(str(tmp_path), **COMMON, per_device_train_batch_size=4, num_generations=4,
                          hint_distill_weight=1.0, max_steps=1)
    trainer = ComposerTrainer(model_path, reward_funcs=[reward], args=args, train_dataset=train_dataset,
                              processing_class=tokenizer,
                              peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    assert trainer._hint_teacher is None  # no copy of the model: the base is the teacher
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad(), trainer._teacher(trainer.model) as teacher:
        base = teacher(input_ids=ids).logits
    with torch.no_grad():
        adapted = trainer.model(input_ids=ids).logits
        reference = load_model(model_path)(input_ids=ids).logits
    torch.testing.assert_close(base, reference)
    assert not torch.allclose(adapted, reference)
    inputs = generation_batch(trainer, 4)  # the base scores the hinted rows on its prompt's cache, as a copy would
    ids = torch.cat([inputs["hint_prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["hint_prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        whole = completion_logits(load_model(model_path), ids, mask, inputs["completion_ids"].size(1))
    expected = torch.log_softmax(whole, -1).gather(-1, inputs["completion_ids"][..., None])[..., 0]
    torch.testing.assert_close(inputs["hint_teacher_logps"], expected * inputs["completion_mask"], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- packing: pairs in one row, and in GRPO's forward


def test_pack_rows_lays_each_segment_in_its_own_positions_and_sight():
    """Two GRPO rows (left-padded prompt, last 2 columns scored) and a pair: each GRPO row keeps its real tokens at
    their columns; the pair shares its prompt, each branch re-runs the prompt's last token at its position and sees
    the prompt but not the other branch; what is scored is predicted from the place before it."""
    from composer.trainer import pack_rows

    ids = torch.tensor([[0, 11, 12, 13, 14], [21, 22, 23, 24, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    pair = {"prompt": [31, 32, 33], "chosen": [41, 42], "rejected": [51]}
    packed = pack_rows([pair], pad_id=0, device="cpu", grpo=(ids, mask, 2))
    tokens, positions = packed["input_ids"].tolist(), packed["position_ids"].tolist()
    # rows as wide as the widest segment, the pair's 7 places: it, then each GRPO row (4 + 4 > 7), padded
    assert tokens == [[31, 32, 33, 41, 42, 33, 51], [11, 12, 13, 14, 0, 0, 0], [21, 22, 23, 24, 0, 0, 0]]
    assert positions == [[0, 1, 2, 3, 4, 2, 3], [1, 2, 3, 4, 0, 0, 0], [0, 1, 2, 3, 0, 0, 0]]
    sight = packed["attention_mask"][0, 0]
    assert sight[6].tolist() == [True, True, False, False, False, True, True]  # rejected: the prompt, its own branch
    assert sight[4].tolist() == [True, True, True, True, True, False, False]  # chosen's last: prompt and chosen
    flat = packed["input_ids"].flatten()
    assert flat[packed["pair_index"] + 1].tolist() == packed["pair_labels"].tolist() == [41, 42, 51]
    assert flat[packed["pair_index"][2]] == 33 and packed["pair_owner"].tolist() == [0, 0, 1]
    assert flat[packed["grpo_index"] + 1].tolist() == packed["grpo_labels"].tolist() == [13, 14, 24]
    assert packed["grpo_scored"].tolist() == [[True, True], [True, False]]


def test_pairs_ride_in_grpos_forward(model_path, tokenizer, train_dataset, pairs, tmp_path):
    """With GRPO's rows padded (two prompts), the step's pairs join its forward: one student forward and one
    backward for both, the loss and gradients the pairs give in a forward of their own, and GRPO's log-probs and
    entropies as TRL's forward gives them."""
    config = dict(pairs=pairs, trace_replay_weight=1.0, trace_replay_batch_size=2)
    ride = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "a", **config)
    own = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "b", **config)
    own._ride = lambda *args: False
    inputs = generation_batch(ride, 8)
    assert (inputs["prompt_mask"] == 0).any()
    results = []
    for trainer in (ride, own):
        counter = ForwardCounter(trainer.model)
        results.append(loss_and_grads(trainer, dict(inputs)))
        results[-1] += (counter.n,)
        counter.handle.remove()
    (ride_loss, ride_grads, ride_forwards), (own_loss, own_grads, own_forwards) = results
    assert (ride_forwards, own_forwards) == (1, 2)
    dpo_losses = [trainer._metrics["train"]["trace_replay_loss"][-1] for trainer in (ride, own)]
    assert dpo_losses[0] == pytest.approx(dpo_losses[1], abs=1e-6)
    torch.testing.assert_close(ride_loss, own_loss, atol=1e-6, rtol=0)
    for name, grad in own_grads.items():
        assert (ride_grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    keep = inputs["completion_ids"].size(1)
    with torch.no_grad():
        ride._riders = [0, 1]
        logps, entropies, _ = ride._get_per_token_logps_and_entropies(ride.model, ids, mask, keep, compute_entropy=True)
        expected = GRPOTrainer._get_per_token_logps_and_entropies(ride, ride.model, ids, mask, keep,
                                                                  compute_entropy=True)
    assert ride._ridden is not None
    torch.testing.assert_close(logps, expected[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropies, expected[1], atol=1e-5, rtol=0)


def test_pairs_ride_only_where_grpos_forward_takes_a_mask_and_has_room(model_path, tokenizer, train_dataset, pairs,
                                                                       tmp_path):
    """Unpadded rows run causal attention without a mask, which packing would give up (so do padded ones on CPU
    with unmasked_cpu_rows, one row at a time); a pair that finds no room in long rows would pad a whole row for
    itself."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, pairs=pairs,
                   trace_replay_weight=1.0)
    pair = {"prompt": [5] * 10, "chosen": [6] * 3, "rejected": [7] * 3}  # 17 places
    padded = torch.ones(4, 20, dtype=torch.long)
    padded[:, :5] = 0  # 15 real tokens a row: the pair needs a row of its own, 20 places for its 17
    unmasked = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path / "unmasked", pairs=pairs,
                    trace_replay_weight=1.0, unmasked_cpu_rows=True)
    assert not unmasked._ride(unmasked.model, padded, [pair], False, {})
    assert trainer._ride(trainer.model, padded, [pair], False, {})
    assert not trainer._ride(trainer.model, torch.ones(4, 20, dtype=torch.long), [pair], False, {})
    long_rows = torch.ones(4, 200, dtype=torch.long)
    long_rows[0, 0] = 0
    assert not trainer._ride(trainer.model, long_rows, [pair], False, {})  # 200 places for 17: more than 2 x 17
    assert not trainer._ride(trainer.model, padded, [pair], True, {})  # an MoE aux loss


def test_unmasked_rows_give_trls_padded_forward(model_path, tokenizer, train_dataset, tmp_path):
    """With unmasked_cpu_rows, on CPU a padded batch's forward runs one row at a time, each cut to its real tokens at the positions TRL's
    padded batch gives them, with no attention mask (CPU's SDPA fuses only unmasked causal attention): the log-probs,
    entropies and gradients TRL's padded forward gives, to float rounding; a row whose real tokens are not one run is
    left to TRL's forward."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, unmasked_cpu_rows=True)
    inputs = generation_batch(trainer, 8)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    keep = inputs["completion_ids"].size(1)
    assert (inputs["prompt_mask"] == 0).any()
    assert masks_cost_more(trainer.model, mask) and not masks_cost_more(trainer.model, torch.ones_like(mask))
    results = []
    for forward in (lambda: trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep,
                                                                        compute_entropy=True),
                    lambda: GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, keep,
                                                                           compute_entropy=True)):
        trainer.model.zero_grad()
        counter = ForwardCounter(trainer.model)
        logps, entropies, _ = forward()
        (logps * inputs["completion_mask"]).sum().backward()
        results.append((logps.detach(), entropies, {n: p.grad.clone() for n, p in trainer.model.named_parameters()},
                        counter.n))
        counter.handle.remove()
    (logps, entropies, grads, forwards), (trl_logps, trl_entropies, trl_grads, trl_forwards) = results
    assert (forwards, trl_forwards) == (len(ids), 1)  # one forward a row, against one for the padded batch
    scored = inputs["completion_mask"].bool()
    torch.testing.assert_close(logps[scored], trl_logps[scored], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropies[scored], trl_entropies[scored].detach(), atol=1e-5, rtol=0)
    assert (logps[~scored] == 0).all()
    for name, grad in trl_grads.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name
    holed = mask.clone()
    holed[0, -keep] = 0  # a hole in the first row's completion
    holed[0, -1] = 1
    assert unmasked_rows_logps(trainer.model, ids, holed, keep, False) is None
