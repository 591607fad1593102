"""A planted checkpoint: the student fine-tuned on the scripted expert's demonstrations of the evaluated test tasks.
An arm with `"start": "planted"` trains from it (004's positive control), so its difference from the reference is
there by construction, of a size the planted checkpoint's own evaluation states before any GRPO step.

    from composer.ab import planting
    made = planting.plant(student, test_tasks, env, steps=8, learning_rate=1e-3, run_dir="runs/004")
    made["path"], made["nll"]        # the checkpoint's folder; assistant-token NLL before each step

Why a checkpoint and not pairs: expert pairs on the test tasks themselves (DPO, with or without the chosen action's
NLL) never gave 004's report zoo more than +0.10 pass@1 at the report's dose, and DPO alone at 1e-3 took the student
from 0.25 to 0.00 in three steps (docs/results.md): the channel cannot plant an effect the design sees without
breaking the student. The zoo's own loss on whole demonstrations (composer.zoo.episode_loss, assistant tokens only)
moved it from 0.25 to 0.50 in 8 full-batch steps at 1e-3, and 0.83 in 12.

It trains in this process with a plain AdamW loop over whole episodes, sized for the zoo's students (the report
profile's control); the live profile keeps the expert-pairs B+, as a planted Qwen3-8B would need a GPU trainer.
"""

import json
from pathlib import Path

from composer.env.environment import EnvConfig
from composer.files import config_hash, publish

STEP = "assistant-token NLL of whole demonstrations, every test task each step (full batch), AdamW"


def plant(student, tasks: list[dict], env: EnvConfig, *, steps: int, learning_rate: float, run_dir) -> dict:
    """The planted checkpoint of `student` on `tasks` (their gold patches make the demonstrations), built once under
    run_dir/inputs/planted-<hash of the student, tasks, steps, learning rate and code versions>/ -> {"path": the
    model's folder, "steps", "learning_rate", "nll": the mean assistant-token NLL before each step and after the
    last, "tasks": how many}. Deterministic: the demonstrations are the expert's noiseless ones, each step the full
    batch in task order."""
    import dataclasses

    import torch

    from composer import policies, zoo
    from composer.env.environment import CodingEnv
    from composer.models import load_model, load_tokenizer

    if steps < 1 or not learning_rate > 0:
        raise ValueError(f"a planted checkpoint needs steps >= 1 and a learning rate > 0, got {steps} and "
                         f"{learning_rate}")

    def build(tmp: Path):
        environment = CodingEnv(tasks, env)
        try:
            demos = [policies.demonstrate(environment, task)[0] for task in tasks]
        finally:
            environment.close()
        tokenizer, model = load_tokenizer(student), load_model(student)
        examples = [zoo.encode(tokenizer, messages) for messages in demos]
        tokens = sum(sum(mask[1:]) for _, mask in examples)
        opt = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        nll = []
        model.train()
        for _ in range(steps):
            total = 0.0
            for ids, mask in examples:  # one episode at a time: no padding, no mask (zoo.episode_loss)
                loss, _ = zoo.episode_loss(model, ids, mask)
                (loss / tokens).backward()
                total += float(loss.detach())
            nll.append(round(total / tokens, 5))
            opt.step()
            opt.zero_grad(set_to_none=True)
        nll.append(round(zoo.assistant_loss(model, examples), 5))  # after the last step
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        (tmp / "meta.json").write_text(json.dumps({"steps": steps, "learning_rate": learning_rate, "nll": nll,
                                                   "tasks": len(tasks), "step": STEP}), encoding="utf-8")

    key = config_hash(student=Path(student).name, tasks=tasks, steps=steps, learning_rate=learning_rate,
                      env=dataclasses.asdict(env), step=STEP, **zoo.versions())
    folder = publish(Path(run_dir) / "inputs" / f"planted-{key}", build)
    return {"path": str(folder / "model"), **json.loads((folder / "meta.json").read_text(encoding="utf-8"))}
