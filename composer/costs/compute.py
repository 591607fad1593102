"""What a live run needs of its GPUs, phase by phase: memory per device and the seconds of a training step or an
evaluation, from stated assumptions (the tables below composer.costs.plan's headers and composer.costs.power's designs).

    from composer.costs import compute
    model = compute.MODELS["Qwen/Qwen3-8B"]
    compute.memory_gb(model, compute.Setup("lora", "colocate", 0.4, gpus=1), seq_tokens=16384)
    compute.gpu_hours(model, compute.Setup("full", "colocate", 0.4, 8, dpo_pairs=1, gpu="H200"), steps=100,
                      rollouts_per_step=112, tokens_per_rollout=19_500, turns=18)   # {"generate_s": ..., "hours": ...}
    compute.Setup("full", "server", 0, 8, server_gpus=4, tp=2, offload=True)    # vLLM on 4 GPUs as 2 engines

An ESTIMATE, never a measurement. Memory per device, in GB (1e9 bytes):
- training state: full fine-tuning 16 bytes per parameter (fp32 master weights 4, fp32 gradients 4, Adam's two
  moments 8), LoRA 2 (the frozen bf16 base) plus 16 per adapter parameter (rank 16 on every linear layer:
  LORA_SHARE of the parameters); sharded over the GPUs that train (FSDP2 full shard); a full fine-tune's frozen
  hint teacher adds a bf16 copy (2, sharded; with LoRA the teacher is the adapter-disabled base: free); with
  `offload` it all lives in CPU memory and a GPU holds the two layers FSDP2 has gathered (weights and gradients);
- activations of one sequence of seq_tokens (micro-batch 1, gradient checkpointing): each layer's input kept
  (2 bytes x hidden), one layer recomputed (34 bytes x hidden, Korthikanti et al. 2022). The logits are never
  whole: TRL's fused LM head scores the tokens in tiles of 4,096 tokens x 32,768 vocabulary entries (HEAD_TILE_BYTES,
  counted in fp32);
- the trace-replay channel (dpo_pairs per micro-batch): a pair is one row, its prompt once and chosen and rejected
  as two branches (composer.trainer.pack_rows), counted here as two whole sequences of seq_tokens each (an upper
  bound: the prompt is counted twice), alive in the same graph as the rollout's until the one backward, plus the full logits
  (6 bytes x vocabulary) of their completions, one agent action of ACTION_TOKENS each; split over `sp` GPUs under
  sequence parallelism (which 004's arms do not run: only published runs' layouts use it);
- with `sleep` (a published run's memory saver, TRL's vllm_enable_sleep_mode: 004's arms do not set it) colocated
  vLLM's share is freed while the step trains, so the GPU holds the larger of training and generation;
- vLLM: colocate reserves its memory fraction of every training GPU; server mode puts vLLM on `server_gpus` GPUs of
  its own and reserves nothing on the training GPUs; either way an engine spans `tp` GPUs (tensor parallel) and must
  hold the bf16 weights and one sequence's KV cache in its share of them, or the layout does not fit;
- RUNTIME_GB for the CUDA context, NCCL buffers and allocator fragmentation.

The seconds of a training step, phase after phase as the code runs them (TRL 1.16's tool loop,
composer.collection.collect):
- generation: a rollout is `turns` turns; each turn is one collective across the training processes, so every
  episode's next action is generated before any tool runs. A vLLM engine holds kv_tokens of KV cache: the turn's
  episodes decode in waves of as many contexts as fit, each decode step reading the bf16 weights and the batch's KV
  cache (memory-bound: DECODE_BANDWIDTH_SHARE of the GPU's bandwidth); while every live context fits the cache,
  vLLM's prefix cache keeps them and a turn prefills only its new observation, and once they do not, the turn
  re-prefills every context (a cache cycled through in order keeps nothing under LRU eviction), at MFU of the
  GPU's peak. Server mode has server_gpus / tp engines for all the step's episodes, colocate gpus / tp;
- tools: each process runs its episodes' tool calls one after another (TOOL_S each, for every turn of every
  episode: TRL's loop), or with `concurrent_tools` (composer.episodes, collect.build_trainer's default) each turn's
  calls of all its episodes at once, counted here as GRADERS at a time on the node (the code runs up to
  episodes.WORKERS threads per process);
- environment start and grading: each episode's container start and its submission's grading (submit grades inside
  the loop), serially per process, or GRADERS at once with concurrent_tools (in the code the gradings, each in a
  fresh container; an episode's own container is prepared at reset, outside the tool loop, serially per process:
  here counted at once, an undercount);
- training: 2 x parameters FLOPs per token for a forward, 6 for a forward and backward (4 with LoRA: no weight
  gradients), plus the forward gradient checkpointing recomputes, plus TRL's no-grad forward for the importance
  sampling correction under vLLM (vllm_importance_sampling_correction, on by default: TRL 1.16's
  GRPOTrainer._generate_and_score_completions), plus the hint teacher's forward; causal attention adds
  2 x layers x attention width x sequence length FLOPs per token and forward; each DPO pair's two sequences are
  trained (forward, backward, recompute; their reference log-probs come precomputed with the pairs); at MFU of the
  peak over the training GPUs; with `offload`, each pass over a micro-batch brings the fp32 shard over PCIe and its
  gradients back, and Adam steps on the CPU. Nothing overlaps: the step is the sum, and every GPU the run holds is
  paid for meanwhile (in server mode the vLLM GPUs idle while the others train, and the others while they generate).
An evaluation (one checkpoint on its tasks x samples) runs the same phases without training: one vLLM engine per
training process on a GPU of its own (composer.vllm_engine), the environment's steps side by side
(policies.rollouts' thread pool: concurrent), the containers started one after another in each process.
Not counted: weight pushes to vLLM (seconds a step), checkpoints, the slowest episodes' extra turns (a turn's
collective waits for them), queueing.
"""

