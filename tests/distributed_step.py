"""One ComposerTrainer step on every process of a distributed launch; rank 0 writes what it saw.

    python -m torch.distributed.run --nproc-per-node 2 tests/distributed_step.py OUT.json

(`accelerate launch --cpu` starts a single process on CPU, so the CPU test uses torchrun; on GPUs use
`accelerate launch --config_file params/live/accelerate-fsdp2.yaml`.)
"""

import json
import sys

import torch
from accelerate import PartialState
from datasets import Dataset

from composer.models import load_model, load_tokenizer, tiny_model
from composer.trainer import ComposerConfig, ComposerTrainer, add_reference_logps

PROMPTS = [[{"role": "user", "content": "Fix the bug in add(a, b)."}], [{"role": "user", "content": "Run the tests."}]]


def reward(completions, **kwargs):
    return [float(len(c[0]["content"]) % 3) / 2 for c in completions]


def main(out):
    path = tiny_model()  # before the process group exists: transformers saves from rank 0 only after that
    state = PartialState()
    tokenizer = load_tokenizer(path)
    pairs = Dataset.from_dict({"prompt": PROMPTS, "chosen": ["return a + b", "pytest"], "rejected": ["a - b", "rm"]})
    pairs = add_reference_logps(pairs, load_model(path), tokenizer)
    args = ComposerConfig(
        "/tmp/composer-distributed", use_cpu=True, bf16=False, report_to=[], save_strategy="no", max_steps=1,
        per_device_train_batch_size=2, num_generations=4, max_completion_length=8, learning_rate=1e-3,
        logging_steps=1, hint_distill_weight=0.5, trace_replay_weight=0.5, trace_replay_batch_size=1,
        disable_tqdm=True,
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS * 2, "hint": ["return a + b", "run pytest"] * 2})
    trainer = ComposerTrainer(path, reward_funcs=[reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer, pairs_dataset=pairs)
    trainer.train()
    model = trainer.accelerator.unwrap_model(trainer.model)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = trainer.accelerator.gather(flat.unsqueeze(0))
    if state.is_main_process:
        loss = next(h["loss"] for h in trainer.state.log_history if "loss" in h)
        max_rank_diff = (gathered - gathered[0]).abs().max().item()
        moved = (flat - torch.cat([p.flatten() for p in load_model(path).parameters()])).abs().max().item()
        json.dump({"world_size": state.num_processes, "loss": loss, "max_rank_diff": max_rank_diff,
                   "moved": moved}, open(out, "w"))
    # Leave the process group before exiting: a rank that exits with gloo's threads alive can abort
    # ("terminate called without an active exception", exit -6), as one CI run showed.
    state.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
