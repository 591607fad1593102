"""per_token = hint_distill_per_token(mode="topk", topk=20, student_logits=s_logits, teacher_logits=t_logits)
loss = grpo_loss + lam * masked_mean(per_token, completion_mask)
pair_losses, chosen_rewards, rejected_rewards = dpo_loss(pc, pr, rc, rr, beta=0.1)

Loss functions for the two channels trained alongside GRPO, as pure functions on tensors.

Hint distillation (SDPO / OPSD): the teacher is the same model with a hint in its context, run without
gradient; the student is pulled towards it, token by token, on the student's own sampled completion.
The `divergence` knob beta in [0, 1] picks the direction:

    beta = 0        forward KL(teacher || student)   (mass-covering)
    beta = 1        reverse KL(student || teacher)   (mode-seeking; the only one defined for "sampled_token")
    0 < beta < 1    generalized JSD: beta * KL(teacher || m) + (1 - beta) * KL(student || m),
                    m = beta * teacher + (1 - beta) * student

TRL's `distillation_alpha` has exactly this meaning (alpha=0 computes KL(teacher || student)), so beta is
passed through unchanged. The interior JSD vanishes at both ends (about beta * KL(teacher || student) as
beta -> 0), so its scale is not continuous with the endpoint KLs; compare loss weights only within one beta.

DPO: the sigmoid loss on sequence log-probs, with reference log-probs supplied by the caller.
"""

import torch
import torch.nn.functional as F
from trl.import_utils import suppress_experimental_warning

# trl.experimental warns on import that its API may change; the exact trl pin in pyproject covers that.
with suppress_experimental_warning():
    from trl.experimental.sdpo.loss_utils import (
        compute_divergence,
        compute_full_logit_self_distillation_loss,
        compute_topk_self_distillation_loss,
    )

# The tensors each mode reads, with the rank each must have: (B, T) log-probs or (B, T, V) logits.
_MODE_INPUTS = {
    "sampled_token": {"student_token_logps": 2, "teacher_token_logps": 2},
    "topk": {"student_logits": 3, "teacher_logits": 3},
    "full": {"student_logits": 3, "teacher_logits": 3},
}


def hint_distill_per_token(
    *,
    mode: str,
    divergence: float = 1.0,
    student_token_logps: torch.Tensor | None = None,
    teacher_token_logps: torch.Tensor | None = None,
    student_logits: torch.Tensor | None = None,
    teacher_logits: torch.Tensor | None = None,
    topk: int | None = None,
    add_tail: bool = True,
) -> torch.Tensor:
    """Per-token (B, T) hint-distillation loss; reduce it with `masked_mean`.

    mode="sampled_token": `*_token_logps` (B, T) are log-probs of the sampled tokens; O(1) memory per token.
        The value is the single-sample reverse-KL estimate `s - t`; the gradient is `(s - t) * grad(s)`, the
        score-function estimator of grad KL(student || teacher). Valid for on-policy samples only.
    mode="topk": `*_logits` (B, T, V); divergence on the student's `topk` most likely tokens, the teacher
        projected onto the same indices, plus one bucket for the leftover mass if `add_tail`, else both
        renormalized over the top-k.
    mode="full": `*_logits` (B, T, V); divergence over the full vocabulary.

    Teacher tensors are constants: they are detached here, so no gradient reaches the teacher.
    """
    tensors = {
        "student_token_logps": student_token_logps,
        "teacher_token_logps": teacher_token_logps,
        "student_logits": student_logits,
        "teacher_logits": teacher_logits,
    }
    _check_hint_distill_args(mode, divergence, tensors, topk)
    if mode == "sampled_token":
        return _sampled_token_reverse_kl(student_token_logps, teacher_token_logps.detach())
    if mode == "topk" and add_tail:
        return _topk_with_tail(student_logits, teacher_logits.detach(), topk, float(divergence))
    if mode == "topk":
        return compute_topk_self_distillation_loss(
            student_logits,
            teacher_logits.detach(),
            distillation_topk=topk,
            distillation_alpha=float(divergence),
            distillation_add_tail=add_tail,
        )
    return compute_full_logit_self_distillation_loss(
        student_logits, teacher_logits.detach(), distillation_alpha=float(divergence)
    )


