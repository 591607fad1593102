"""Generation for the local server: a worker thread per model that batches its requests, samples from each batch's own
seeded generator, prefills a step's prompt once for its k samples and lets their rows share that prompt in attention.

    from composer import generation
    gen = generation.Generator(model, tokenizer)   # composer.serve starts one per served model
    gen.submit(job)                                # a Job: prompt tokens, samples, sampling settings; its rows come back

What composer.serve's OpenAI-compatible endpoints run on; see composer.bench.teachers for its speed against HF
generate's plain way.
"""

import collections
import contextlib
import math
import random
import threading
from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import (AttentionInterface, DynamicCache, LogitsProcessor, LogitsProcessorList, StoppingCriteria,
                          StoppingCriteriaList, TemperatureLogitsWarper, TopPLogitsWarper)
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from composer.kvcache import ReservedLayer, reserved_cache

MAX_BATCH_ROWS = 32  # sequences per generate call: bounds the padding and how long a batch holds the worker
SHARED_PROMPT = "composer_shared_prompt"  # the attention implementation the workers give their models (below)
SHARED_PROMPT_MODELS = ("qwen3",)  # whose attention modules pass the cache's keys to the attention function unchanged


@dataclass(eq=False)
class Job:
    """One request's generation, and where its events go (`emit` is called from the worker thread)."""

    model: str
    prompt: list[int]
    n: int
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    top_logprobs: int | None  # None: no log-probs wanted
    emit: Callable[[list], None]
    finished: set = field(default_factory=set)  # choices nobody wants more of (stop string hit, client gone)

    def batch_key(self):
        # A seeded sampled request runs alone, so its tokens depend on its seed and not on its batch neighbours.
        if self.seed is not None and self.temperature > 0:
            return None
        return self.model, self.n, self.temperature, self.top_p


class Generator:
    """A worker thread running HF `generate`; queued jobs that agree on model and sampling share a batch.

    Events sent to each job: ("token", choice, token_id, logprob, top) with logprob/top None unless asked
    for, ("end", choice, "stop" | "length"), or ("error", message).
    """

    def __init__(self, models: dict, seed: int, *, plain: bool = False):
        self.models = models  # served name -> model
        # plain: HF generate's own way (every row prefills its prompt, the KV cache grows by concatenation, sampling
        # draws from torch's global RNG), only to measure what the server's way buys (bench serve, bench teachers).
        self.plain = plain
        for model in models.values() if not plain else ():
            if model.config.model_type in SHARED_PROMPT_MODELS:
                model.set_attn_implementation(SHARED_PROMPT)
        self._rng = random.Random(seed)  # seeds unseeded batches, so a sequential rerun repeats itself
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._current: list[Job] = []
        self._thread = threading.Thread(target=self._loop, name="composer-generate", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            self._queue.append(job)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._queue.clear()
            self._queue.append(None)
            for job in self._current:  # end the running batch at its next step
                job.finished.update(range(job.n))
            self._cond.notify()
        self._thread.join()

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            while not self._queue:
                self._cond.wait()
            first = self._queue.popleft()
            if first is None:
                return None
            batch, key, rows = [first], first.batch_key(), first.n
            for job in list(self._queue) if key is not None else []:
                if job is not None and job.batch_key() == key and rows + job.n <= MAX_BATCH_ROWS:
                    batch.append(job)
                    rows += job.n
                    self._queue.remove(job)
            self._current = batch
            return batch

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._generate(batch)
            except Exception as e:  # these requests fail with a 500; the server carries on
                for job in batch:
                    job.emit([("error", f"generation failed: {type(e).__name__}: {e}")])

    def _generate(self, batch: list[Job]) -> None:
        first, model = batch[0], self.models[batch[0].model]
        config = model.generation_config
        eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
        pad = config.pad_token_id if config.pad_token_id is not None else eos[0]
        # One row per choice, each prompt n times in a row (generate's num_return_sequences refuses greedy n > 1),
        # left-padded so that every prompt ends where generation starts.
        prompts = [job.prompt for job in batch for _ in range(job.n)]
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt):] = torch.tensor(prompt)
            mask[i, width - len(prompt):] = 1
        seed = first.seed if first.seed is not None else self._rng.getrandbits(63)  # a seeded one runs alone
        tap, processors = _Tap(batch, eos), LogitsProcessorList()
        processors.append(_Record(tap))
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode())
            if self.plain:  # HF's sampling from the global RNG (top_k=0: OpenAI's sampling has none, HF's default is 50)
                stack.enter_context(torch.random.fork_rng(devices=[]))  # leave the caller's RNG alone
                torch.manual_seed(seed % 2**63)
                cache = {}
                sampling = (dict(do_sample=True, temperature=first.temperature, top_p=first.top_p, top_k=0)
                            if first.temperature > 0 else dict(do_sample=False))
            else:
                shared = len(prompts) > 1 and len(prompts[0]) > 1 and all(p == prompts[0] for p in prompts)
                cache = {"past_key_values": _prefilled(model, prompts[0], len(prompts)) if shared
                         else reserved_cache(model)}
                sampling = dict(do_sample=False)
                if first.temperature > 0:
                    processors.append(_Sample(seed, first.temperature, first.top_p))
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(job.max_tokens for job in batch),
                           pad_token_id=pad, eos_token_id=eos, logits_processor=processors,
                           stopping_criteria=StoppingCriteriaList([_Deliver(tap)]), **cache, **sampling)
        tap.close()