import math
from dataclasses import dataclass

MFU = 0.40  # an assumption: FSDP2 training at micro-batch 1 and vLLM prefill both reach 40 % of the dense peak
DECODE_BANDWIDTH_SHARE = 0.7  # an assumption: a memory-bound decode step reads weights and KV at 70 % of HBM bandwidth
VLLM_MEMORY = 0.9  # vLLM's default gpu_memory_utilization, and the live launcher's `--gpu_memory_utilization 0.9`
RUNTIME_GB = 3.0  # an assumption: CUDA context, NCCL buffers, fragmentation (and vLLM's activations and graphs)
LORA_SHARE = 0.005  # adapter parameters over model parameters at rank 16 on every linear layer (Qwen3-8B: ~0.5 %)
FILL = 0.6  # an assumption: the share of its token and turn budgets an agentic rollout uses on average
# The shipped traces (data/real-traces: 23 mini-swe-agent trajectories of DeepSeek-chat on SWE-bench Lite, counted
# with cl100k_base): the system prompt and issue are 1,380 tokens (median; mean 1,472), a tool's output 211 (mean
# of 1,843 turns), and 32 % of the calls run code (5 % a test runner, 27 % python).
PROMPT_TOKENS = 1_500
OBSERVATION_TOKENS = 210
TURN_TOKENS = 1_000  # an assumption: Qwen3's action with its thinking (~790 tokens) and the tool's output (210)
RUN_TESTS_SHARE = 0.3
# The project's bench (`bench env --backend container`, marshmallow-code__marshmallow-1343 in podman): a container
# starts in 1.48 s and its whole suite (779 tests) runs in 4.0 s; bigger repositories' (django, sympy, astropy) take
# longer: RUN_TESTS_S and EXEC_S (a view, search or edit through the container) are assumptions.
START_S = 1.5
RUN_TESTS_S = 10.0
EXEC_S = 0.5
TOOL_S = RUN_TESTS_SHARE * RUN_TESTS_S + (1 - RUN_TESTS_SHARE) * EXEC_S  # one tool call, on average
GRADING_S = 60.0  # an assumption: one submission's grading in a fresh container on a real repository (bench: 5.8 s
#                   on marshmallow, the smallest of Lite's repositories)
GRADERS = 32  # containers at once (CPU cores of the node) when the environment runs them concurrently
# Offload (FSDP2's CPUOffloadPolicy): the fp32 shard crosses PCIe at PCIE_BYTES_S (an assumption: ~40 % of PCIe 5.0
# x16's 64 GB/s), and Adam steps on the CPU at CPU_ADAM_S a parameter (an assumption: PyTorch's CPU Adam, ~1.4 s for a
# billion parameters, the figure ZeRO-Offload (Ren et al. 2021) measured for it)
PCIE_BYTES_S = 25e9
CPU_ADAM_S = 1.4e-9
BYTES_PER_GB = 1e9
HEAD_TILE_BYTES = 4096 * 32768 * 4  # TRL 1.16's fused LM head: one [4,096 tokens, 32,768 vocabulary] tile, fp32
ACTION_TOKENS = 512  # a DPO pair's completion: one agent action (an assumption)


