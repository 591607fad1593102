"""composer.kvcache: the reserved layer writes in place and reads as HF's concatenating one.

    .venv/bin/pytest tests/test_kvcache.py
"""

import torch

from composer.kvcache import ReservedLayer


def test_reserved_layer_writes_in_place_until_full_then_doubles():
    """The cache a generated token costs: a write into room already there, not a copy of the whole cache (HF's
    DynamicLayer concatenates); what attention reads equals the concatenation at every step."""
    layer, concatenated = ReservedLayer(), None
    torch.manual_seed(0)
    buffers = []
    for length in (5, 1, 1, 1, 1, 1, 4, 1):
        key, value = torch.randn(2, 3, length, 4), torch.randn(2, 3, length, 4)
        keys, values = layer.update(key, value)
        concatenated = (key, value) if concatenated is None else tuple(
            torch.cat([old, new], dim=-2) for old, new in zip(concatenated, (key, value)))
        assert torch.equal(keys, concatenated[0]) and torch.equal(values, concatenated[1])
        buffers.append(keys.data_ptr())
    assert layer.get_seq_length() == 15
    assert len(set(buffers[:6])) == 1 and buffers[6] != buffers[5] and buffers[7] == buffers[6]  # room 10, then 28
    layer.batch_repeat_interleave(2)  # the views replaced: the next write starts a fresh buffer from them
    keys, _ = layer.update(torch.zeros(4, 3, 1, 4), torch.zeros(4, 3, 1, 4))
    assert torch.equal(keys[:, :, :15], concatenated[0].repeat_interleave(2, dim=0)) and keys.shape == (4, 3, 16, 4)