class _Sample(LogitsProcessor):
    """Sampling from the batch's own RNG, so that a seeded request's tokens depend on its seed and not on what else
    the machine runs: the models' workers run in parallel threads (Server), and HF's `do_sample` draws from torch's
    one global RNG. generate runs greedy and this processor, last, leaves only the token it drew. The draw is HF's
    (temperature, then top-p, softmax, one multinomial over the rows), so a batch gets the tokens `do_sample` gives
    after torch.manual_seed(seed) (tests/test_serve.py)."""

    def __init__(self, seed: int, temperature: float, top_p: float):
        self.rng = torch.Generator().manual_seed(seed % 2**63)
        self.warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p))

    def __call__(self, input_ids, scores):
        probs = torch.softmax(self.warpers(input_ids, scores), dim=-1)
        tokens = torch.multinomial(probs, 1, generator=self.rng)
        return torch.full_like(scores, -math.inf).scatter_(1, tokens, 0.0)


def _prefilled(model, prompt: list[int], rows: int) -> DynamicCache:
    """The KV cache of all but the prompt's last token, computed once for the `rows` rows that continue it: n samples
    of one prompt (003's teacher queries: ~3,200-token states, n=8) prefill it once instead of n times. With the
    shared-prompt attention the rows hold it once (_SharedPromptLayer); otherwise it is repeated per row. `generate`
    then feeds the last token itself; the tokens and log-probs are those of the unshared batch (tests/test_serve.py)."""
    cache = reserved_cache(model)
    model(input_ids=torch.tensor([prompt[:-1]], device=model.device), use_cache=True, past_key_values=cache)
    if model.config._attn_implementation == SHARED_PROMPT and all(
            isinstance(layer, ReservedLayer) for layer in cache.layers):
        cache.layers = [_SharedPromptLayer(layer.keys, layer.values) for layer in cache.layers]
    else:
        cache.batch_repeat_interleave(rows)
    return cache


