"""ComposerTrainer: TRL's GRPOTrainer plus two weighted channels.

    from composer.trainer import ComposerConfig, ComposerTrainer
    args = ComposerConfig("runs/x", hint_distill_weight=0.1, trace_replay_weight=0.5, use_cpu=True)
    ComposerTrainer(model_path, reward_funcs=[reward], args=args, train_dataset=ds,
                    processing_class=tok, pairs_dataset=pairs).train()

total loss = GRPO loss + hint_distill_weight * hint term + trace_replay_weight * DPO term

- hint distillation (SDPO / OPSD): the teacher is the same model with a hint in its context
  (a dataset column, or a successful sibling rollout of the same group), run without gradient;
  the divergence is taken on the student's own sampled completion tokens.
- trace replay: DPO on (chosen, rejected) next actions mined from teacher disagreement, with
  reference log-probs stored in the pairs dataset (see `add_reference_logps`), so no second
  model copy is needed for this channel; trace_replay_nll_weight adds the chosen action's mean token NLL
  to each pair's loss (RPO). A pair's chosen and rejected share one encoding of its
  prompt in one row (`pack_rows`), and where GRPO's rows are padded the pairs ride in GRPO's own
  forward (`ComposerTrainer._ride`): the channel then adds no forward and no backward of its own,
  which is most of its cost where a step is bound by the host issuing kernels (docs/results.md).

With both weights 0 the trainer is exactly GRPOTrainer: same loss, same gradients, no extra
forward pass. Both extra terms are invariant to gradient accumulation: the hint term is scaled the way TRL
scales its own "grpo" loss (per-sequence mean, batch mean, divided by the accumulation steps), and the DPO term
trains trace_replay_batch_size pairs per optimizer step and process however the step is split into micro-batches
(shared out over them as evenly as they go: at 1 pair and 16 micro-batches, one micro-batch carries it).
"""

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from accelerate.utils import gather_object, is_peft_model
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.callbacks import SyncRefModelCallback
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import (add_fused_lm_head, create_model_from_path, get_config_model_id, pad,
                              selective_log_softmax)

from composer.losses import dpo_loss, hint_distill_per_token

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "ref_chosen_logps", "ref_rejected_logps")
HINT_MODES = ("sampled_token", "topk", "full")
HINT_TEACHERS = ("frozen", "ema", "live")
HINT_SOURCES = ("column", "sibling")
PACKED_MODELS = ("qwen3",)  # whose logits are lm_head(last hidden state), see packable


@dataclass
class ComposerConfig(GRPOConfig):
    """GRPOConfig plus the channel weights. Every new field is validated at construction."""

    hint_distill_weight: float = field(default=0.0, metadata={"help": "alpha: weight of the hint-distillation term."})
    hint_distill_mode: str = field(default="sampled_token", metadata={"help": f"One of {HINT_MODES}."})
    hint_distill_divergence: float = field(
        default=1.0, metadata={"help": "0 = forward KL, 1 = reverse KL, between = generalized JSD."}
    )
    hint_distill_topk: int | None = field(default=None, metadata={"help": "Support size for mode 'topk'."})
    hint_distill_add_tail: bool = field(default=True, metadata={"help": "Tail bucket for the mass outside top-k."})
    hint_teacher: str = field(default="frozen", metadata={"help": f"Teacher weights, one of {HINT_TEACHERS}."})
    hint_teacher_ema_rate: float = field(default=0.05, metadata={"help": "EMA rate when hint_teacher='ema'."})
    hint_source: str = field(default="column", metadata={"help": f"Where hints come from, one of {HINT_SOURCES}."})
    hint_column: str = field(default="hint", metadata={"help": "Dataset column holding the hint text."})
    hint_template: str = field(
        default="\n\nHint: {hint}", metadata={"help": "Appended to the last user message of the teacher's context."}
    )
    sibling_success_reward: float = field(
        default=1.0, metadata={"help": "A sibling rollout with reward >= this is a successful one."}
    )
    trace_replay_weight: float = field(default=0.0, metadata={"help": "Weight of the trace-replay DPO term."})
    trace_replay_beta: float = field(default=0.1, metadata={"help": "DPO beta."})
    trace_replay_nll_weight: float = field(default=0.0, metadata={"help": (
        "Weight of the chosen action's mean token NLL in each pair's loss (RPO; TRL's rpo_alpha): DPO alone may widen "
        "a margin by making both actions less likely, this keeps the chosen one likely.")})
    trace_replay_batch_size: int = field(
        default=2, metadata={"help": "Pairs per optimizer step and process, shared out over its micro-batches."}
    )
    unmasked_cpu_rows: bool = field(default=False, metadata={"help": (
        "On CPU (sdpa), GRPO's padded rows one forward each and DPO pairs one at a time, every sequence attended "
        "without a mask (unmasked_rows_logps: long rows run in less time and far less memory); off: TRL's batched "
        "forward, which 0/0 reduces to exactly.")})

    def __post_init__(self):
        check_channels(self)
        super().__post_init__()


