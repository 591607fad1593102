"""ComposerTrainer's overhead against stock TRL GRPOTrainer: step time, operators dispatched and peak memory.

    python -m composer bench trainer [--repeats N] [--size tiny|small|gpu|1.7b|live-tiny] [--no-memory]

    from composer.bench.trainer import measure
    result = measure(size="small", repeats=10, memory=True)   # the dict printed as the last stdout line

Arms, all built from the same model path (so the same initial weights) and fed the same batch (at 1.7b and its
rehearsal live-tiny only grpo and all: five 1.7B-parameter trainers with their optimizer state do not fit one GPU):

    grpo         stock trl.GRPOTrainer
    composer_00  ComposerTrainer, hint_distill_weight = trace_replay_weight = 0
    hint         hint_distill_weight > 0 only (mode sampled_token, teacher 'frozen')
    dpo          trace_replay_weight > 0 only
    all          both channels

One generation batch is produced once, by the `all` trainer (so it carries the hint tensors), and reused for
every arm; stock GRPO ignores the extra keys (checked: its loss is the same with and without them). A step is
zero_grad + compute_loss + backward + AdamW step (lr 1e-6, one optimizer per arm, so the weights barely move
and every arm drifts alike). Generation is excluded: it is identical across arms (but the frozen hint teacher's
forward, which a run makes at generation time, is charged to every step). After 2 warm-up steps per arm, the
arms are interleaved round-robin (the starting arm rotates every round) for `repeats` rounds, so machine drift
hits them alike; medians and p10/p90 are reported, and ratios are median / median.

Where the time goes: each arm's forward calls and the tokens they run (padding included), student and teacher, are
counted over one step by hooks on the input embeddings, and `work_floor_time` prices them (a student token at a GRPO
token's cost, a teacher token at a third: no backward). A ratio near its floor can only fall with fewer tokens.
And how many operations the step takes to do it: `ops`, the operators one step dispatches (the last warm-up step:
zero_grad, loss, backward, optimizer step), counted by a TorchDispatchMode, so every ATen operator that reaches a
backend kernel (below autograd and after composite decompositions; views included: each is a trip through the
dispatcher) counts once, forward, backward and optimizer alike, however many threads run them. For a given batch
the count is deterministic, unlike a time, so tests may assert it; on a GPU each compute operator is a kernel
launch the host must issue, which is what bounds a small model's step (docs/results.md). The optimizer's share is
torch's default AdamW on the device: one operator per tensor and op on CPU, foreach kernels on CUDA.

Memory is measured per arm in a fresh process (`python -m composer.bench.trainer --arm NAME --json ...`),
from just before the trainer is built to after 2 warm-up + 1 steps, so it covers the trainer's model, the
teacher copy, optimizer state and activations, but not the interpreter or imports (a throwaway trainer of the
same arm on the tiny model takes two steps first, so lazy imports and one-off kernel/thread set-up are paid
before the baseline, and freed memory is handed back with malloc_trim / empty_cache):
  - CUDA: torch.cuda max_memory_allocated() minus memory_allocated() before the build (peak stats reset there);
  - CPU: peak RSS minus the RSS read with psutil right before the build. The peak is the kernel's high-water
    mark reset through /proc/self/clear_refs and read back as VmHWM (getrusage's ru_maxrss is the fallback where
    the reset is refused: it also keeps the mark of threads that exited earlier), with glibc's mmap threshold fixed at
    64 KiB so freed tensors leave RSS (otherwise the heap glibc keeps adds +-10% noise to a 200 MB figure).
"""

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
import trl
from torch.utils._python_dispatch import TorchDispatchMode

from composer.bench import machine
from composer.models import TINY
from composer.progress import bar

ARMS = ("grpo", "composer_00", "hint", "dpo", "all")
HINT_WEIGHT, DPO_WEIGHT = 0.1, 0.5
WEIGHTS = {"composer_00": (0.0, 0.0), "hint": (HINT_WEIGHT, 0.0), "dpo": (0.0, DPO_WEIGHT),
           "all": (HINT_WEIGHT, DPO_WEIGHT)}