@dataclass(frozen=True)
class Gpu:
    memory_gb: float
    bandwidth: float  # HBM bytes per second
    peak_flops: float  # dense bf16


# NVIDIA's datasheets: H100 SXM 80 GB HBM3 at 3.35 TB/s, H200 SXM 141 GB HBM3e at 4.8 TB/s, both 989 dense bf16 TFLOPS
GPUS = {"H100": Gpu(80.0, 3.35e12, 989e12), "H200": Gpu(141.0, 4.8e12, 989e12)}


@dataclass(frozen=True)
class Model:
    params_b: float  # billions of parameters
    layers: int
    hidden: int
    vocab: int
    kv_bytes_per_token: int  # 2 (K, V) x layers x KV heads x head dim x 2 bytes
    attention_width: int  # query heads x head dim (what attention's FLOPs scale with)


def _qwen3(params_b: float, layers: int, hidden: int, query_heads: int) -> Model:
    return Model(params_b, layers, hidden, 151_936, 2 * layers * 8 * 128 * 2, query_heads * 128)


# The Qwen3 model cards and config.json on Hugging Face (Qwen/Qwen3-*): parameters, layers, hidden size, query
# heads; every size has 8 KV heads of dimension 128 and a 151,936-token vocabulary. Qwen3-32B is here only for a
# published run's check (tests/test_costs_plan.py), not a student 004 would train (its full fine-tune fits no layout).
MODELS = {
    "Qwen/Qwen3-0.6B": _qwen3(0.6, 28, 1024, 16),
    "Qwen/Qwen3-1.7B": _qwen3(1.7, 28, 2048, 16),
    "Qwen/Qwen3-4B": _qwen3(4.0, 36, 2560, 32),
    "Qwen/Qwen3-8B": _qwen3(8.19, 36, 4096, 32),
    "Qwen/Qwen3-14B": _qwen3(14.8, 40, 5120, 40),
    "Qwen/Qwen3-32B": _qwen3(32.8, 64, 5120, 64),
}


def model(name: str) -> Model:
    """The shape of a student by its Hugging Face name; an unknown one is refused, naming the known."""
    if name not in MODELS:
        raise ValueError(f"unknown student {name!r}: composer/costs/compute.py's MODELS has "
                         f"{', '.join(MODELS)}; add its shape there (parameters, layers, hidden size, query heads: its config.json)")
    return MODELS[name]