class _SharedPromptLayer(DynamicLayer):
    """The cache of rows that continue one prompt: the prompt's keys and values once (batch 1), each row's own tokens
    after it in a ReservedLayer. _shared_prompt_attention reads the prompt once for all the rows, where a repeated
    cache has attention read it once per row: at 003's shape (8 rows, ~3,200-token prompts) that read was most of a
    decoding step once the cache stopped being copied."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.prompt, self.own = (keys, values), ReservedLayer()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = self.own.update(key_states, value_states)
        keys.composer_prompt = self.prompt  # the model hands these tensors to the attention function as they are
        return keys, values

    def get_seq_length(self) -> int:
        return self.prompt[0].shape[-2] + self.own.get_seq_length()


def _shared_prompt_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """SDPA, except for keys of a _SharedPromptLayer: one query token per row against the prompt's keys (batch 1,
    read once by one matmul for every row and head) and the row's own. Grouped-query heads as HF's repeat_kv groups
    them: query head i reads key/value head i // (heads / kv_heads)."""
    prompt = getattr(key, "composer_prompt", None)
    if prompt is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    (prompt_keys, prompt_values), (rows, heads, length, dim) = prompt, query.shape
    kv_heads, n = prompt_keys.shape[1], prompt_keys.shape[-2]
    if length != 1:
        raise ValueError(f"shared-prompt attention takes one new token per row, got {length}")
    grouped = query.view(rows, kv_heads, heads // kv_heads, dim)  # [rows, kv heads, group, dim]
    across = grouped.transpose(0, 1).reshape(1, kv_heads, -1, dim)  # every row's queries as one batch-1 sequence
    scores = torch.cat([(across @ prompt_keys.transpose(-1, -2)).view(kv_heads, rows, -1, n).transpose(0, 1),
                        grouped @ key.transpose(-1, -2)], dim=-1) * (dim ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:  # [rows, 1, 1, prompt + own]: bool (True attends) or additive
        mask = attention_mask.view(rows, 1, 1, -1)
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1)
    from_prompt = probs[..., :n].transpose(0, 1).reshape(1, kv_heads, -1, n) @ prompt_values
    out = from_prompt.view(kv_heads, rows, -1, dim).transpose(0, 1) + probs[..., n:] @ value
    return out.reshape(rows, heads, 1, dim).transpose(1, 2), None


AttentionInterface.register(SHARED_PROMPT, _shared_prompt_attention)
AttentionMaskInterface.register(SHARED_PROMPT, sdpa_mask)


class _Tap:
    """HF generate's per-step hooks, shared: the logits processor records raw log-probs (custom processors
    run before the temperature/top-p warpers), and the stopping criterion, which sees each row's sampled token,
    hands it to its job and decides which rows are done (EOS, the job's own max_tokens, or `Job.finished`)."""

    def __init__(self, batch: list[Job], eos: list[int]):
        self.rows = [(job, k) for job in batch for k in range(job.n)]  # as the input rows: each prompt n times
        self.counts = [0] * len(self.rows)
        self.open = [True] * len(self.rows)
        self.eos = set(eos)
        self.want_logprobs = any(job.top_logprobs is not None for job in batch)
        self.logprobs = None

    def step(self, input_ids: torch.Tensor) -> torch.Tensor:
        tokens = input_ids[:, -1].tolist()
        events = collections.defaultdict(list)
        for r, (job, k) in enumerate(self.rows):
            if not self.open[r]:
                continue
            if k in job.finished or tokens[r] in self.eos:
                reason = "stop"
            else:
                events[job].append(("token", k, tokens[r], *self._logprobs(r, tokens[r], job.top_logprobs)))
                self.counts[r] += 1
                reason = "length" if self.counts[r] >= job.max_tokens else None
            if reason:
                self.open[r] = False
                events[job].append(("end", k, reason))
        for job, job_events in events.items():
            job.emit(job_events)
        return torch.tensor([not row_open for row_open in self.open])

    def _logprobs(self, row: int, token: int, top: int | None):
        if top is None:
            return None, None
        values, ids = self.logprobs[row].topk(top)
        return self.logprobs[row, token].item(), list(zip(ids.tolist(), values.tolist()))

    def close(self) -> None:
        """Rows still open when generate returned ran into max_new_tokens."""
        for r, (job, k) in enumerate(self.rows):
            if self.open[r]:
                self.open[r] = False
                job.emit([("end", k, "length")])


class _Record(LogitsProcessor):
    def __init__(self, tap: _Tap):
        self.tap = tap

    def __call__(self, input_ids, scores):
        if self.tap.want_logprobs:
            self.tap.logprobs = torch.log_softmax(scores.float(), dim=-1)
        return scores


class _Deliver(StoppingCriteria):
    def __init__(self, tap: _Tap):
        self.tap = tap

    def __call__(self, input_ids, scores, **kwargs):
        return self.tap.step(input_ids)