def check_channels(args) -> None:
    """Refuse a bad channel configuration before anything is loaded; the message names the field."""
    for name in ("hint_distill_weight", "trace_replay_weight", "trace_replay_nll_weight"):
        if getattr(args, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(args, name)}")
    choices = {"hint_distill_mode": HINT_MODES, "hint_teacher": HINT_TEACHERS, "hint_source": HINT_SOURCES}
    for name, allowed in choices.items():
        if getattr(args, name) not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {getattr(args, name)!r}")
    if not 0.0 <= args.hint_distill_divergence <= 1.0:
        raise ValueError(f"hint_distill_divergence must be in [0, 1], got {args.hint_distill_divergence}")
    if args.hint_distill_mode == "sampled_token" and args.hint_distill_divergence != 1.0:
        raise ValueError(
            "hint_distill_divergence must be 1.0 (reverse KL) with hint_distill_mode='sampled_token': only the "
            "sampled token's probability is known; use mode 'topk' or 'full' for other divergences"
        )
    if args.hint_distill_mode == "topk" and (args.hint_distill_topk is None or args.hint_distill_topk < 1):
        raise ValueError(f"hint_distill_topk must be >= 1 with mode 'topk', got {args.hint_distill_topk}")
    if not 0.0 < args.hint_teacher_ema_rate <= 1.0:
        raise ValueError(f"hint_teacher_ema_rate must be in (0, 1], got {args.hint_teacher_ema_rate}")
    if args.trace_replay_beta <= 0:
        raise ValueError(f"trace_replay_beta must be > 0, got {args.trace_replay_beta}")
    if args.trace_replay_batch_size < 1:
        raise ValueError(f"trace_replay_batch_size must be >= 1, got {args.trace_replay_batch_size}")
    if "{hint}" not in args.hint_template:
        raise ValueError(f"hint_template must contain '{{hint}}', got {args.hint_template!r}")


def _check_datasets(args, train_dataset, pairs_dataset) -> None:
    if args.trace_replay_weight > 0:
        if pairs_dataset is None:
            raise ValueError("pairs_dataset is required when trace_replay_weight > 0")
        missing = [c for c in PAIR_COLUMNS if c not in pairs_dataset.column_names]
        if missing:
            raise ValueError(
                f"pairs_dataset lacks columns {missing}; add reference log-probs with "
                "composer.trainer.add_reference_logps(pairs, model, tokenizer)"
            )
        if len(pairs_dataset) == 0:
            raise ValueError("pairs_dataset is empty")
    if args.hint_distill_weight > 0 and args.hint_source == "column":
        columns = getattr(train_dataset, "column_names", None) or []
        if args.hint_column not in columns:
            raise ValueError(
                f"hint_column {args.hint_column!r} is not a column of train_dataset (columns: {columns}); "
                "add it or set hint_source='sibling'"
            )


# ---------------------------------------------------------------- pairs: encoding and log-probs


def encode_pairs(tokenizer, rows) -> list[dict]:
    """Token ids of each pair: the chat-templated prompt, and chosen / rejected as assistant turns + eos.

    An optional `tools` column (the JSON of the tool schemas the policy saw) goes to the chat template, so a
    pair's prompt renders with the same tool block as the student's rollout prompts."""
    eos = [tokenizer.eos_token_id]
    encoded = []
    for row in rows:
        tools = row.get("tools")
        prompt = tokenizer.apply_chat_template(row["prompt"], tools=json.loads(tools) if tools else None,
                                               add_generation_prompt=True, tokenize=True)
        prompt = prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt
        encoded.append(
            {
                "prompt": list(prompt),
                "chosen": tokenizer(row["chosen"], add_special_tokens=False)["input_ids"] + eos,
                "rejected": tokenizer(row["rejected"], add_special_tokens=False)["input_ids"] + eos,
            }
        )
    return encoded


def _collate(prompts: list[list[int]], completions: list[list[int]], pad_id: int, device) -> dict:
    """GRPO's layout: prompts padded on the left, completions on the right."""
    prompt = [torch.tensor(p) for p in prompts]
    completion = [torch.tensor(c) for c in completions]
    return {
        "prompt_ids": pad(prompt, pad_id, "left").to(device),
        "prompt_mask": pad([torch.ones_like(p) for p in prompt], 0, "left").to(device),
        "completion_ids": pad(completion, pad_id, "right").to(device),
        "completion_mask": pad([torch.ones_like(c) for c in completion], 0, "right").to(device),
    }