@dataclass(frozen=True)
class Setup:
    mode: str  # "full" | "lora"
    vllm: str  # "colocate" | "server" | "none" (transformers generation)
    vllm_fraction: float  # colocate: vllm_gpu_memory_utilization
    gpus: int  # GPUs the run holds (server mode: server_gpus of them serve, the rest train)
    hint_teacher: bool = False  # a frozen model's forward per token (ComposerTrainer's hint teacher, a KL reference)
    dpo_pairs: int = 0  # the trace-replay channel's pairs per micro-batch (0: channel off)
    gpu: str = "H100"
    server_gpus: int = 1  # server mode: the GPUs of `trl vllm-serve` (--data_parallel_size engines of tp GPUs each)
    tp: int = 1  # GPUs one vLLM engine spans (tensor parallel; colocate: TRL's vllm_tensor_parallel_size)
    offload: bool = False  # FSDP2 keeps parameters, gradients and Adam on the CPU (accelerate's fsdp_offload_params)
    sp: int = 1  # GPUs a sequence's activations are split over (Ulysses sequence parallel: published runs' layouts)
    sleep: bool = False  # colocated vLLM frees its share while the step trains (TRL's vllm_enable_sleep_mode)

    def __post_init__(self):
        if self.mode not in ("full", "lora"):
            raise ValueError(f"mode {self.mode!r}: 'full' or 'lora'")
        if self.vllm not in ("colocate", "server", "none"):
            raise ValueError(f"vllm {self.vllm!r}: 'colocate', 'server' or 'none'")
        if not 0 <= self.vllm_fraction < 1 or (self.vllm == "colocate") != (self.vllm_fraction > 0):
            raise ValueError(f"vllm_fraction {self.vllm_fraction}: in (0, 1) with colocate, 0 otherwise")
        if self.gpus < 1 or (self.vllm == "server" and not 1 <= self.server_gpus < self.gpus):
            raise ValueError(f"gpus {self.gpus}: at least 1, and more than server_gpus ({self.server_gpus}) in server "
                             "mode")
        if self.tp < 1 or (self.server_gpus if self.vllm == "server" else self.gpus) % self.tp:
            raise ValueError(f"tp {self.tp}: a divisor of the GPUs vLLM runs on")
        if self.sp < 1 or self.training_gpus % self.sp:
            raise ValueError(f"sp {self.sp}: a divisor of the training GPUs")
        if self.sleep and self.vllm != "colocate":
            raise ValueError("sleep: only a colocated engine sleeps")
        if self.dpo_pairs < 0:
            raise ValueError(f"dpo_pairs {self.dpo_pairs}: 0 (no trace-replay channel) or more")
        if self.gpu not in GPUS:
            raise ValueError(f"gpu {self.gpu!r}: one of {sorted(GPUS)}")

    @property
    def training_gpus(self) -> int:
        return self.gpus - self.server_gpus if self.vllm == "server" else self.gpus

    @property
    def engines(self) -> int:
        """vLLM engines generating a step's rollouts ("none": one per GPU, a lower bound)."""
        return {"server": self.server_gpus // self.tp, "colocate": self.gpus // self.tp, "none": self.gpus}[self.vllm]

    @property
    def fraction(self) -> float:
        """The share of each of its GPUs an engine may use."""
        return self.vllm_fraction if self.vllm == "colocate" else VLLM_MEMORY


def memory_gb(model: Model, setup: Setup, *, seq_tokens: int) -> dict:
    """GB per training GPU, by part, and whether it fits in the GPU's memory (see the module doc)."""
    p = model.params_b * 1e9
    state = 16 * p if setup.mode == "full" else 2 * p + 16 * LORA_SHARE * p
    if setup.hint_teacher and setup.mode == "full":
        state += 2 * p
    state /= setup.training_gpus
    if setup.offload:  # only the layers FSDP2 has gathered stay: two layers' bf16 weights and gradients
        state = 2 * 4 * p / model.layers
    sequences = 1 + 2 * setup.dpo_pairs  # the rollout, and each pair's chosen and rejected
    activations = (sequences * seq_tokens * (model.layers * 2 * model.hidden + 34 * model.hidden) + HEAD_TILE_BYTES
                   + 2 * setup.dpo_pairs * ACTION_TOKENS * 6 * model.vocab)
    gpu_gb = GPUS[setup.gpu].memory_gb
    parts = {"training_state": state / BYTES_PER_GB,
             "activations": activations / setup.sp / BYTES_PER_GB,
             "vllm": setup.vllm_fraction * gpu_gb,
             "runtime": RUNTIME_GB}
    total = sum(parts.values())
    if setup.sleep:  # training and generation take turns: the larger of the two
        total = max(total - parts["vllm"], parts["training_state"] + parts["vllm"] + parts["runtime"])
    # an engine must hold the bf16 model and one sequence's KV cache in its share of its tp GPUs (a server's
    # engines on GPUs of their own, colocated ones beside the training)
    vllm_room = setup.vllm == "none" or kv_tokens(model, GPUS[setup.gpu], setup.fraction, setup.tp) >= seq_tokens
    return {**parts, "total": total, "fits": total <= gpu_gb and vllm_room, "vllm_holds_model": vllm_room}


def kv_tokens(model: Model, gpu: Gpu, fraction: float, tp: int = 1) -> float:
    """Tokens of KV cache a vLLM engine over `tp` GPUs holds at `fraction` of each: what is left of it after the
    bf16 weights (sharded over them) and RUNTIME_GB a GPU."""
    free_gb = max(0.0, tp * (fraction * gpu.memory_gb - RUNTIME_GB) - 2 * model.params_b)
    return free_gb * BYTES_PER_GB / model.kv_bytes_per_token


def generation_s(model: Model, gpu: Gpu, *, episodes: int, engines: int, fraction: float, turns: float,
                 tokens_per_rollout: float, tp: int = 1) -> dict:
    """Seconds of generation (prefill and decode) for `episodes` episodes of `turns` turns shared out over `engines`
    vLLM engines of `fraction` of `tp` GPUs each (tensor parallel: their bandwidth and FLOPs add up, the all-reduces
    uncounted), every turn a collective (see the module doc), and the most contexts an engine held at once in the
    last turn (`batch_last`)."""
    per_engine = math.ceil(episodes / engines)
    capacity = kv_tokens(model, gpu, fraction, tp)
    p = model.params_b * 1e9
    flops, bandwidth = tp * MFU * gpu.peak_flops, tp * DECODE_BANDWIDTH_SHARE * gpu.bandwidth
    n = max(1, round(turns))
    step = (tokens_per_rollout - PROMPT_TOKENS) / n  # context a turn adds
    new = max(1.0, step - OBSERVATION_TOKENS)  # tokens a turn generates
    prefill = decode = 0.0
    batch = per_engine
    for t in range(n):
        context = PROMPT_TOKENS + t * step  # what the turn's action is generated after
        attention = 2 * model.layers * model.attention_width * context  # FLOPs per prefilled token, on average
        kept = t > 0 and per_engine * (context + new) <= capacity
        prefill += per_engine * (OBSERVATION_TOKENS * (2 * p + 2 * attention) if kept else
                                 context * (2 * p + attention)) / flops
        batch = min(per_engine, max(1, math.floor(capacity / (context + new))))
        read = 2 * p + batch * (context + new / 2) * model.kv_bytes_per_token  # bytes a decode step reads
        token_s = max(read / bandwidth, batch * 2 * p / flops)
        decode += math.ceil(per_engine / batch) * new * token_s
    return {"prefill_s": prefill, "decode_s": decode, "batch_last": batch, "episodes_per_engine": per_engine}


def environment_s(episodes: int, processes: int, turns: float, *, concurrent_tools: bool, tool_s: float = TOOL_S,
                  start_s: float = START_S, grading_s: float = GRADING_S, graders: int = GRADERS) -> dict:
    """Seconds of the environment's work for `episodes` episodes: tool calls (every turn, tool_s each), container
    starts and gradings, one after another in each of `processes` processes, or `graders` at once with
    concurrent_tools (a run's measured seconds replace the assumed ones: composer.costs.phases.scaled)."""
    rounds = math.ceil(episodes / graders) if concurrent_tools else math.ceil(episodes / processes)
    return {"tools_s": rounds * max(1, round(turns)) * tool_s, "grade_s": rounds * (start_s + grading_s)}


def training_s(model: Model, setup: Setup, *, rollouts: int, tokens_per_rollout: float) -> float:
    """Seconds of one optimizer step's training on `rollouts` sequences of tokens_per_rollout tokens (module doc)."""
    p = model.params_b * 1e9
    attention = 2 * model.layers * model.attention_width * tokens_per_rollout  # forward FLOPs per token
    grad = 6 if setup.mode == "full" else 4  # forward and backward; LoRA computes no weight gradients of the base
    forwards = 2 + (1 if setup.hint_teacher else 0)  # checkpoint recompute, importance sampling, the hint teacher
    rollout = (grad + 2 * forwards) * p + (grad / 2 + forwards) * attention
    pair = (grad + 2) * p + (grad / 2 + 1) * attention  # each of a pair's two sequences: trained and recomputed
    flops = rollouts * tokens_per_rollout * (rollout + 2 * setup.dpo_pairs * pair)
    seconds = flops / (MFU * GPUS[setup.gpu].peak_flops * setup.training_gpus)
    if setup.offload:  # every pass over a micro-batch brings the fp32 shard in, its gradients go out; Adam on CPU
        passes = 2 + forwards  # forward, backward and the extra forwards
        micro_batches = math.ceil(rollouts / setup.training_gpus)
        seconds += micro_batches * (passes + 1) * 4 * p / setup.training_gpus / PCIE_BYTES_S + p * CPU_ADAM_S
    if setup.sleep:  # the engine's bf16 weights (its share on each GPU) go to the CPU and back
        seconds += 2 * 2 * p / setup.tp / PCIE_BYTES_S
    return seconds


def gpu_hours(model: Model, setup: Setup, *, steps: int, rollouts_per_step: int, tokens_per_rollout: float,
              turns: float | None = None, concurrent_tools: bool = True, graders: int = GRADERS) -> dict:
    """Seconds of one step by phase, hours of one training run (one arm, one seed) and its GPU-hours (module doc).
    turns: a rollout's turns (default: as many as its tokens make at TURN_TOKENS a turn); graders: containers at once
    (a published run's sandbox cluster runs hundreds)."""
    turns = (tokens_per_rollout - PROMPT_TOKENS) / TURN_TOKENS if turns is None else turns
    gen = generation_s(model, GPUS[setup.gpu], episodes=rollouts_per_step, engines=setup.engines,
                       fraction=setup.fraction, turns=turns, tokens_per_rollout=tokens_per_rollout, tp=setup.tp)
    env = environment_s(rollouts_per_step, setup.training_gpus, turns, concurrent_tools=concurrent_tools,
                        graders=graders)
    train_s = training_s(model, setup, rollouts=rollouts_per_step, tokens_per_rollout=tokens_per_rollout)
    step_s = gen["prefill_s"] + gen["decode_s"] + env["tools_s"] + env["grade_s"] + train_s
    hours = steps * step_s / 3600
    return {"generate_s": gen["prefill_s"] + gen["decode_s"], **gen, **env, "train_s": train_s, "step_s": step_s,
            "hours": hours, "gpu_hours": hours * setup.gpus}


def evaluation_gpu_hours(model: Model, setup: Setup, *, episodes: int, tokens_per_rollout: float,
                         turns: float) -> float:
    """GPU-hours of evaluating one checkpoint on `episodes` episodes (tasks x samples) on the setup's node: an engine
    on each training GPU at VLLM_MEMORY, the environment concurrent, container starts serial per process."""
    gen = generation_s(model, GPUS[setup.gpu], episodes=episodes, engines=setup.training_gpus, fraction=VLLM_MEMORY,
                       turns=turns, tokens_per_rollout=tokens_per_rollout)
    env = environment_s(episodes, setup.training_gpus, turns, concurrent_tools=True)
    starts = math.ceil(episodes / setup.training_gpus) * START_S
    seconds = gen["prefill_s"] + gen["decode_s"] + env["tools_s"] + env["grade_s"] + starts
    return seconds / 3600 * setup.gpus


def workload(values: dict) -> dict:
    """Model, steps, rollouts per step, sequence length and the average rollout (tokens, turns) of a live profile's
    parameters: a rollout uses FILL of its turn budget (the tighter of max_tool_calling_iterations and
    env_max_steps) at TURN_TOKENS a turn, or FILL of max_completion_length if that binds first."""
    per_step = values.get("prompts_per_step") or values["n_prompts"] // values["steps"]
    max_turns = min(values.get("max_tool_calling_iterations", 10), values.get("env_max_steps", 10 ** 6))
    tokens = min(FILL * values["max_completion_length"], PROMPT_TOKENS + FILL * max_turns * TURN_TOKENS)
    return {"model": values["student"], "steps": values["steps"], "rollouts_per_step": per_step * values["generations"],
            "seq_tokens": values["max_completion_length"], "max_turns": max_turns, "tokens_per_rollout": tokens,
            "turns": (tokens - PROMPT_TOKENS) / TURN_TOKENS}


# The rows of each live profile's table: setups a researcher would try, chosen to show what fits.
SETUPS = {
    "002a-trace-collection-trl": [Setup("full", "colocate", 0.4, 1), Setup("lora", "colocate", 0.4, 1),
                                  Setup("full", "colocate", 0.4, 8)],
    # arm B (the trace-replay channel; A is the same without it), at the YAML's pairs per micro-batch
    "004-ab-train-grpo-vs-trace-replay-dpo": [Setup("lora", "server", 0, 2, dpo_pairs=1),
                                              Setup("full", "server", 0, 8, dpo_pairs=1),
                                              Setup("full", "server", 0, 8, dpo_pairs=1, server_gpus=4),
                                              Setup("full", "colocate", 0.5, 8, dpo_pairs=1),
                                              Setup("full", "colocate", 0.5, 8, dpo_pairs=1, offload=True),
                                              Setup("full", "colocate", 0.5, 8, dpo_pairs=1, gpu="H200"),
                                              Setup("full", "colocate", 0.5, 8, dpo_pairs=2, gpu="H200")],
}
