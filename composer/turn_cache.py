"""GRPOTrainer generation that keeps each rollout's KV cache from one tool-calling turn to the next.

    from trl import GRPOTrainer
    from composer.turn_cache import with_turn_cache
    trainer = with_turn_cache(GRPOTrainer)(model, reward_funcs=..., args=..., environment_factory=...)

TRL's tool loop (GRPOTrainer._tool_call_loop) generates every turn from the whole conversation so far, and on the
transformers backend `generate` encodes all of it again: the system prompt with its tool schemas, the task, every
earlier turn. On 004's report GRPO step (the zoo student, 8 rollouts of up to 8 turns) that prefill was 53 % of the
step. Here each rollout's cache keeps the conversation it has seen, so a turn encodes only what is new (the
previous completion and the tool's answer), and the rows then decode together: composer.policies.prefill and
decode, the evaluation's own loop. A row's cache is found by its tokens (the longest shared prefix), so nothing
depends on TRL's row bookkeeping; the caches live for one generation batch.

Sampling is the same distribution as TRL's `generate` at its settings (temperature, or greedy with do_sample
False), each row drawing from its own generator seeded from torch's global one, so a seeded run repeats itself; the
tokens are not `generate`'s draws. Settings `decode` does not implement (top_p < 1, top_k, min_p, a repetition
penalty, other generation_kwargs), vLLM, continuous batching and images go to TRL's own path.
"""

import copy

import torch
from transformers import DynamicCache
from trl.models.utils import unwrap_model_for_generation

from composer.policies import decode, prefill, shared_prefix

# GenerationConfig fields the fast path reproduces: any value, or only these (no top-p/top-k/min-p filtering, no
# repetition penalty)
ANY = {"max_new_tokens", "do_sample", "temperature", "pad_token_id", "bos_token_id", "eos_token_id",
       "cache_implementation"}
NEUTRAL = {"top_p": (1.0, None), "top_k": (0, None), "min_p": (0.0, None), "repetition_penalty": (1.0, None)}


class TurnCache:
    """The mixin (see the module docstring); with_turn_cache puts it in front of a GRPOTrainer class."""

    def _generate(self, prompts):
        self._turn_caches = []
        try:
            return super()._generate(prompts)
        finally:
            self._turn_caches = []  # one generation batch: the next one starts from new weights

    def _turn_cache_applies(self, images) -> bool:
        if self.use_vllm:  # vLLM generates (its own prefix cache); TRL then sets no generation_kwargs at all
            return False
        kwargs = self.generation_kwargs or {}
        return (not self.use_transformers_continuous_batching and not images
                and not self._is_vlm and set(kwargs) <= ANY | set(NEUTRAL)
                and all(kwargs.get(k) in neutral for k, neutral in NEUTRAL.items()))

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if not self._turn_cache_applies(images):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        config = self.generation_config
        with (unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                          gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                          generation_kwargs=self.generation_kwargs,
                                          gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs)
              as model, torch.no_grad(), self._dist.summon_full_params(self.model_wrapped, recurse=False)):
            caches, logits, taken = [], [], set()
            for ids in prompt_ids:
                caches.append(self._claim_cache(model, ids, taken))
                logits.append(prefill(model, list(ids), caches[-1]))
            seeds = torch.randint(0, 2**62, (len(prompt_ids),)).tolist()  # the global generator: TRL's seed
            rngs = [torch.Generator(device=model.device).manual_seed(s) for s in seeds]
            completions = decode(model, caches, logits, eos=set(self.eos_token_ids),
                                 max_new_tokens=config.max_new_tokens,
                                 temperature=config.temperature if config.do_sample else 0.0, rngs=rngs)
        return completions, None

    def _claim_cache(self, model, ids, taken: set) -> DynamicCache:
        """A cache for one row of this turn: a kept one no other row of the turn has taken, sharing the longest
        prefix with it (its own from the turn before); else a copy of the taken one sharing most (a GRPO group's
        rows share their first prompt, then part ways); else a new one. prefill checks the shared prefix token by
        token, so the choice only decides how much is encoded again."""
        shared = [(shared_prefix(cache.token_ids, ids), cache) for cache in self._turn_caches]
        free = [(n, cache) for n, cache in shared if n and id(cache) not in taken]
        used = [(n, cache) for n, cache in shared if n and id(cache) in taken]
        if free:
            cache = max(free, key=lambda c: c[0])[1]
        else:
            if used:
                cache = copy.deepcopy(max(used, key=lambda c: c[0])[1])
            else:
                cache = DynamicCache(config=model.config)
                cache.token_ids = []
            self._turn_caches.append(cache)
        taken.add(id(cache))
        return cache


def with_turn_cache(trainer_cls: type) -> type:
    """`trainer_cls` (GRPOTrainer or a subclass) with TurnCache's generation."""
    return type(f"TurnCached{trainer_cls.__name__}", (TurnCache, trainer_cls), {})