def completion_logits(model, input_ids, attention_mask, logits_to_keep: int, temperature: float = 1.0):
    """Logits predicting the last `logits_to_keep` tokens. Positions come from the mask, so left padding
    does not shift them and a sequence scores the same in any batch. The LM head runs on those positions only
    (a pair's prompt is ~100x its completion in 003's pairs: full logits would be ~100x the memory and head time)."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   logits_to_keep=logits_to_keep + 1).logits
    return logits[:, :-1, :] / temperature


def completion_token_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, fused: bool = False,
                           unmasked_prompt: bool = False):
    """Log-probs (rows x completion length, 0 at padding) of each row's completion tokens after its prompt, in
    GRPO's layout (prompts padded on the left, completions on the right).

    Rows that share a prompt share one encoding of it: each distinct prompt runs once into a KV cache, the cache is
    copied out to its rows, and the completions run on it. A GRPO group's rollouts share their prompt, and so do a
    pair's chosen and rejected; prompts are most of the tokens (003's pairs: ~3,500 against ~30). The cache holds
    all but a prompt's last token, which runs again with the completion, so every completion token is scored in
    one call. `fused`: through the model's fused log-prob head (trl's add_fused_lm_head, at the temperature it was
    added with: the hint teacher's sampling temperature), which never builds the logits; otherwise from logits at
    temperature 1 (the DPO channel's, as its reference log-probs). Where the model keeps no cache (gradient
    checkpointing turns it off), one forward over whole rows. The two agree to float rounding, values and
    gradients (tests/test_trainer.py). `unmasked_prompt`: a single unpadded prompt runs with no attention mask
    (plain causal attention: see unmasked_rows_logps)."""
    unwrapped = getattr(model, "module", model)  # DDP's wrapper holds the model as .module
    # transformers 5.x renamed the flag (the old name warns at every call); the live extra's older pin may lack it
    checkpointing = getattr(unwrapped, "is_activation_checkpointing", None)
    if checkpointing if checkpointing is not None else getattr(unwrapped, "is_gradient_checkpointing", False):
        return _whole_rows_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, fused)
    _, inverse = torch.unique(prompt_ids.masked_fill(prompt_mask == 0, -1), dim=0, return_inverse=True)
    rows = torch.arange(len(inverse), device=inverse.device)
    first = rows.new_full((int(inverse.max()) + 1,), len(inverse)).scatter_reduce(0, inverse, rows, "amin")
    ids, mask = prompt_ids[first], prompt_mask[first]
    columns = mask.bool().any(0)  # padding in every distinct prompt
    ids, mask = ids[:, columns], mask[:, columns]
    full_mask = torch.cat([mask[inverse], completion_mask], dim=1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    tail = torch.cat([ids[inverse, -1:], completion_ids], dim=1)
    cache = None
    if ids.size(1) > 1:
        cache = DynamicCache(config=unwrapped.config)
        plain = unmasked_prompt and len(ids) == 1 and bool(mask.all())
        attend = None if plain else _causal_mask(model, mask[:, :-1], ids.size(1) - 1)
        model(input_ids=ids[:, :-1], attention_mask=attend, position_ids=positions[first, : ids.size(1) - 1],
              past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.batch_select_indices(inverse)
    inputs = dict(input_ids=tail, attention_mask=_causal_mask(model, full_mask, tail.size(1)),
                  position_ids=positions[:, -tail.size(1):], past_key_values=cache)
    if fused:
        # the head scores position t against label t + 1: the first column (the prompt's last token) only predicts
        labels = torch.cat([tail[:, :1], completion_ids.masked_fill(completion_mask == 0, -100)], dim=1)
        return model(**inputs, labels=labels, fused_lm_head=True).log_probs
    logits = model(**inputs, use_cache=cache is not None).logits[:, :-1]
    return selective_log_softmax(logits.float(), completion_ids) * completion_mask


def _causal_mask(model, key_mask, queries: int):
    """`key_mask` (rows x keys, the last `queries` keys the queries themselves) as the model's attention mask: with
    sdpa the 4-D boolean causal mask, built here (transformers' builder dispatches ~35 operators a forward, time when
    the host is what a step waits on), every query seeing itself so that no row is empty; otherwise as it is."""
    if getattr(model, "module", model).config._attn_implementation != "sdpa":
        return key_mask
    offset = key_mask.size(1) - queries
    causal = torch.ones(queries, key_mask.size(1), dtype=torch.bool, device=key_mask.device).tril(offset)
    return (key_mask.bool()[:, None, None, :] & causal) | (causal & ~causal.tril(offset - 1))


def _whole_rows_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, fused: bool):
    """completion_token_logps with every row's prompt encoded in full: one forward over whole rows."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    keep = completion_ids.size(1)
    if fused:
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, labels=labels,
                     fused_lm_head=True).log_probs[:, -keep:]
    logits = completion_logits(model, ids, mask, keep)
    return selective_log_softmax(logits.float(), completion_ids) * completion_mask


def unmasked_rows_logps(model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool):
    """TRL's GRPO forward (its fused head's log-probs, and entropies) one row at a time, each row cut to its real
    tokens at the positions TRL's padded batch gives them (the column index), so that attention runs with no mask;
    (rows x logits_to_keep, 0 where not scored) as TRL returns them, or None where a row's real tokens are not one
    run (never in GRPO's layout: prompts padded on the left, completions on the right). Why: CPU's SDPA has a fused
    kernel for unmasked causal attention only; a padded batch's mask sends it to the math kernel, which builds and
    keeps every row's L x L scores (the report zoo's student, one 4,800-token row, forward and backward, one thread:
    1.8 s unmasked against 4.4 s a row in a padded batch, whose scores also made most of a job's peak memory)."""
    width, first = input_ids.size(1), input_ids.size(1) - logits_to_keep
    logps, entropies = [], []
    for row, mask in zip(input_ids, attention_mask):
        real = mask.nonzero().flatten()
        start, end = int(real[0]), int(real[-1]) + 1
        if end - start != len(real):
            return None
        ids = row[None, start:end]
        labels = ids.masked_fill(torch.arange(start, end, device=ids.device) < first, -100)
        out = model(input_ids=ids, labels=labels, position_ids=torch.arange(start, end, device=ids.device)[None],
                    fused_lm_head=True)
        scored = max(first, start + 1)  # the first column scored (a row's first token has nothing before it)

        def placed(values):  # values[0, j] is column start + j + 1's (the head scores the next token)
            return torch.nn.functional.pad(values[0, scored - start - 1:], (scored - first, width - end))

        logps.append(placed(out.log_probs))
        if compute_entropy:
            entropies.append(placed(out.entropy))
    return torch.stack(logps), torch.stack(entropies) if compute_entropy else None


