"""Tests for composer.losses against naive float64 oracles written out below (loops over positions, explicit sums
over probabilities), with TRL's loss_utils as a second oracle."""

import math

import pytest
import torch
from trl.import_utils import suppress_experimental_warning

from composer.losses import dpo_loss, hint_distill_per_token, masked_mean, sequence_logps

with suppress_experimental_warning():
    from trl.experimental.sdpo import loss_utils as trl_loss_utils

ATOL = 1e-10
DIVERGENCES = [0.0, 0.3, 0.5, 1.0]
B, T, V = 2, 3, 7


# ---------------------------------------------------------------- naive oracles (pure Python floats)


def naive_softmax(row):
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


def naive_kl(p, q):
    # KL(p || q) = sum_i p_i log(p_i / q_i), with 0 log 0 = 0.
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)


def naive_divergence(student, teacher, beta):
    if beta == 0.0:
        return naive_kl(teacher, student)
    if beta == 1.0:
        return naive_kl(student, teacher)
    mix = [beta * t + (1 - beta) * s for s, t in zip(student, teacher)]
    return beta * naive_kl(teacher, mix) + (1 - beta) * naive_kl(student, mix)


def naive_support(student_row, teacher_row, topk, add_tail):
    """Student and teacher probabilities on the student's top-k tokens, with a tail bucket or renormalized."""
    ps, pt = naive_softmax(student_row), naive_softmax(teacher_row)
    if topk is None:
        return ps, pt
    top = sorted(range(len(student_row)), key=lambda i: -student_row[i])[:topk]
    ps, pt = [ps[i] for i in top], [pt[i] for i in top]
    if add_tail:
        return ps + [1 - sum(ps)], pt + [1 - sum(pt)]
    return [p / sum(ps) for p in ps], [p / sum(pt) for p in pt]


def naive_logit_loss(student_logits, teacher_logits, beta, topk=None, add_tail=True):
    out = torch.zeros(student_logits.shape[:2], dtype=torch.float64)
    for b in range(student_logits.shape[0]):
        for t in range(student_logits.shape[1]):
            ps, pt = naive_support(student_logits[b, t].tolist(), teacher_logits[b, t].tolist(), topk, add_tail)
            out[b, t] = naive_divergence(ps, pt, beta)
    return out


def naive_dpo(pc, pr, rc, rr, beta):
    losses, chosen, rejected = [], [], []
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        z = beta * ((a - c) - (b - d))
        losses.append(math.log(1 + math.exp(-z)))  # -log sigmoid(z)
        chosen.append(beta * (a - c))
        rejected.append(beta * (b - d))
    return [torch.tensor(x, dtype=torch.float64) for x in (losses, chosen, rejected)]


# ---------------------------------------------------------------- fixtures


