"""ComposerTrainer: spike 005's gate (exact GRPO reduction, accumulation invariance, a 5-step run)."""

import os

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from composer.models import load_model, load_tokenizer, tiny_model
from composer.trainer import ComposerConfig, ComposerTrainer, add_reference_logps
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
def tokenizer(model_path):
    return load_tokenizer(model_path)


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


def test_pair_logps_encode_each_prompt_once_and_agree_with_whole_sequences(model_path, tokenizer, pairs):
    """The DPO channel's forward: prompts once (B rows), then both completions on their cache (2B rows), equal in
    values and gradients to the whole-sequence forward; with gradient checkpointing (no cache) the latter runs."""
    from composer.trainer import _pair_logps_unshared, encode_pairs, pair_logps

    model = load_model(model_path)
    model.train()
    encoded = encode_pairs(tokenizer, pairs)
    assert len({len(e["prompt"]) for e in encoded}) > 1 and len({len(e["chosen"]) for e in encoded}) > 1  # padding
    shapes = []
    hook = model.register_forward_pre_hook(lambda _, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    params = [p for p in model.parameters() if p.requires_grad]

    def values_and_grads(fn):
        chosen, rejected = fn(model, encoded, tokenizer.pad_token_id)
        loss = (chosen - 2 * rejected).sum()  # both halves weigh in, differently
        return torch.cat([chosen, rejected]).detach(), torch.autograd.grad(loss, params)

    shared = values_and_grads(pair_logps)
    prompt, completion = max(len(e["prompt"]) for e in encoded), max(len(c) for e in encoded
                                                                       for c in (e["chosen"], e["rejected"]))
    assert shapes == [(4, prompt), (8, completion)]
    shapes.clear()
    whole = values_and_grads(_pair_logps_unshared)
    assert shapes == [(8, prompt + completion)]
    assert torch.allclose(shared[0], whole[0], atol=1e-5) and shared[0].abs().min() > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(shared[1], whole[1]))
    model.gradient_checkpointing_enable()
    shapes.clear()
    checkpointed = values_and_grads(pair_logps)
    hook.remove()
    assert shapes == [(8, prompt + completion)] and torch.allclose(checkpointed[0], whole[0], atol=1e-5)


def test_reference_logps_match_the_initial_policy(model_path, tokenizer, train_dataset, pairs, tmp_path):
    """Stored reference log-probs equal the policy's at step 0, so the first DPO loss is exactly log 2."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, pairs=pairs,
                   trace_replay_weight=1.0, trace_replay_batch_size=4)
    inputs = generation_batch(trainer, 4)
    trainer.compute_loss(trainer.model, inputs)
    assert trainer._metrics["train"]["trace_replay_loss"][-1] == pytest.approx(torch.log(torch.tensor(2.0)).item(),
                                                                             abs=1e-5)


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


@pytest.mark.parametrize("teacher,forwards", [("frozen", 1), ("ema", 3)])
def test_frozen_teacher_scores_a_generation_once(model_path, tokenizer, train_dataset, tmp_path, teacher, forwards):
    """num_iterations 3: one generation, three optimizer steps. A frozen teacher's log-probs cannot change, so it
    scores the generation once; an EMA teacher moves after every step, so it scores every step."""
    trainer = make(ComposerTrainer, model_path, tokenizer, train_dataset, tmp_path, max_steps=3, num_iterations=3,
                   hint_distill_weight=1.0, hint_teacher=teacher)
    counter = ForwardCounter(trainer._hint_teacher)
    trainer.train()
    assert counter.n == forwards
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