def unfused_masks(model, device) -> bool:
    """Whether `model`'s attention on `device` has no fused kernel for a mask (an sdpa model on CPU: see
    unmasked_rows_logps), so that a sequence runs faster and in less memory alone and unmasked."""
    return getattr(model, "module", model).config._attn_implementation == "sdpa" and device.type == "cpu"


def masks_cost_more(model, attention_mask) -> bool:
    """Whether a padded batch's forward would take unmasked_rows_logps' way: it has padding, and its model no fused
    kernel for the mask that makes (unfused_masks)."""
    return unfused_masks(model, attention_mask.device) and not bool(attention_mask.all())


def packable(model) -> bool:
    """Whether `model`'s sequences can be packed (pack_rows): its logits are its LM head's output, so its last hidden
    states can be cut to the places scored, and its attention (sdpa) takes pack_rows' 4-D boolean mask."""
    config = getattr(model, "module", model).config
    return config.model_type in PACKED_MODELS and config._attn_implementation == "sdpa"


def segment_widths(grpo_mask, pairs: list[dict]) -> list[int]:
    """The places of each segment pack_rows lays: GRPO's rows' real tokens, then each pair's shared prompt and its
    two branches."""
    return grpo_mask.sum(1).tolist() + [len(p["prompt"]) + len(p["chosen"]) + len(p["rejected"]) + 1 for p in pairs]


def lay_out(widths: list[int]) -> tuple[int, int, list[int]]:
    """First-fit decreasing into rows as wide as the widest segment: (rows, width, each segment's first place)."""
    width, used, starts = max(widths), [], [0] * len(widths)
    for s in sorted(range(len(widths)), key=lambda s: -widths[s]):
        row = next((r for r, filled in enumerate(used) if filled + widths[s] <= width), len(used))
        if row == len(used):
            used.append(0)
        starts[s] = row * width + used[row]
        used[row] += widths[s]
    return len(used), width, starts


def pack_rows(pairs: list[dict], pad_id: int, device, grpo: tuple | None = None) -> dict:
    """One batch for one forward: DPO pairs (`encode_pairs`' token lists) and, given `grpo` = (input_ids,
    attention_mask, logits_to_keep) in GRPO's layout (prompts padded on the left, the last logits_to_keep columns
    scored), GRPO's rows, each as a segment of real tokens.

    A pair is one segment sharing its prompt: the prompt but its last token, then that token and chosen, then that
    token again and rejected, each branch positioned after the prompt and blind to the other (completion_token_logps'
    KV-cache layout, in one row, so one forward with or without a cache). A GRPO row keeps its real tokens at their
    positions in GRPO's layout (the column index, as TRL's forward gives them): it computes what it computes there,
    without its padding. Segments are laid by lay_out; a 4-D boolean mask keeps each causal and to itself.

    Returns the model's inputs (`input_ids`, `position_ids`, `attention_mask`) and what to score: `pair_index` /
    `pair_labels` / `pair_owner` (the flat place of the hidden state predicting each chosen or rejected token, the
    token, and its sequence: 2 i for pair i's chosen, 2 i + 1 its rejected) and, with `grpo`, `grpo_index` /
    `grpo_labels` (the same for GRPO's scored tokens, in the row-major order of `grpo_scored`, rows x logits_to_keep).
    """
    no_rows = torch.zeros(0, 0, dtype=torch.long, device=device)
    input_ids, attention_mask, logits_to_keep = (no_rows, no_rows, 0) if grpo is None else grpo
    kept = attention_mask.bool()
    rows, columns = kept.nonzero(as_tuple=True)  # GRPO's real tokens, row-major
    # a row's first real token has nothing before it in its segment: never scored (TRL's shift drops it too)
    scored = kept & (kept.cumsum(1) > 1)
    scored[:, : input_ids.size(1) - logits_to_keep] = False
    fields, owners = [[], [], [], []], []  # token, position, branch, scored; the sequence of each scored token
    for i, pair in enumerate(pairs):  # token lists: no tensor op per pair
        prompt = pair["prompt"]
        shared = len(prompt) - 1
        for field, values in zip(fields, (prompt[:-1], range(shared), [0] * shared, [0] * shared)):
            field += values
        for branch, completion in enumerate((pair["chosen"], pair["rejected"]), start=1):
            length = 1 + len(completion)
            for field, values in zip(fields, ([prompt[-1], *completion], range(shared, shared + length),
                                              [branch] * length, [0] + [1] * len(completion))):
                field += values
            owners += [2 * i + branch - 1] * len(completion)
    widths = segment_widths(attention_mask, pairs)
    rows_used, width, starts = lay_out(widths)
    long = dict(dtype=torch.long, device=device)
    counts = torch.tensor(widths, **long)
    segment = torch.repeat_interleave(counts)
    # each token's place: its segment's first place, plus its index in the stream (GRPO's rows, then the pairs)
    # less the segment's first index there
    shift = [start - sum(widths[:s]) for s, start in enumerate(starts)]
    dest = torch.tensor(shift, **long)[segment] + torch.arange(segment.numel(), **long)
    grpo_tokens = rows.numel()
    grpo_fields = torch.stack([input_ids[rows, columns], columns, torch.zeros_like(columns),
                               scored[rows, columns].long()])
    token, position, branch, is_scored = torch.cat([grpo_fields, torch.tensor(fields, **long)], dim=1)
    laid = torch.tensor([pad_id, 0, 0, -1], **long)[:, None].repeat(1, rows_used * width)
    laid[:, dest] = torch.stack([token, position, branch, segment])
    tokens, positions, branches, segments = laid.view(4, rows_used, width)
    key_branch = branches[:, None, :]  # padding is a segment of its own (-1): no row of the mask is empty
    mask = ((segments[:, :, None] == segments[:, None, :])
            & torch.ones(width, width, dtype=torch.bool, device=device).tril()
            & ((key_branch == 0) | (key_branch == branches[:, :, None])))
    predictor = dest - 1  # the place of the hidden state that predicts each token
    grpo_scored, pair_scored = is_scored[:grpo_tokens].bool(), is_scored[grpo_tokens:].bool()
    packed = {
        "input_ids": tokens, "position_ids": positions, "attention_mask": mask[:, None],
        "pair_index": predictor[grpo_tokens:][pair_scored], "pair_labels": token[grpo_tokens:][pair_scored],
        "pair_owner": torch.tensor(owners, **long),
    }
    if grpo is not None:
        packed.update(grpo_index=predictor[:grpo_tokens][grpo_scored], grpo_labels=token[:grpo_tokens][grpo_scored],
                      grpo_scored=scored[:, -logits_to_keep:])
    return packed