TARGETS = {"ratio_00_time": 1.02, "ratio_all_time": 1.5, "ratio_all_mem": 1.3, "ratio_all_ops": 1.6}
SIZES = {
    # model overrides of composer.models.TINY, rollouts per step, group size, completion tokens, DPO pairs per step;
    # optionally tokens of context added to each prompt, bf16 weights, gradient checkpointing, the arms run
    "tiny": dict(model={}, batch=4, generations=4, completion=8, pairs=2),
    "small": dict(model=dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                             num_key_value_heads=4, head_dim=32),
                  batch=8, generations=4, completion=64, pairs=4),
    # ~85M parameters: the prepared device check's size (composer.bench.gpu), for a GPU
    "gpu": dict(model=dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                           num_key_value_heads=4, head_dim=64),
                batch=16, generations=4, completion=256, pairs=8),
    # Qwen3-1.7B's architecture and vocabulary (1.72B parameters, random weights), for a GPU, at a live-like shape:
    # each prompt carries ~2,000 tokens of context, so a rollout is ~3,000 tokens and a pair's prompt ~2,000; bf16
    # weights, full fine-tune and gradient checkpointing, as the live profile trains
    "1.7b": dict(model=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                            num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960),
                 batch=4, generations=2, completion=1024, pairs=2, context=2000, bf16=True, gradient_checkpointing=True,
                 arms=("grpo", "all")),
    # 1.7b's path (context, bf16, checkpointing, two arms, a vocabulary past the tokenizer's) on the tiny model with
    # short sequences: its CPU rehearsal
    "live-tiny": dict(model=dict(vocab_size=2048), batch=4, generations=2, completion=16, pairs=2, context=200,
                      bf16=True, gradient_checkpointing=True, arms=("grpo", "all")),
}
LR = 1e-6
WARMUP = 2
MMAP_THRESHOLD = 65536  # bytes; glibc's setting in the CPU memory processes (see _memory)
MEMORY_STEPS = 1  # measured steps after the warm-up in each memory process (Adam state exists from step 1)
SCOPE = ("loss+backward+optimizer step on a fixed generated batch; generation excluded except the frozen "
         "hint teacher's forward, charged to every step as at num_iterations 1")
MODE = "sampled_token"

PROMPTS = [
    [{"role": "user", "content": "The test for add(a, b) fails with 'assert -1 == 3'. Find the bug and fix it."}],
    [{"role": "user", "content": "Which test in tests/test_queue.py fails, and why? Propose a minimal patch."}],
]
HINT = "The function subtracts instead of adding: replace `a - b` with `a + b`, then run pytest -x."
PAIRS = {
    "prompt": PROMPTS * 4,
    "chosen": [
        '<tool_call>\n{"name": "run_tests", "arguments": {"path": "tests/test_add.py"}}\n</tool_call>',
        "The bug is in add(): it returns a - b. Change it to return a + b.",
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/app/queue.py"}}\n</tool_call>',
        "test_pop_empty fails because pop() raises IndexError; return None when the queue is empty.",
    ] * 2,
    "rejected": [
        "I will submit the patch without running the tests.",
        "Delete the failing test so that the suite passes.",
        '<tool_call>\n{"name": "edit_file", "arguments": {"path": "tests/test_add.py", "old": "3", "new": "-1"}}'
        "\n</tool_call>",
        "The tests are flaky; mark them as skipped and move on.",
    ] * 2,
}


CONTEXT_LINE = "    assert add({i}, 1) == {j}, 'add({i}, 1) should be {j}'\n"  # filler: a test file's lines


