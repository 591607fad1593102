"""composer.turn_cache: TRL's tool-loop turns from kept KV caches, the same tokens as TRL's generate.

    .venv/bin/pytest tests/test_turn_cache.py
"""

import pytest
import torch
from trl import GRPOTrainer

from composer import trainer_checks, turn_cache
from composer.models import tiny_model


def _trainer(tmp_path, **config):
    model_path = tiny_model()
    train, _, tokenizer = trainer_checks.datasets(model_path)
    trainer = trainer_checks.build_trainer(turn_cache.with_turn_cache(GRPOTrainer), model_path, tmp_path, train,
                                           tokenizer, **config)
    trainer._turn_caches = []  # what _generate sets for a generation batch
    prompts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
               for p in trainer_checks.PROMPTS]
    suffix = tokenizer("<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                       add_special_tokens=False).input_ids
    return trainer, prompts, suffix


def _stock(trainer, rows):
    return GRPOTrainer._generate_single_turn(trainer, rows, None, {}, 1)[0]


def test_greedy_turns_are_trls_tokens_and_encode_only_what_is_new(tmp_path, monkeypatch):
    trainer, (a, b), suffix = _trainer(tmp_path, generation_kwargs={"do_sample": False})
    seen = []  # per prefill: the tokens the row's cache held before it

    def prefill(model, ids, cache):
        seen.append(len(cache.token_ids))
        return real(model, ids, cache)

    real = turn_cache.prefill
    monkeypatch.setattr(turn_cache, "prefill", prefill)
    rows = [a, a, b]  # a GRPO group's rows share their first prompt
    first, logprobs = trainer._generate_single_turn(rows, None, {}, 1)
    assert first == _stock(trainer, rows) and logprobs is None
    # the second row of a starts from a copy of the first's cache; b from another copy, cropped to the chat
    # template's opening it shares with a
    assert seen == [0, len(a), len(a)] and 0 < turn_cache.shared_prefix(a, b) < len(b)
    assert len(trainer._turn_caches) == 3
    second_rows = [a + first[0] + suffix, b + first[2] + suffix]  # the loop's next turn for two of the rows
    seen.clear()
    second, _ = trainer._generate_single_turn(second_rows, None, {}, 1)
    assert second == _stock(trainer, second_rows)
    assert seen == [len(a), len(b)]  # each row encodes its completion and the tool's answer, not its prompt again
    assert len(trainer._turn_caches) == 3


def test_sampling_follows_torchs_seed_and_rows_draw_apart(tmp_path):
    trainer, (a, _), _ = _trainer(tmp_path, temperature=1.0)
    torch.manual_seed(0)
    one, _ = trainer._generate_single_turn([a, a], None, {}, 2)
    trainer._turn_caches = []
    torch.manual_seed(0)
    again, _ = trainer._generate_single_turn([a, a], None, {}, 2)
    assert one == again and one[0] != one[1]


@pytest.mark.parametrize("kwargs", [{"top_p": 0.5}, {"top_k": 5}, {"min_p": 0.1}, {"repetition_penalty": 1.2},
                                    {"suppress_tokens": [1]}])
def test_sampling_settings_decode_lacks_go_to_trls_generate(tmp_path, kwargs):
    trainer, (a, _), _ = _trainer(tmp_path, generation_kwargs=kwargs)
    assert not trainer._turn_cache_applies(None)
    torch.manual_seed(0)
    ours, _ = trainer._generate_single_turn([a], None, {}, 1)
    torch.manual_seed(0)
    assert ours == _stock(trainer, [a]) and trainer._turn_caches == []
    plain, _, _ = _trainer(tmp_path / "plain")
    assert plain._turn_cache_applies(None) and not plain._turn_cache_applies([["an image"]])
