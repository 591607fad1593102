"""composer.generation: the batched generator behind the server (a prompt shared by n samples prefilled once),
against Hugging Face's generate.

    .venv/bin/pytest tests/test_generation.py
"""

import threading
import types

import numpy as np
import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from composer.models import load_model
from composer.generation import SHARED_PROMPT, Generator, Job, _prefilled, _shared_prompt_attention, _SharedPromptLayer


def generated(model, jobs: list[dict], plain: bool) -> tuple[list, list]:
    """(events of each job, the input shapes of every forward) of Jobs run by one Generator (in one batch where
    their sampling settings allow it: they are queued before the worker can take the first)."""
    events, shapes, done = [[] for _ in jobs], [], threading.Event()

    def emitter(i):
        def emit(batch):
            events[i].extend(batch)
            if all(sum(e[0] == "end" for e in ev) == job["n"] for ev, job in zip(events, jobs)):
                done.set()
        return emit

    hook = model.register_forward_pre_hook(lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    generator = Generator({"m": model}, seed=0, plain=plain)
    try:
        with generator._cond:  # hold the worker until every job is queued
            for i, job in enumerate(jobs):
                generator._queue.append(Job(model="m", emit=emitter(i), **job))
            generator._cond.notify()
        assert done.wait(120)
    finally:
        generator.close()
        hook.remove()
    return events, shapes


@pytest.mark.parametrize("temperature, seed", [(1.0, 7), (0.0, None)])
def test_n_samples_of_one_prompt_prefill_it_once_and_sample_the_same(tiny, tokenizer, temperature, seed):
    """003 asks for n=8 samples of ~3,500-token states: the prompt is encoded once (one forward of all but its last
    token, then one row per sample), and every token and log-prob is what the unshared batch gives."""
    model = load_model(tiny).eval()
    prompt = tokenizer("the tests fail on the edge case; " * 40)["input_ids"]
    job = dict(prompt=prompt, n=4, max_tokens=12, temperature=temperature, top_p=1.0, seed=seed, top_logprobs=2)
    (shared,), shared_shapes = generated(model, [job], plain=False)
    (plain,), plain_shapes = generated(load_model(tiny).eval(), [job], plain=True)  # HF's own attention too
    assert shared_shapes[:2] == [(1, len(prompt) - 1), (4, 1)] and plain_shapes[0] == (4, len(prompt))
    assert_same_generation(shared, plain)
    assert len(shared) > 4 * 2


def assert_same_generation(events: list, expected: list) -> None:
    assert [e[:3] for e in events] == [e[:3] for e in expected]
    logprobs = [(e[3], [v for _, v in e[4]]) for e in events if e[0] == "token"]
    wanted = [(e[3], [v for _, v in e[4]]) for e in expected if e[0] == "token"]
    assert np.allclose([x for lp, top in logprobs for x in (lp, *top)],
                       [x for lp, top in wanted for x in (lp, *top)], atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompts_of_different_lengths_in_one_batch_generate_as_hf_does(tiny, tokenizer, temperature):
    """Unseeded jobs batch together, left-padded, each prompt prefilled in the batch: the reserved cache outgrows its
    first room (twice the prompt) and is moved once, and every token and log-prob is HF generate's plain one (sampled:
    from the batch's seed, the server's first draw in both)."""
    model = load_model(tiny).eval()
    jobs = [dict(prompt=tokenizer(text)["input_ids"], n=2, max_tokens=40, temperature=temperature, top_p=1.0, seed=None,
                 top_logprobs=1) for text in ("def f(x):", "the tests fail on the edge case; " * 2)]
    served, shapes = generated(model, jobs, plain=False)
    plain, _ = generated(load_model(tiny).eval(), jobs, plain=True)
    width = max(len(job["prompt"]) for job in jobs)
    assert shapes[0] == (4, width)  # one batch
    for events, expected in zip(served, plain):
        assert_same_generation(events, expected)
    assert len(shapes) - 1 > width  # decoding went past the first room (twice the prompt)


def test_rows_of_one_prompt_hold_it_once_and_attend_as_sdpa_over_the_repeated_cache(tiny, tokenizer):
    """The workers give Qwen3 models the shared-prompt attention: a prefilled prompt stays batch 1 for its n rows,
    and attention over it plus each row's own tokens is SDPA's over the prompt repeated per row (grouped-query heads,
    a mask with holes)."""
    model = load_model(tiny).eval()
    Generator({"m": model}, seed=0).close()
    assert model.config._attn_implementation == SHARED_PROMPT
    prompt = tokenizer("the tests fail on the edge case; " * 4)["input_ids"]
    with torch.inference_mode():
        cache = _prefilled(model, prompt, rows=3)
    assert all(isinstance(layer, _SharedPromptLayer) for layer in cache.layers)
    assert cache.layers[0].prompt[0].shape[0] == 1 and cache.get_seq_length() == len(prompt) - 1

    torch.manual_seed(0)
    rows, heads, kv_heads, dim, n, own = 3, 4, 2, 8, 11, 5
    layer = _SharedPromptLayer(torch.randn(1, kv_heads, n, dim), torch.randn(1, kv_heads, n, dim))
    layer.update(torch.randn(rows, kv_heads, own - 1, dim), torch.randn(rows, kv_heads, own - 1, dim))
    keys, values = layer.update(torch.randn(rows, kv_heads, 1, dim), torch.randn(rows, kv_heads, 1, dim))
    query = torch.randn(rows, heads, 1, dim)
    mask = torch.ones(rows, 1, 1, n + own, dtype=torch.bool)
    mask[1, ..., :4] = False
    module = types.SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    got, _ = _shared_prompt_attention(module, query, keys, values, mask, scaling=0.3)
    full_keys, full_values = (torch.cat([prompt.expand(rows, -1, -1, -1), own_part], dim=-2)
                              for prompt, own_part in zip(layer.prompt, (keys, values)))
    want, _ = sdpa_attention_forward(module, query, full_keys, full_values, mask, scaling=0.3)
    assert got.shape == want.shape == (rows, 1, heads, dim) and torch.allclose(got, want, atol=1e-6)
    with pytest.raises(ValueError, match="one new token per row, got 2"):
        _shared_prompt_attention(module, torch.randn(rows, heads, 2, dim), keys, values, None, scaling=0.3)