def packed_logps(model, packed: dict, pairs: int):
    """Run a pack_rows batch: the pairs' (chosen, rejected) sequence log-probs, and the model's output.

    Inside the forward (where sharded weights are gathered), the backbone's last hidden states are cut to the places
    that predict a scored token: the pairs' go through the LM head at temperature 1 (DPO's log-probs, as its
    reference's were taken), and GRPO's rows', if packed, on to the model's fused head at the sampling temperature,
    as TRL's forward scores them (handed only those places, off Triton it scores no prompt or padding one)."""
    unwrapped = getattr(model, "module", model)  # DDP's wrapper holds the model as .module
    causal_lm = unwrapped.get_base_model() if is_peft_model(unwrapped) else unwrapped
    grpo = "grpo_index" in packed
    token_logps = []

    def cut(backbone, args, output):
        hidden = output.last_hidden_state.flatten(0, 1)
        logits = causal_lm.get_output_embeddings()(hidden[packed["pair_index"]]).float()
        token_logps.append(selective_log_softmax(logits[None], packed["pair_labels"][None])[0])
        output.last_hidden_state = (hidden[packed["grpo_index"]] if grpo else hidden[:0])[None]
        return output

    hook = causal_lm.base_model.register_forward_hook(cut)
    try:
        inputs = {k: packed[k] for k in ("input_ids", "attention_mask", "position_ids")}
        out = model(**inputs, shift_labels=packed["grpo_labels"][None], fused_lm_head=True) if grpo else model(**inputs)
    finally:
        hook.remove()
    sequences = token_logps[0].new_zeros(2 * pairs).index_add(0, packed["pair_owner"], token_logps[0])
    return (sequences[0::2], sequences[1::2]), out


