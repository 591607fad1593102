"""A KV cache that grows without copying itself at every token.

    from composer.kvcache import reserved_cache
    cache = reserved_cache(model)        # a DynamicCache whose full-attention layers are ReservedLayers
    model(input_ids=ids, past_key_values=cache, use_cache=True)

HF's DynamicLayer concatenates each new token's keys and values onto the whole cache, copying it at every
generated token: at 003's ~3,200-token teacher prompts that copy was 76% of a query's time (composer.serve), and a
batch of episodes decoding in lockstep (composer.policies) copies every row's conversation. A ReservedLayer writes
into a buffer with room to spare instead; what attention reads is the same tensor (tests/test_serve.py).
"""

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """A DynamicLayer that writes each token's keys and values into a buffer with room to spare, where HF's
    concatenates. The buffer doubles when full; what attention reads is a view of its filled part."""

    _keys = _values = None  # the buffers; `keys`/`values` are views of them while they are current

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        end = n + key_states.shape[-2]
        # The buffers are stale when something replaced the views (batch_repeat_interleave, batch_select_indices).
        if (self._keys is None or self.keys.data_ptr() != self._keys.data_ptr()
                or self._keys.shape[0] != key_states.shape[0] or self._keys.shape[-2] < end):
            self._keys, self._values = (_room(old, new, n, 2 * end) for old, new in
                                        ((self.keys, key_states), (self.values, value_states)))
        self._keys[..., n:end, :] = key_states
        self._values[..., n:end, :] = value_states
        self.keys, self.values = self._keys[..., :end, :], self._values[..., :end, :]
        return self.keys, self.values


def _room(old: torch.Tensor, new: torch.Tensor, n: int, size: int) -> torch.Tensor:
    buffer = new.new_empty((*new.shape[:-2], size, new.shape[-1]))
    if n:
        buffer[..., :n, :] = old
    return buffer


def reserved_cache(model) -> DynamicCache:
    """A DynamicCache for `model` with ReservedLayers in place of its plain dynamic layers."""
    cache = DynamicCache(config=model.config)
    cache.layers = [ReservedLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