def _prompts(size: str) -> list:
    """PROMPTS, each user message followed by `context` tokens of a test file (about: whole lines) for the sizes
    that have it."""
    context = SIZES[size].get("context", 0)
    if not context:
        return PROMPTS
    from composer.models import load_tokenizer

    tokenizer = load_tokenizer(_model_path("tiny"))  # every size shares the tiny model's tokenizer
    per_line = len(tokenizer(CONTEXT_LINE.format(i=10, j=11))["input_ids"])
    text = "\n\n" + "".join(CONTEXT_LINE.format(i=i, j=i + 1) for i in range(10, 10 + -(-context // per_line)))
    return [[{**message, "content": message["content"] + text}] for [message] in PROMPTS]


def _pairs(size: str) -> dict:
    return {**PAIRS, "prompt": _prompts(size) * 4}


def reward(completions, **kwargs):
    """Deterministic and varied within a group, so advantages are non-zero."""
    return [float(len(c[0]["content"]) % 3) / 2 for c in completions]


# ---------------------------------------------------------------- building the arms


def _device() -> tuple[bool, str]:
    if torch.cuda.is_available():
        return True, f"cuda ({torch.cuda.get_device_name()})"
    return False, f"cpu ({torch.get_num_threads()} threads, {platform.machine()})"


def _model_path(size: str) -> Path:
    from composer.models import tiny_model

    return tiny_model("tiny") if size == "tiny" else tiny_model(f"bench-{size}", **SIZES[size]["model"])


def _train_dataset(size: str):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": _prompts(size), "hint": [HINT] * len(PROMPTS)})


def _build(arm: str, size: str, model_path: Path, tokenizer, train_dataset, pairs, outdir: str):
    from trl import GRPOConfig, GRPOTrainer

    from composer.trainer import ComposerConfig, ComposerTrainer

    spec = SIZES[size]
    cuda, _ = _device()
    bf16 = spec.get("bf16", False)
    common = dict(use_cpu=not cuda, bf16=bf16, report_to=[], save_strategy="no", logging_steps=1, seed=0,
                  disable_tqdm=True, learning_rate=LR, per_device_train_batch_size=spec["batch"],
                  num_generations=spec["generations"], max_completion_length=spec["completion"],
                  gradient_checkpointing=spec.get("gradient_checkpointing", False),
                  **({"model_init_kwargs": {"dtype": "bfloat16"}} if bf16 else {}))
    if arm == "grpo":
        trainer = GRPOTrainer(str(model_path), reward_funcs=[reward], args=GRPOConfig(outdir, **common),
                              train_dataset=train_dataset, processing_class=tokenizer)
    else:
        hint_weight, dpo_weight = WEIGHTS[arm]
        args = ComposerConfig(outdir, **common, hint_distill_weight=hint_weight, trace_replay_weight=dpo_weight,
                              hint_distill_mode=MODE, hint_teacher="frozen", trace_replay_batch_size=spec["pairs"])
        # Hints and pairs are supplied to every Composer arm, as in a real run; a weight of 0 must leave them unused.
        trainer = ComposerTrainer(str(model_path), reward_funcs=[reward], args=args, train_dataset=train_dataset,
                                  processing_class=tokenizer, pairs_dataset=pairs)
    if trainer.args.gradient_checkpointing:  # what the training loop would switch on before its first step
        trainer.model.gradient_checkpointing_enable(trainer.args.gradient_checkpointing_kwargs)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; we call the loss directly
    optimizer = torch.optim.AdamW([p for p in trainer.model.parameters() if p.requires_grad], lr=LR)
    return trainer, optimizer


def _step(trainer, optimizer, inputs, cuda: bool) -> float:
    """One step, timed: zero_grad + compute_loss + backward + optimizer step."""
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, dict(inputs))
    loss.backward()
    optimizer.step()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _generation_batch(trainer, size: str) -> dict:
    spec = SIZES[size]
    prompts = _prompts(size)
    rows = [{"prompt": prompts[i // spec["generations"] % len(prompts)], "hint": HINT} for i in range(spec["batch"])]
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(rows)
    trainer.model.train()
    # The frozen teacher scores a generation once, when it is made; at num_iterations 1 that is one teacher forward
    # per step. A step here reuses a batch generated once, so the stored scores are dropped and the loss recomputes
    # them inside the timed step: the hint arms are charged that forward.
    batch.pop("hint_teacher_logps", None)
    return batch


class _OpCounter(TorchDispatchMode):
    """Counts the ATen operators dispatched while active (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _count_work(trainer, optimizer, inputs, cuda) -> dict:
    """Forward calls and the tokens they ran (padding included: it is computed), student and teacher, and the
    operators dispatched, in one step: where the extra compute goes, and in how many operations."""
    work = dict(student_forwards=0, student_tokens=0, teacher_forwards=0, teacher_tokens=0)

    def counter(who):
        def hook(module, args):
            work[f"{who}_forwards"] += 1
            work[f"{who}_tokens"] += args[0].numel()
        return hook

    teacher = getattr(trainer, "_hint_teacher", None)
    modules = {"student": trainer.model, **({"teacher": teacher} if teacher is not None else {})}
    hooks = [m.get_input_embeddings().register_forward_pre_hook(counter(who)) for who, m in modules.items()]
    ops = _OpCounter()
    try:
        with ops:
            _step(trainer, optimizer, inputs, cuda)
    finally:
        for hook in hooks:
            hook.remove()
    return {**work, "ops": ops.ops}


def work_floor(arms: dict, arm: str) -> float:
    """The time ratio `arm` would have if each token it runs cost what a GRPO token costs (forward and backward)
    and a teacher token a third of that (a forward without gradient: the backward is ~2 forwards)."""
    return (arms[arm]["student_tokens"] + arms[arm]["teacher_tokens"] / 3) / arms["grpo"]["student_tokens"]


def _to_cpu(batch: dict) -> dict:
    return {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in batch.items()}


def _to_device(batch: dict, device) -> dict:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


# ---------------------------------------------------------------- memory, one fresh process per arm


def _memory_child(arm: str, size: str, data_path: str) -> dict:
    """Run in a fresh process: build one arm, take WARMUP + MEMORY_STEPS steps, report the peak increase."""
    import psutil
    import transformers.models.qwen3.modeling_qwen3  # noqa: F401  (imports are not the trainer's memory)
    from datasets import Dataset

    from composer.models import load_tokenizer
    from composer.trainer import ComposerTrainer  # noqa: F401

    cuda, device = _device()
    data = torch.load(data_path, weights_only=False)
    model_path = Path(data["model_path"])
    tokenizer = load_tokenizer(model_path)
    train_dataset, pairs = _train_dataset(size), Dataset.from_dict(data["pairs"])
    inputs = _to_device(data["batch"], "cuda" if cuda else "cpu")
    with tempfile.TemporaryDirectory() as outdir:
        # A throwaway trainer of the same arm on the tiny model, two steps: the ~450 modules TRL and transformers
        # import lazily on the first build, thread pools and kernel caches are then not charged to the arm.
        tiny = _model_path("tiny")
        trainer, optimizer = _build(arm, "tiny", tiny, load_tokenizer(tiny), _train_dataset("tiny"), pairs,
                                    os.path.join(outdir, "warm"))
        warm_inputs = _generation_batch(trainer, "tiny")
        for _ in range(WARMUP):
            _step(trainer, optimizer, warm_inputs, cuda)
        del trainer, optimizer, warm_inputs
        gc.collect()
        _release_free_memory(cuda)
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            hwm_reset = True
        else:
            before = psutil.Process().memory_info().rss
            try:  # reset the kernel's peak-RSS mark, so VmHWM is the peak since here (Linux >= 4.0)
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
                hwm_reset = True
            except OSError:
                hwm_reset = False
        trainer, optimizer = _build(arm, size, model_path, tokenizer, train_dataset, pairs, outdir)
        for _ in range(WARMUP + MEMORY_STEPS):
            _step(trainer, optimizer, inputs, cuda)
        if cuda:
            peak = torch.cuda.max_memory_allocated() - before
            retained = torch.cuda.memory_allocated() - before
        else:
            peak = _peak_rss(hwm_reset) - before
            retained = psutil.Process().memory_info().rss - before
    return {"arm": arm, "peak_mem_bytes": int(peak), "retained_mem_bytes": int(retained),
            "baseline_bytes": int(before), "hwm_reset": hwm_reset, "device": device}


def _peak_rss(hwm_reset: bool) -> int:
    """Peak RSS in bytes. After a reset, the mm's own high-water mark (VmHWM): getrusage's ru_maxrss also keeps
    the mark of any thread that exited before the reset (tokenizer, tqdm, loader threads), i.e. the import peak."""
    if hwm_reset:
        with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmHWM:")).split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _release_free_memory(cuda: bool) -> None:
    """Hand freed memory back (glibc heap, CUDA cache), so the arm's own allocations show up as growth."""
    if cuda:
        torch.cuda.empty_cache()
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def save_memory_data(path, model_path, inputs: dict, pairs) -> None:
    """What a memory process needs to rebuild an arm and replay the same batch."""
    torch.save({"model_path": str(model_path), "batch": _to_cpu(inputs), "pairs": pairs.to_dict()}, path)


def _memory(arm: str, size: str, data_path: str) -> dict:
    # A fixed glibc mmap threshold: tensors above 64 KiB are mapped and unmapped one by one, so RSS follows the
    # live allocations (like CUDA's allocated bytes) instead of whatever freed heap glibc chose to keep.
    env = dict(os.environ, HF_HUB_OFFLINE="1", MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    command = [sys.executable, "-m", "composer.bench.trainer", "--arm", arm, "--size", size, "--data", data_path,
               "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"memory process for arm {arm!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


# ---------------------------------------------------------------- the benchmark


def _ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def measure(*, size: str = "small", repeats: int = 10, memory: bool = True) -> dict:
    """Run the benchmark; return the dict `main` prints as its last stdout line (see the module docstring)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {tuple(SIZES)}, got {size!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started, machine_at_start = time.perf_counter(), machine()
    # Library chatter goes to stderr: stdout carries only the table and the JSON line.
    with contextlib.redirect_stdout(sys.stderr), tempfile.TemporaryDirectory() as workdir:
        result = _measure(size, repeats, memory, workdir)
    result["wall_s"] = time.perf_counter() - started
    return {**result, **machine_at_start}


def _measure(size: str, repeats: int, memory: bool, workdir: str) -> dict:
    from composer.models import load_model, load_tokenizer
    from composer.trainer import add_reference_logps
    from datasets import Dataset

    cuda, device = _device()
    spec = SIZES[size]
    arm_names = spec.get("arms", ARMS)
    model_path = _model_path(size)
    tokenizer = load_tokenizer(model_path)
    train_dataset = _train_dataset(size)
    reference = load_model(model_path, dtype=torch.bfloat16 if spec.get("bf16") else None,
                           device="cuda" if cuda else None)
    pairs = add_reference_logps(Dataset.from_dict(_pairs(size)), reference, tokenizer)
    del reference

    built = {}
    for arm in bar(arm_names, desc="build arms", leave=False):
        built[arm] = _build(arm, size, model_path, tokenizer, train_dataset, pairs, os.path.join(workdir, arm))
    inputs = _generation_batch(built["all"][0], size)
    missing = [k for k in ("hint_prompt_ids", "hint_prompt_mask", "hint_mask") if k not in inputs]
    if missing:
        raise RuntimeError(f"the generation batch lacks {missing}")

    # Stock GRPO must ignore the hint tensors: the same loss with and without them.
    stock = built["grpo"][0]
    with torch.no_grad():
        with_keys = stock.compute_loss(stock.model, dict(inputs)).item()
        without = stock.compute_loss(stock.model, {k: v for k, v in inputs.items() if not k.startswith("hint_")}).item()
    hint_keys_gap = abs(with_keys - without)
    grpo_ignores_hint_keys = hint_keys_gap <= 1e-6 * max(1.0, abs(without))
    if not grpo_ignores_hint_keys:
        raise RuntimeError(f"stock GRPO's loss changes with the hint keys ({with_keys} vs {without})")

    # Warm-up (the last warm-up step counts forward passes and operators: the optimizer's state exists by then),
    # then interleaved rounds.
    times = {arm: [] for arm in arm_names}
    work = {}
    total = len(arm_names) * (WARMUP + repeats)
    with bar(total=total, desc=f"steps ({size})", leave=False) as meter:
        for arm in arm_names:
            trainer, optimizer = built[arm]
            for _ in range(WARMUP - 1):
                _step(trainer, optimizer, inputs, cuda)
            work[arm] = _count_work(trainer, optimizer, inputs, cuda)
            meter.update(WARMUP)
        for r in range(repeats):
            for k in range(len(arm_names)):
                arm = arm_names[(r + k) % len(arm_names)]
                times[arm].append(_step(*built[arm], inputs, cuda))
                meter.update(1)

    mem = {arm: None for arm in arm_names}
    memory_method = None
    if memory:
        memory_method = "cuda max_memory_allocated" if cuda else "cpu peak RSS delta per fresh process"
        data_path = os.path.join(workdir, "batch.pt")
        save_memory_data(data_path, model_path, inputs, pairs)
        del built, stock, trainer, optimizer  # free this process's trainers before the children run
        gc.collect()
        for arm in bar(arm_names, desc="memory (fresh process per arm)", leave=False):
            mem[arm] = _memory(arm, size, data_path)

    completion_mask = inputs["completion_mask"].float()
    arms = {}
    for arm in arm_names:
        t = np.asarray(times[arm])
        arms[arm] = {
            "step_s_median": float(np.median(t)),
            "step_s_p10": float(np.percentile(t, 10)),
            "step_s_p90": float(np.percentile(t, 90)),
            "step_s_mean": float(t.mean()),
            "step_s_min": float(t.min()),
            "peak_mem_bytes": mem[arm]["peak_mem_bytes"] if mem[arm] else None,
            "retained_mem_bytes": mem[arm]["retained_mem_bytes"] if mem[arm] else None,
            **work[arm],
            "hint_distill_weight": WEIGHTS.get(arm, (None, None))[0],
            "trace_replay_weight": WEIGHTS.get(arm, (None, None))[1],
        }
    base = arms["grpo"]
    ratios = {}
    for key, arm in (("00", "composer_00"), ("hint", "hint"), ("dpo", "dpo"), ("all", "all")):
        figures = arms.get(arm, {})  # an arm this size leaves out has no ratios
        for name, figure in (("time", "step_s_median"), ("mem", "peak_mem_bytes"), ("ops", "ops")):
            ratios[f"ratio_{key}_{name}"] = _ratio(figures.get(figure), base[figure])
    return {
        **{k: ratios[k] for k in TARGETS},
        "targets": dict(TARGETS),
        "meets_targets": {k: None if ratios[k] is None else bool(ratios[k] <= v) for k, v in TARGETS.items()},
        "ratios": ratios,
        # What the work itself costs, apart from how it is done: a ratio above its floor is overhead to remove, one
        # near it can only fall by running fewer tokens (fewer or shorter pairs, shorter hinted prompts).
        "work_floor_time": {arm: work_floor(arms, arm) for arm in ("hint", "dpo", "all") if arm in arms},
        "work_floor_note": " ".join(work_floor.__doc__.split()),
        "arms": arms,
        "samples_s": {arm: [float(x) for x in times[arm]] for arm in arm_names},
        "device": device,
        "size": size,
        "repeats": repeats,
        "warmup": WARMUP,
        "mode": MODE,
        "scope": SCOPE,
        "memory_method": memory_method,
        "memory_note": None if not memory else (
            "per arm, in a fresh process: peak increase from just before the trainer is built to after "
            f"{WARMUP + MEMORY_STEPS} steps (model, teacher copy, AdamW state, activations; not imports)"
            + ("" if cuda else f"; glibc MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD} so RSS follows live tensors; peak-RSS "
               f"mark reset before the build: {all(m['hwm_reset'] for m in mem.values())}")),
        "grpo_ignores_hint_keys": grpo_ignores_hint_keys,
        "grpo_hint_keys_loss_gap": hint_keys_gap,
        "config": {
            "model": {**TINY, **spec["model"]},
            "rollouts": spec["batch"], "num_generations": spec["generations"],
            "max_completion_length": spec["completion"], "trace_replay_batch_size": spec["pairs"],
            "hint_distill_weight": HINT_WEIGHT, "trace_replay_weight": DPO_WEIGHT, "hint_teacher": "frozen",
            "optimizer": f"torch.optim.AdamW(lr={LR})", "dtype": "bfloat16" if spec.get("bf16") else "float32",
            "gradient_checkpointing": spec.get("gradient_checkpointing", False),
            "context_tokens": spec.get("context", 0),
        },
        "batch": {
            "prompt_tokens": int(inputs["prompt_ids"].size(1)),
            "hint_prompt_tokens": int(inputs["hint_prompt_ids"].size(1)),
            "completion_tokens": int(inputs["completion_ids"].size(1)),
            "completion_tokens_mean": float(completion_mask.sum(-1).mean()),
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
    }


# ---------------------------------------------------------------- output


def _mib(n):
    return "-" if n is None else f"{n / 2**20:.1f}"


def _fmt_ratio(x):
    return "-" if x is None else f"{x:.3f}"


def table(result: dict) -> str:
    """The human-readable summary of a `measure` result."""
    lines = [
        f"ComposerTrainer overhead vs GRPOTrainer: size={result['size']} device={result['device']} "
        f"repeats={result['repeats']} mode={result['mode']}",
        f"scope: {result['scope']}",
        f"memory: {result['memory_method'] or 'skipped'}",
        "",
        f"{'arm':<12} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'x grpo':>7} {'floor':>6} {'fwd s/t':>8} "
        f"{'tokens s/t':>11} {'ops':>7} {'x grpo':>7} {'peak MiB':>9} {'x grpo':>7}",
    ]
    ratios = result["ratios"]
    for arm, a in result["arms"].items():
        key = {"grpo": None, "composer_00": "00"}.get(arm, arm)
        t_ratio = 1.0 if key is None else ratios[f"ratio_{key}_time"]
        m_ratio = (1.0 if a["peak_mem_bytes"] else None) if key is None else ratios[f"ratio_{key}_mem"]
        o_ratio = 1.0 if key is None else ratios[f"ratio_{key}_ops"]
        lines.append(
            f"{arm:<12} {a['step_s_median'] * 1e3:>10.2f} {a['step_s_p10'] * 1e3:>8.2f} {a['step_s_p90'] * 1e3:>8.2f} "
            f"{_fmt_ratio(t_ratio):>7} {_fmt_ratio(result['work_floor_time'].get(arm)):>6} "
            f"{a['student_forwards']}/{a['teacher_forwards']:<6} {a['student_tokens']}/{a['teacher_tokens']:<6} "
            f"{a['ops']:>7} {_fmt_ratio(o_ratio):>7} {_mib(a['peak_mem_bytes']):>9} {_fmt_ratio(m_ratio):>7}"
        )
    lines.append("")
    for key, target in result["targets"].items():
        met = result["meets_targets"][key]
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        lines.append(f"{key:<15} {_fmt_ratio(result[key]):>7}  target <= {target}  {verdict}")
    lines.append(f"floor: {result['work_floor_note']}")
    lines.append(f"wall time {result['wall_s']:.1f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer bench trainer",
                                     description="ComposerTrainer overhead vs stock TRL GRPOTrainer.")
    parser.add_argument("--repeats", type=int, default=10, help="interleaved timed rounds per arm (default 10)")
    parser.add_argument("--size", choices=tuple(SIZES), default="small", help="model and batch size (default small)")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-arm memory processes")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # internal: one memory process
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.arm:
        if not args.data:
            parser.error("--arm needs --data")
        with contextlib.redirect_stdout(sys.stderr):
            out = _memory_child(args.arm, args.size, args.data)
        print(json.dumps(out))
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    result = measure(size=args.size, repeats=args.repeats, memory=not args.no_memory)
    print(table(result))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