def make_logits(seed, shape=(B, T, V), requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    return (2 * torch.randn(shape, generator=gen, dtype=torch.float64)).requires_grad_(requires_grad)


def make_token_logps(seed, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    logps = -torch.rand((B, T), generator=gen, dtype=torch.float64) * 3
    return logps.requires_grad_(requires_grad)


def make_pair_logps(seed, requires_grad=False):
    """(P,) sequence log-probs for DPO, P = 4."""
    gen = torch.Generator().manual_seed(seed)
    return (-torch.rand(4, generator=gen, dtype=torch.float64) * 20).requires_grad_(requires_grad)


def logit_loss(mode, student, teacher, divergence, topk=None, add_tail=True):
    kwargs = {"topk": topk, "add_tail": add_tail} if mode == "topk" else {}
    return hint_distill_per_token(
        mode=mode, divergence=divergence, student_logits=student, teacher_logits=teacher, **kwargs
    )


LOGIT_CASES = [("full", None, True), ("topk", 3, True), ("topk", 3, False), ("topk", 1, True)]


# ---------------------------------------------------------------- topk / full values


@pytest.mark.parametrize("mode,topk,add_tail", LOGIT_CASES)
@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_logit_modes_match_naive_and_trl(mode, topk, add_tail, divergence):
    student, teacher = make_logits(0), make_logits(1)
    got = logit_loss(mode, student, teacher, divergence, topk, add_tail)
    assert got.shape == (B, T)
    torch.testing.assert_close(got, naive_logit_loss(student, teacher, divergence, topk, add_tail), atol=ATOL, rtol=0)
    if mode == "full":
        trl = trl_loss_utils.compute_full_logit_self_distillation_loss(
            student, teacher, distillation_alpha=divergence
        )
    else:
        trl = trl_loss_utils.compute_topk_self_distillation_loss(
            student, teacher, distillation_topk=topk, distillation_alpha=divergence, distillation_add_tail=add_tail
        )
    torch.testing.assert_close(got, trl, atol=ATOL, rtol=0)


def test_divergence_knob_meaning_on_hand_computed_two_token_example():
    # One position, vocabulary of 2: student p = (0.8, 0.2), teacher q = (0.5, 0.5).
    student = torch.log(torch.tensor([[[0.8, 0.2]]], dtype=torch.float64))
    teacher = torch.log(torch.tensor([[[0.5, 0.5]]], dtype=torch.float64))
    forward_kl = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)  # KL(teacher || student) = log 1.25
    reverse_kl = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)  # KL(student || teacher)
    # beta = 0.5: m = (0.65, 0.35), plain Jensen-Shannon.
    jsd = 0.5 * (0.5 * math.log(0.5 / 0.65) + 0.5 * math.log(0.5 / 0.35)) + 0.5 * (
        0.8 * math.log(0.8 / 0.65) + 0.2 * math.log(0.2 / 0.35)
    )
    assert abs(forward_kl - reverse_kl) > 0.03  # the example tells the two directions apart
    for divergence, expected in [(0.0, forward_kl), (1.0, reverse_kl), (0.5, jsd)]:
        got = logit_loss("full", student, teacher, divergence)
        assert abs(got.item() - expected) < ATOL, divergence


