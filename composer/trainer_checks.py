"""Spike 005's measurements: does ComposerTrainer reduce to GRPO, and does a short all-channel run learn?

    from composer.trainer_checks import grpo_reduction, short_run
    grpo_reduction(tiny_model())          # {'loss_gap': 0.0, 'grad_gap': 0.0, 'extra_forwards': 0, ...}
    short_run(tiny_model(), steps=5)      # per-step total and per-channel losses, parameters moved

The unit tests (tests/test_trainer.py) assert the same properties; these functions measure them so the
notebook can report numbers rather than a pass/fail bit.
"""

import tempfile

import torch
from datasets import Dataset
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from composer.models import load_model, load_tokenizer
from composer.trainer import ComposerConfig, ComposerTrainer, add_reference_logps

PROMPTS = [
    [{"role": "user", "content": "The test test_add fails: add(2, 3) returns -1. Fix it."}],
    [{"role": "user", "content": "Find which test fails in the repository and why."}],
]
HINTS = ["add subtracts instead of adding: return a + b", "run the test suite before reading code"]
PAIRS = {
    "prompt": PROMPTS * 2,
    "chosen": ['<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>', "return a + b",
               '<tool_call>\n{"name": "view", "arguments": {"path": "calc.py"}}\n</tool_call>', "pytest -x"],
    "rejected": ['<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>', "return a - b",
                 "I give up.", "rm -rf tests"],
}
BASE = dict(use_cpu=True, bf16=False, report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True,
            max_completion_length=16, per_device_train_batch_size=4, num_generations=4)


def length_reward(completions, **kwargs):
    """A stand-in verifier: deterministic and varied within a group, so advantages are not all zero."""
    return [float(len(c[0]["content"]) % 3) / 2 for c in completions]


def datasets(model_path):
    """The prompts (with hints) and the DPO pairs (with reference log-probs of the initial policy)."""
    tokenizer = load_tokenizer(model_path)
    pairs = add_reference_logps(Dataset.from_dict(PAIRS), load_model(model_path), tokenizer)
    return Dataset.from_dict({"prompt": PROMPTS, "hint": HINTS}), pairs, tokenizer


def build_trainer(cls, model_path, out, train, tokenizer, **config):
    """GRPOTrainer or ComposerTrainer on the tiny setup, in train mode, ready for direct loss calls."""
    pairs = config.pop("pairs", None)
    extra = {"pairs_dataset": pairs} if cls is ComposerTrainer else {}
    args = (ComposerConfig if cls is ComposerTrainer else GRPOConfig)(out, **{**BASE, **config})
    trainer = cls(str(model_path), reward_funcs=[length_reward], args=args, train_dataset=train,
                  processing_class=tokenizer, **extra)
    trainer.remove_callback(PrinterCallback)  # with disable_tqdm it prints every log dict; log_history keeps them
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; here the loss is called directly
    return trainer



def _count_forwards(model, fn):
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        return fn(), len(calls)
    finally:
        handle.remove()


def _loss_and_grads(trainer, inputs):
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def grpo_reduction(model_path, seed: int = 0) -> dict:
    """Stock GRPOTrainer vs ComposerTrainer(0, 0) on the same generated batch: loss and gradient gaps, and
    forward passes counted in generation+scoring and in the loss."""
    train, pairs, tokenizer = datasets(model_path)
    with tempfile.TemporaryDirectory() as out:
        stock = build_trainer(GRPOTrainer, model_path, out, train, tokenizer, seed=seed)
        ours = build_trainer(ComposerTrainer, model_path, out, train, tokenizer, seed=seed, pairs=pairs)
        rows = [{"prompt": PROMPTS[0], "hint": HINTS[0]}] * 4
        counts = []
        for trainer in (stock, ours):
            torch.manual_seed(seed)
            batch, n = _count_forwards(trainer.model, lambda: trainer._generate_and_score_completions(rows))
            counts.append(n)
        (stock_loss, stock_grads), n_stock = _count_forwards(stock.model, lambda: _loss_and_grads(stock, batch))
        (our_loss, our_grads), n_ours = _count_forwards(ours.model, lambda: _loss_and_grads(ours, batch))
    grad_gap = max((stock_grads[k] - our_grads[k]).abs().max().item() for k in stock_grads)
    return {
        "loss_gap": abs(stock_loss.item() - our_loss.item()),
        "grad_gap": grad_gap,
        "n_grad_tensors": len(stock_grads),
        "forwards_stock": counts[0] + n_stock,
        "forwards_composer": counts[1] + n_ours,
        "extra_forwards": counts[1] + n_ours - counts[0] - n_stock,
    }


def short_run(model_path, *, steps: int = 5, seed: int = 0, hint_distill_weight: float = 0.5,
              trace_replay_weight: float = 0.5, hint_distill_mode: str = "sampled_token", **config) -> dict:
    """`steps` optimizer steps with every channel on, on one fixed batch (one generation reused through
    num_iterations). Returns the per-step losses and which parameters moved."""
    train, pairs, tokenizer = datasets(model_path)
    mode = {"hint_distill_mode": hint_distill_mode}
    if hint_distill_mode == "topk":
        mode.update(hint_distill_topk=config.pop("hint_distill_topk", 20))
    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(ComposerTrainer, model_path, out, train, tokenizer, seed=seed, max_steps=steps,
                           num_iterations=steps, learning_rate=3e-3, trace_replay_batch_size=len(pairs),
                           hint_distill_weight=hint_distill_weight,
                           trace_replay_weight=trace_replay_weight, pairs=pairs, **mode, **config)
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        trainer.train()
        moved = [not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters() if p.requires_grad]
    logs = [h for h in trainer.state.log_history if "loss" in h]
    keys = ("loss", "grpo_loss", "hint_distill_loss", "trace_replay_loss", "trace_replay/reward_accuracy",
            "trace_replay/margin")
    return {"curves": {k: [h.get(k) for h in logs] for k in keys},
            "params_moved": sum(moved), "params_total": len(moved)}