def _topk_with_tail(student_logits: torch.Tensor, teacher_logits: torch.Tensor, topk: int,
                    divergence: float) -> torch.Tensor:
    """TRL's top-k support with a tail bucket, the bucket's log-mass read as the logsumexp of the logits left out.
    TRL's `add_tail_bucket` takes log(1 - P_topk) with log P_topk clamped at -1e-7: once the student's tail mass is
    under ~1e-7 its value is wrong and its gradient ~0 (a case found in 004: student [20, 0, 0, 0], teacher uniform, top-1,
    forward KL gave 11.53 for 13.61)."""
    if topk == student_logits.shape[-1]:  # no tail: the full-vocabulary divergence
        return compute_full_logit_self_distillation_loss(student_logits, teacher_logits, distillation_alpha=divergence)
    top, index = torch.topk(student_logits, k=topk, dim=-1)

    def with_tail(logits: torch.Tensor, picked: torch.Tensor) -> torch.Tensor:
        tail = torch.logsumexp(logits.scatter(-1, index, float("-inf")), dim=-1, keepdim=True)
        return torch.cat([picked, tail], dim=-1) - torch.logsumexp(logits, dim=-1, keepdim=True)

    student, teacher = with_tail(student_logits, top), with_tail(teacher_logits, teacher_logits.gather(-1, index))
    return compute_divergence(student, teacher, divergence)


def _sampled_token_reverse_kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    # grad KL(s || t) = E_s[(log s - log t) grad log s] + E_s[grad log s], and the second term is zero in
    # expectation. Differentiating `s - t` directly would give only that zero-mean term, so the log-ratio is a
    # stop-gradient weight on grad(s). The `s - s.detach()` term is zero in value, so the returned value stays
    # the reverse-KL estimate and the logged loss means something.
    log_ratio = (student - teacher).detach()
    return log_ratio + log_ratio * (student - student.detach())


def _check_hint_distill_args(mode, divergence, tensors, topk) -> None:
    if mode not in _MODE_INPUTS:
        raise ValueError(f"mode must be one of {sorted(_MODE_INPUTS)}, got {mode!r}")
    if not 0.0 <= divergence <= 1.0:  # also rejects NaN
        raise ValueError(f"divergence must be in [0, 1] (0 forward KL, 1 reverse KL), got {divergence}")
    if mode == "sampled_token" and divergence != 1.0:
        raise ValueError(
            f"divergence must be 1.0 for mode='sampled_token', got {divergence}: with only the sampled token's "
            "log-probs, reverse KL is an expectation under the student's own samples and has a score-function "
            "estimator; forward KL and JSD need the probabilities of tokens that were not sampled. "
            "Use mode='topk' or mode='full' for divergence < 1."
        )
    ranks = _MODE_INPUTS[mode]
    for name, tensor in tensors.items():
        if name in ranks and tensor is None:
            raise ValueError(f"{name} is required for mode={mode!r}")
        if name not in ranks and tensor is not None:
            raise ValueError(f"{name} is not used by mode={mode!r}, which reads {sorted(ranks)}")
    student_name, teacher_name = ranks
    student, teacher = tensors[student_name], tensors[teacher_name]
    if student.dim() != ranks[student_name]:
        raise ValueError(f"{student_name} must have {ranks[student_name]} dims, got shape {tuple(student.shape)}")
    _check_same_shape(teacher_name, teacher, student_name, student)
    if mode == "topk":
        vocab = student.shape[-1]
        if not isinstance(topk, int) or not 1 <= topk <= vocab:
            raise ValueError(f"topk must be an int in [1, V={vocab}] for mode='topk', got {topk!r}")
    elif topk is not None:
        raise ValueError(f"topk is only used by mode='topk', got topk={topk!r} with mode={mode!r}")


def _check_same_shape(name: str, tensor: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if tensor.shape != ref.shape:
        raise ValueError(f"{name} shape {tuple(tensor.shape)} != {ref_name} shape {tuple(ref.shape)}")


def masked_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `per_token` over positions where `mask` is nonzero; 0 when the mask is empty."""
    _check_same_shape("mask", mask, "per_token", per_token)
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


def sequence_logps(token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) log-prob of each sequence: the sum of its masked (B, T) token log-probs."""
    _check_same_shape("mask", mask, "token_logps", token_logps)
    return (token_logps * mask.to(token_logps.dtype)).sum(-1)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sigmoid DPO on (P,) sequence log-probs: per-pair losses, chosen rewards, rejected rewards.

    loss = -logsigmoid(beta * ((pc - rc) - (pr - rr))); reward = beta * (policy - ref), detached for logging.
    The reference log-probs are constants and are detached.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    for name, tensor in (
        ("policy_rejected_logps", policy_rejected_logps),
        ("ref_chosen_logps", ref_chosen_logps),
        ("ref_rejected_logps", ref_rejected_logps),
    ):
        _check_same_shape(name, tensor, "policy_chosen_logps", policy_chosen_logps)
    chosen_logratios = policy_chosen_logps - ref_chosen_logps.detach()
    rejected_logratios = policy_rejected_logps - ref_rejected_logps.detach()
    losses = -F.logsigmoid(beta * (chosen_logratios - rejected_logratios))
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()