@pytest.mark.parametrize("add_tail", [True, False])
@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_topk_over_whole_vocabulary_equals_full(add_tail, divergence):
    student, teacher = make_logits(2), make_logits(3)
    full = logit_loss("full", student, teacher, divergence)
    torch.testing.assert_close(logit_loss("topk", student, teacher, divergence, V, add_tail), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_topk_tail_stays_exact_when_the_student_tail_is_tiny(divergence):
    # The student puts all but ~1e-9 of its mass on token 0; the teacher is uniform. On this input top-1 plus a
    # tail bucket is the full divergence (both spread the tail evenly over tokens 1-3), gradient included. TRL's
    # add_tail_bucket clamps log P_top at -1e-7 and gave 11.53 for forward KL's 13.61, with ~0 gradient.
    student = torch.tensor([[[20.0, 0.0, 0.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    teacher = torch.zeros(1, 1, 4, dtype=torch.float64)
    got = logit_loss("topk", student, teacher, divergence, 1, True)
    full = logit_loss("full", student.detach().requires_grad_(), teacher, divergence)
    torch.testing.assert_close(got, full, atol=1e-9, rtol=0)
    if divergence == 0.0:
        assert got.item() == pytest.approx(13.6137, abs=1e-4)
        got.sum().backward()
        assert student.grad[0, 0, 0].item() == pytest.approx(0.75, abs=1e-6)  # softmax(s) - teacher at token 0


# ---------------------------------------------------------------- sampled_token


def test_sampled_token_value_is_reverse_kl_estimate():
    student, teacher = make_token_logps(4), make_token_logps(5)
    got = hint_distill_per_token(mode="sampled_token", student_token_logps=student, teacher_token_logps=teacher)
    for b in range(B):
        for t in range(T):
            assert abs(got[b, t].item() - (student[b, t].item() - teacher[b, t].item())) < ATOL


def test_sampled_token_gradient_is_score_function_estimator():
    # torch.autograd.gradcheck does not apply: the stop-gradient makes the analytic gradient (s - t) * ds differ on
    # purpose from the finite-difference derivative of the value s - t (which is ds). So check the analytic gradient
    # against the hand-derived one: d/ds_bt sum(w * loss) = w_bt * (s_bt - t_bt); nothing reaches the teacher.
    student, teacher = make_token_logps(6, requires_grad=True), make_token_logps(7, requires_grad=True)
    weights = make_token_logps(8)
    loss = hint_distill_per_token(mode="sampled_token", student_token_logps=student, teacher_token_logps=teacher)
    (weights * loss).sum().backward()
    for b in range(B):
        for t in range(T):
            expected = weights[b, t].item() * (student[b, t].item() - teacher[b, t].item())
            assert abs(student.grad[b, t].item() - expected) < ATOL
    assert teacher.grad is None


def test_sampled_token_gradient_matches_trl_through_logits():
    student_logits, teacher_logits = make_logits(9, requires_grad=True), make_logits(10)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(11))
    weights = make_token_logps(12)

    def token_logps(logits):
        return torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)

    ours = hint_distill_per_token(
        mode="sampled_token",
        student_token_logps=token_logps(student_logits),
        teacher_token_logps=token_logps(teacher_logits),
    )
    (grad_ours,) = torch.autograd.grad((weights * ours).sum(), student_logits)
    trl = trl_loss_utils.compute_sampled_token_self_distillation_loss(
        student_logits, teacher_logits, ids, distillation_alpha=1.0
    )
    (grad_trl,) = torch.autograd.grad((weights * trl).sum(), student_logits)
    torch.testing.assert_close(grad_ours, grad_trl, atol=ATOL, rtol=0)


# ---------------------------------------------------------------- differentiability


@pytest.mark.parametrize("mode,topk,add_tail", LOGIT_CASES)
@pytest.mark.parametrize("divergence", [0.0, 0.3, 1.0])
def test_logit_modes_gradcheck(mode, topk, add_tail, divergence):
    student, teacher = make_logits(13, (1, 2, 5), requires_grad=True), make_logits(14, (1, 2, 5))
    assert torch.autograd.gradcheck(lambda s: logit_loss(mode, s, teacher, divergence, topk, add_tail), (student,))


def test_dpo_gradcheck():
    pc, pr = make_pair_logps(15, requires_grad=True), make_pair_logps(16, requires_grad=True)
    rc, rr = make_pair_logps(17), make_pair_logps(18)
    assert torch.autograd.gradcheck(lambda a, b: dpo_loss(a, b, rc, rr, beta=0.7)[0], (pc, pr))


@pytest.mark.parametrize("mode,topk,add_tail", LOGIT_CASES)
def test_no_gradient_reaches_teacher_logits(mode, topk, add_tail):
    student, teacher = make_logits(19, requires_grad=True), make_logits(20, requires_grad=True)
    logit_loss(mode, student, teacher, 0.5, topk, add_tail).sum().backward()
    assert teacher.grad is None
    assert student.grad is not None


# ---------------------------------------------------------------- masking and reductions


def test_masked_mean_and_sequence_logps_match_naive():
    values = make_token_logps(21)
    mask = torch.tensor([[1, 1, 0], [0, 1, 0]])
    kept = [values[b, t].item() for b in range(B) for t in range(T) if mask[b, t]]
    assert abs(masked_mean(values, mask).item() - sum(kept) / len(kept)) < ATOL
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0  # empty mask: no division by zero
    for b in range(B):
        expected = sum(values[b, t].item() for t in range(T) if mask[b, t])
        assert abs(sequence_logps(values, mask)[b].item() - expected) < ATOL


MASK = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize("mode,topk,add_tail", LOGIT_CASES)
def test_masked_positions_contribute_nothing_logit_modes(mode, topk, add_tail):
    teacher = make_logits(22)

    def reduced_loss(student):
        return masked_mean(logit_loss(mode, student, teacher, 0.3, topk, add_tail), MASK)

    student = make_logits(23, requires_grad=True)
    loss = reduced_loss(student)
    loss.backward()
    assert (student.grad[~MASK] == 0).all()
    assert (student.grad[MASK] != 0).any()
    perturbed = torch.where(MASK.unsqueeze(-1), student.detach(), make_logits(24))
    assert reduced_loss(perturbed).item() == loss.item()


def test_masked_positions_contribute_nothing_sampled_token():
    teacher = make_token_logps(25)

    def reduced_loss(student):
        per_token = hint_distill_per_token(
            mode="sampled_token", student_token_logps=student, teacher_token_logps=teacher
        )
        return masked_mean(per_token, MASK)

    student = make_token_logps(26, requires_grad=True)
    loss = reduced_loss(student)
    loss.backward()
    assert (student.grad[~MASK] == 0).all()
    perturbed = torch.where(MASK, student.detach(), make_token_logps(27))
    assert reduced_loss(perturbed).item() == loss.item()


# ---------------------------------------------------------------- DPO


def test_dpo_hand_computed_example():
    pc, pr, rc, rr = (torch.tensor([x], dtype=torch.float64) for x in (-1.0, -2.0, -1.5, -1.5))
    losses, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta=0.1)
    # -log sigmoid(0.1 * ((-1 + 1.5) - (-2 + 1.5))) = -log sigmoid(0.1) = log(1 + e^-0.1)
    assert abs(losses.item() - math.log(1 + math.exp(-0.1))) < ATOL
    assert abs(chosen.item() - 0.05) < ATOL
    assert abs(rejected.item() + 0.05) < ATOL


def test_dpo_matches_naive_and_gradient_signs():
    pc, pr = make_pair_logps(28, requires_grad=True), make_pair_logps(29, requires_grad=True)
    rc, rr = make_pair_logps(30, requires_grad=True), make_pair_logps(31, requires_grad=True)
    got = dpo_loss(pc, pr, rc, rr, beta=0.3)
    for g, expected in zip(got, naive_dpo(pc, pr, rc, rr, 0.3)):
        torch.testing.assert_close(g, expected, atol=ATOL, rtol=0)
    assert not got[1].requires_grad and not got[2].requires_grad
    got[0].sum().backward()
    assert (pc.grad < 0).all()  # descending the loss raises the chosen log-prob...
    assert (pr.grad > 0).all()  # ...and lowers the rejected one
    assert rc.grad is None and rr.grad is None  # the reference is a constant


# ---------------------------------------------------------------- bad inputs


def _logits_kwargs(**overrides):
    kwargs = {"mode": "topk", "topk": 3, "student_logits": make_logits(32), "teacher_logits": make_logits(33)}
    return {**kwargs, **overrides}


BAD_HINT_DISTILL_ARGS = [
    ("mode", _logits_kwargs(mode="bogus")),
    ("divergence", _logits_kwargs(divergence=-0.1)),
    ("divergence", _logits_kwargs(divergence=1.5)),
    ("divergence", _logits_kwargs(divergence=float("nan"))),
    (
        "divergence",
        {
            "mode": "sampled_token",
            "divergence": 0.5,
            "student_token_logps": make_token_logps(34),
            "teacher_token_logps": make_token_logps(35),
        },
    ),
    ("teacher_token_logps", {"mode": "sampled_token", "student_token_logps": make_token_logps(36)}),
    ("student_logits", _logits_kwargs(mode="full", topk=None, student_logits=None)),
    (
        "student_logits",
        {
            "mode": "sampled_token",
            "student_token_logps": make_token_logps(43),
            "teacher_token_logps": make_token_logps(44),
            "student_logits": make_logits(45),
        },
    ),
    ("teacher_logits", _logits_kwargs(teacher_logits=make_logits(37, (B, T, V + 1)))),
    (
        "teacher_token_logps",
        {
            "mode": "sampled_token",
            "student_token_logps": make_token_logps(38),
            "teacher_token_logps": make_token_logps(39)[:, :2],
        },
    ),
    ("student_logits", _logits_kwargs(student_logits=make_token_logps(40), teacher_logits=make_token_logps(41))),
    ("topk", _logits_kwargs(topk=None)),
    ("topk", _logits_kwargs(topk=0)),
    ("topk", _logits_kwargs(topk=V + 1)),
    ("topk", _logits_kwargs(mode="full")),
]


@pytest.mark.parametrize("name,kwargs", BAD_HINT_DISTILL_ARGS)
def test_hint_distill_bad_inputs_name_the_argument(name, kwargs):
    with pytest.raises(ValueError, match=rf"^{name}\b"):  # the message opens with the argument's name
        hint_distill_per_token(**kwargs)


def test_reductions_and_dpo_bad_inputs_name_the_argument():
    values = make_token_logps(42)
    with pytest.raises(ValueError, match=r"^mask\b"):
        masked_mean(values, torch.ones(B, T + 1))
    with pytest.raises(ValueError, match=r"^mask\b"):
        sequence_logps(values, torch.ones(B))
    pairs = [values[0]] * 4
    for beta in (0.0, -0.1):
        with pytest.raises(ValueError, match=r"^beta\b"):
            dpo_loss(*pairs, beta=beta)
    with pytest.raises(ValueError, match=r"^ref_rejected_logps\b"):
        dpo_loss(*pairs[:3], values[0, :2])