def pair_logps(model, encoded: list[dict], pad_id: int, *, unmasked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence log-probs of chosen and rejected under `model`: a pair's two completions on one encoding of its
    prompt, packed in one forward (pack_rows) where the model allows, else on a KV cache of it (rows: chosen 0,
    rejected 0, chosen 1, ...; see completion_token_logps). `unmasked`, where masks are unfused (unfused_masks: CPU):
    one pair at a time on the cache of its prompt, which runs with no mask, each pair checkpointed: its activations
    are not kept for the backward, which runs the pair's forward again, so the backward holds one pair's at a time
    (kept, a step's ten pairs of ~3,500-token prompts made a treatment job's peak memory 1.36x the control's)."""
    device = next(model.parameters()).device
    if unmasked and unfused_masks(model, device):
        def one(e):
            return completion_token_logps(model, **_collate([e["prompt"]] * 2, [e["chosen"], e["rejected"]], pad_id,
                                                            device), unmasked_prompt=True).sum(-1)

        seq = torch.stack([checkpoint(one, e, use_reentrant=False) for e in encoded])
        return seq[:, 0], seq[:, 1]
    if packable(model):
        return packed_logps(model, pack_rows(encoded, pad_id, device), len(encoded))[0]
    prompts = [e["prompt"] for e in encoded for _ in range(2)]
    completions = [c for e in encoded for c in (e["chosen"], e["rejected"])]
    seq = completion_token_logps(model, **_collate(prompts, completions, pad_id, device)).sum(-1)
    return seq[0::2], seq[1::2]


@torch.no_grad()
def add_reference_logps(pairs_dataset, model, tokenizer, batch_size: int = 8):
    """Add `ref_chosen_logps` / `ref_rejected_logps` under `model` (the initial policy), once, before training; on
    CPU a pair at a time, unmasked (pair_logps: a packed batch's mask would take CPU's unfused attention)."""
    was_training = model.training
    model.eval()
    chosen, rejected = [], []
    for start in range(0, len(pairs_dataset), batch_size):
        rows = pairs_dataset.select(range(start, min(start + batch_size, len(pairs_dataset))))
        c, r = pair_logps(model, encode_pairs(tokenizer, rows), tokenizer.pad_token_id, unmasked=True)
        chosen += c.tolist()
        rejected += r.tolist()
    model.train(was_training)
    for name in ("ref_chosen_logps", "ref_rejected_logps"):
        if name in pairs_dataset.column_names:
            pairs_dataset = pairs_dataset.remove_columns(name)
    return pairs_dataset.add_column("ref_chosen_logps", chosen).add_column("ref_rejected_logps", rejected)


# ---------------------------------------------------------------- the trainer


class _EMATeacherCallback(TrainerCallback):
    """teacher <- (1 - rate) * teacher + rate * student after every optimizer step (TRL's sync helper)."""

    def __init__(self, teacher, accelerator, rate):
        self.teacher, self.accelerator, self.rate = teacher, accelerator, rate

    def on_step_end(self, args, state, control, **kwargs):
        student = self.accelerator.unwrap_model(kwargs["model"])
        SyncRefModelCallback.sync_target_model(student, self.teacher, self.rate)


class ComposerTrainer(GRPOTrainer):
    """GRPOTrainer with a hint-distillation channel and a trace-replay DPO channel (see module docstring)."""

    def __init__(self, model, reward_funcs=None, args: ComposerConfig | None = None, train_dataset=None, *,
                 pairs_dataset=None, **kwargs):
        if args is None:
            args = ComposerConfig("composer-run")
        if not isinstance(args, ComposerConfig):
            raise ValueError(f"args must be a ComposerConfig, got {type(args).__name__}")
        check_channels(args)  # again: fields may have been changed after the config was built
        _check_datasets(args, train_dataset, pairs_dataset)
        self._capture_student_logps = False
        self._riders: list[int] = []  # pairs whose rows ride in the student's next GRPO forward
        self._ridden = None  # their (chosen, rejected) sequence log-probs from it
        self._last_rewards = None
        model = os.fspath(model) if isinstance(model, os.PathLike) else model  # TRL takes a str path
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        if args.hint_distill_weight > 0:
            self._hint_teacher = self._make_hint_teacher()
        if args.trace_replay_weight > 0:
            self._encoded_pairs = encode_pairs(self.processing_class, pairs_dataset)
            self._ref_logps = torch.tensor([pairs_dataset["ref_chosen_logps"], pairs_dataset["ref_rejected_logps"]],
                                           dtype=torch.float64)
            generator = torch.Generator().manual_seed(args.seed)
            self._pair_order = torch.randperm(len(pairs_dataset), generator=generator).tolist()
            self._pair_cursor = 0
            self._micro_batch = 0  # this micro-batch's place in the optimizer step's accumulation

    # ---- teacher weights for the hint channel

    def _make_hint_teacher(self):
        """None means 'use the training model itself' (live teacher, or the adapter-disabled PEFT base)."""
        if self.args.hint_teacher == "live" or (self.args.hint_teacher == "frozen" and is_peft_model(self.model)):
            return None
        if self.args.hint_teacher == "frozen" and self.ref_model is not None:
            return self.ref_model  # GRPO already holds the initial policy when beta > 0
        if is_peft_model(self.model):
            raise ValueError("hint_teacher='ema' is not supported with a PEFT model; use 'frozen' or 'live'")
        # Built like TRL's reference model: reloaded from the policy's path (so pass models by path), with the
        # same fused head, prepared for the same distributed setup.
        kwargs = dict(self.args.model_init_kwargs or {})
        kwargs.setdefault("dtype", self.model.dtype)
        teacher = create_model_from_path(get_config_model_id(self.model.config), **kwargs).eval().requires_grad_(False)
        add_fused_lm_head(teacher, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
        if self.is_deepspeed_enabled:
            teacher = prepare_deepspeed(teacher, self.accelerator)
        elif self.is_fsdp_enabled:
            teacher = prepare_fsdp(teacher, self.accelerator)
        else:
            teacher = self.accelerator.prepare_model(teacher, evaluation_mode=True)
        if self.args.hint_teacher == "ema":
            self.add_callback(_EMATeacherCallback(teacher, self.accelerator, self.args.hint_teacher_ema_rate))
        return teacher

    @contextmanager
    def _teacher(self, model):
        if self._hint_teacher is not None:
            yield self._hint_teacher
        elif self.args.hint_teacher == "frozen":  # PEFT: the base model is the initial policy, at no memory cost
            with self.accelerator.unwrap_model(model).disable_adapter():
                yield model
        else:
            yield model

    # ---- hooks into GRPOTrainer

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = rewards_per_func  # gathered over processes; the sibling hint source needs them
        return rewards_per_func

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **kwargs):
        riders, self._riders = [self._encoded_pairs[i] for i in self._riders], []
        if riders and self._ride(model, attention_mask, riders, compute_aux_loss, kwargs):
            out = self._forward_with_pairs(model, input_ids, attention_mask, logits_to_keep, compute_entropy, riders)
        else:
            rows = None
            if (self.args.unmasked_cpu_rows and not compute_aux_loss and all(v is None for v in kwargs.values())
                    and masks_cost_more(model, attention_mask)):
                with self.accelerator.autocast():
                    rows = unmasked_rows_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy)
            out = (*rows, None) if rows else super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **kwargs)
        if self._capture_student_logps:  # the student's own forward inside GRPO's loss: reuse, don't recompute
            self._capture_student_logps = False
            self._student_logps = out[0]
        return out

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.args.hint_distill_weight > 0:
            output.update(self._hint_inputs(inputs, output))
            if self._teacher_logps_per_generation():
                mode = "train" if self.model.training else "eval"
                batch_size = self.args.per_device_train_batch_size if mode == "train" else \
                    self.args.per_device_eval_batch_size
                output["hint_teacher_logps"] = self._hint_teacher_logps(self.model, output, batch_size)
        return output

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        use_hint = self.args.hint_distill_weight > 0
        use_dpo = self.args.trace_replay_weight > 0 and mode == "train"
        self._capture_student_logps = use_hint and self.args.hint_distill_mode == "sampled_token"
        pairs = self._next_pairs() if use_dpo else []
        self._riders, self._ridden = pairs, None  # the pairs' rows join GRPO's forward (_forward_with_pairs)
        loss = super()._compute_loss(model, inputs)
        if not (use_hint or use_dpo):
            return loss
        scale = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        logs = {"grpo_loss": loss.detach() * scale}
        if use_hint:
            hint = self._hint_loss(model, inputs)
            logs["hint_distill_loss"] = hint.detach()
            loss = loss + self.args.hint_distill_weight * hint / scale
        if pairs:
            loss = loss + self.args.trace_replay_weight * self._trace_replay_loss(model, pairs, logs)
        self._log_means(mode, logs)
        return loss

    # ---- the hint channel

    def _teacher_logps_per_generation(self) -> bool:
        """A frozen teacher scores a generation's sampled tokens once, at generation time, and every optimizer
        step on that generation (num_iterations, steps_per_generation) reuses them: they cannot change. An EMA or
        live teacher moves with the student, so it scores each micro-batch in the loss."""
        return self.args.hint_teacher == "frozen" and self.args.hint_distill_mode == "sampled_token"

    def _hint_teacher_logps(self, model, inputs, batch_size=None) -> torch.Tensor:
        """The teacher's log-probs of the sampled completion tokens, in its hinted context. Scored in chunks of
        batch_size rows, as TRL scores its own (they bound the memory peak); the rows of a chunk that share a hinted
        prompt (a GRPO group's) share its encoding, so a chunk of one row (micro-batch 1) shares nothing."""
        keys = ("hint_prompt_ids", "hint_prompt_mask", "completion_ids", "completion_mask")
        rows = inputs["completion_ids"].size(0)
        size = batch_size or rows
        with torch.no_grad(), self._teacher(model) as teacher, self.accelerator.autocast():
            return torch.cat([completion_token_logps(teacher, *(inputs[k][i : i + size] for k in keys), fused=True)
                              for i in range(0, rows, size)])

    def _hint_inputs(self, inputs, output) -> dict:
        """Tokenized teacher contexts (prompt + hint), B-first so GRPO's buffer splits them with the batch."""
        if self.args.hint_source == "column":
            hints = [row.get(self.args.hint_column) for row in inputs]
        else:
            hints = self._sibling_hints(output)
        prompts = [_with_hint(row["prompt"], h, self.args.hint_template) for row, h in zip(inputs, hints)]
        prompt_ids = self._tokenize_prompts(prompts)[0]
        device = self.accelerator.device
        ids = [torch.tensor(p) for p in prompt_ids]
        return {
            "hint_prompt_ids": pad(ids, self._tokenizer.pad_token_id, "left").to(device),
            "hint_prompt_mask": pad([torch.ones_like(i) for i in ids], 0, "left").to(device),
            "hint_mask": torch.tensor([h is not None for h in hints], dtype=torch.float32, device=device),
        }

    def _sibling_hints(self, output) -> list[str | None]:
        """SDPO: the hint for a rollout is a successful sibling's completion from the same group."""
        rewards = (self._last_rewards * self.reward_weights.to(self._last_rewards.device)).nansum(dim=1)
        local = self._tokenizer.batch_decode(
            [ids[m.bool()] for ids, m in zip(output["completion_ids"], output["completion_mask"])],
            skip_special_tokens=True,
        )
        texts = gather_object(local)
        n = len(local)
        start = self.accelerator.process_index * n
        g = self.num_generations if self.model.training else self.num_generations_eval
        hints = []
        for i in range(start, start + n):
            group = range(i - i % g, i - i % g + g)
            good = [j for j in group if j != i and rewards[j] >= self.args.sibling_success_reward]
            hints.append(f"A correct solution:\n{texts[good[0]]}" if good else None)
        return hints

    def _hint_loss(self, model, inputs) -> torch.Tensor:
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        kwargs = {"mode": self.args.hint_distill_mode, "divergence": self.args.hint_distill_divergence}
        if self.args.hint_distill_mode == "sampled_token":
            teacher_logps = inputs.get("hint_teacher_logps")
            if teacher_logps is None:  # EMA or live teacher (see _teacher_logps_per_generation)
                teacher_logps = self._hint_teacher_logps(model, inputs)
            per_token = hint_distill_per_token(
                student_token_logps=self._student_logps, teacher_token_logps=teacher_logps, **kwargs
            )
        else:  # topk / full need logits: the teacher's, and one more student forward, with gradient
            teacher_ids = torch.cat([inputs["hint_prompt_ids"], completion_ids], dim=1)
            teacher_mask = torch.cat([inputs["hint_prompt_mask"], completion_mask], dim=1)
            with torch.no_grad(), self._teacher(model) as teacher:
                teacher_logits = completion_logits(teacher, teacher_ids, teacher_mask, keep, self.temperature)
            student_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
            student_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
            student_logits = completion_logits(model, student_ids, student_mask, keep, self.temperature)
            per_token = hint_distill_per_token(
                student_logits=student_logits, teacher_logits=teacher_logits, topk=self.args.hint_distill_topk,
                add_tail=self.args.hint_distill_add_tail, **kwargs,
            )
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        # Mean over all B rollouts (those without a hint add 0): keeps the term invariant to accumulation.
        return (per_sequence * inputs["hint_mask"]).mean()

    # ---- the trace-replay channel

    def _next_pairs(self) -> list[int]:
        """This micro-batch's share of the optimizer step's trace_replay_batch_size pairs (micro-batch i of n takes
        floor((i+1)size/n) - floor(i size/n): none on some when there are fewer pairs than micro-batches), the next
        ones of a seeded permutation, each process its own slice."""
        size, world = self.args.trace_replay_batch_size, self.accelerator.num_processes
        i, n = self._micro_batch, self.current_gradient_accumulation_steps
        self._micro_batch = (i + 1) % n
        count = (i + 1) * size // n - i * size // n
        start = self._pair_cursor + self.accelerator.process_index * count
        self._pair_cursor += count * world
        return [self._pair_order[(start + k) % len(self._pair_order)] for k in range(count)]

    def _ride(self, model, attention_mask, pairs: list[dict], compute_aux_loss: bool, extra_inputs: dict) -> bool:
        """Whether these pairs join GRPO's forward, one forward and one backward for both (_forward_with_pairs): a
        text batch without an MoE aux loss (pair tokens would enter the router's balance), on a packable model, whose
        rows are padded (so its forward takes a mask anyway: unpadded, it runs causal attention without one, which a
        packed batch would give up), and packed in no more places than GRPO's batch holds plus twice the pairs'
        tokens (the padding a packing adds, at most the pairs' own work again: long rows with no room for a pair
        would pad a whole row for it), unless GRPO's rows run unmasked (unmasked_cpu_rows, where masks_cost_more).
        Otherwise the pairs run packed in a forward of their own (pair_logps)."""
        if (compute_aux_loss or any(v is not None for v in extra_inputs.values()) or not packable(model)
                or (self.args.unmasked_cpu_rows and masks_cost_more(model, attention_mask))):
            return False
        widths = segment_widths(attention_mask, pairs)
        grpo, pair_tokens = widths[: attention_mask.size(0)], sum(widths[attention_mask.size(0):])
        rows, width, _ = lay_out(widths)
        return min(grpo) < attention_mask.size(1) and rows * width <= attention_mask.numel() + 2 * pair_tokens

    def _forward_with_pairs(self, model, input_ids, attention_mask, logits_to_keep, compute_entropy, pairs):
        """GRPO's forward with these pairs packed in (pack_rows, packed_logps): returns GRPO's (log-probs,
        entropies, None), as TRL's forward would, and keeps the pairs' sequence log-probs for _trace_replay_loss."""
        packed = pack_rows(pairs, self._tokenizer.pad_token_id, input_ids.device,
                           grpo=(input_ids, attention_mask, logits_to_keep))
        with self.accelerator.autocast():
            self._ridden, out = packed_logps(model, packed, len(pairs))

        def per_token(values):  # back to GRPO's (rows x completion) layout, 0 where not scored
            return values.new_zeros(packed["grpo_scored"].shape).masked_scatter(packed["grpo_scored"], values[0])

        return per_token(out.log_probs), per_token(out.entropy) if compute_entropy else None, None

    def _trace_replay_loss(self, model, index: list[int], logs: dict) -> torch.Tensor:
        """The DPO loss of these pairs as their share of the step's mean over its trace_replay_batch_size pairs:
        summed over the step's micro-batches, the mean a single batch of them would give. Its figures go to `logs`."""
        policy_chosen, policy_rejected = self._ridden or pair_logps(model, [self._encoded_pairs[i] for i in index],
                                                                    self._tokenizer.pad_token_id,
                                                                    unmasked=self.args.unmasked_cpu_rows)
        ref_chosen, ref_rejected = self._ref_logps[:, index].to(policy_chosen.device, policy_chosen.dtype)
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=self.args.trace_replay_beta
        )
        if self.args.trace_replay_nll_weight:
            tokens = [len(self._encoded_pairs[i]["chosen"]) for i in index]
            nll = -policy_chosen / torch.tensor(tokens, device=policy_chosen.device, dtype=policy_chosen.dtype)
            losses = losses + self.args.trace_replay_nll_weight * nll
            logs["trace_replay/chosen_nll"] = nll.detach().mean()
        logs["trace_replay_loss"] = losses.detach().mean()
        logs["trace_replay/reward_accuracy"] = (chosen_rewards > rejected_rewards).float().mean()
        logs["trace_replay/margin"] = (chosen_rewards - rejected_rewards).mean()
        return losses.sum() / self.args.trace_replay_batch_size

    def _log_means(self, mode, logs: dict):
        """Each figure's mean over processes into the trainer's metrics: one gather and one copy to the host for all
        (each .item() would wait for the device)."""
        means = self.accelerator.gather(torch.stack(list(logs.values()))[None]).mean(0).tolist()
        for name, value in zip(logs, means):
            self._metrics[mode][name].append(value)


def _with_hint(prompt, hint: str | None, template: str):
    """The teacher's context: the prompt with the hint appended to its last user message."""
    if hint is None:
        return prompt
    text = template.format(hint=hint)
    if isinstance(prompt, str):
        return prompt + text
    messages = [dict(m) for m in prompt]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[last_user]["content"] = messages[last_user]["content"] + text
    return messages
