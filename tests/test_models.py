import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import add_response_schema, parse_response, qwen3_chat_template

from composer import models
from composer.models import VOCAB_SIZE, build_tokenizer, load_model, load_tokenizer, tiny_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run pytest on a path.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
CALL = {"type": "function", "function": {"name": "run_tests", "arguments": {"path": "tests/test_cache.py"}}}
MESSAGES = [
    {"role": "user", "content": "Fix the failing test in tests/test_cache.py (ünïcode — 日本語 too)."},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "name": "run_tests", "content": "1 failed, 3 passed in 0.12s"},
]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    # models.cache_root() rereads $COMPOSER_CACHE on every call, so setting it here is enough.
    monkeypatch.setenv("COMPOSER_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def weights(path):
    return load_file(path / "model.safetensors")


def test_tokenizer_is_deterministic(cache, monkeypatch):
    first = build_tokenizer()
    monkeypatch.setenv("COMPOSER_CACHE", str(cache / "elsewhere"))  # force a second, independent training run
    second = build_tokenizer()
    assert models.tokenizer_dir().parent.parent == cache / "elsewhere"
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    assert len(first) == VOCAB_SIZE


def test_special_tokens():
    tok = build_tokenizer()
    for t in models.SPECIAL_TOKENS + models.MARKUP_TOKENS:
        assert len(tok(t).input_ids) == 1, t
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.bos_token is None  # like Qwen3: nothing is prepended
    # Markup stays in skip_special_tokens decodes, where TRL looks for tool calls.
    ids = tok("<tool_call>x</tool_call><|im_end|>").input_ids
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_chat_template_renders_tools_and_round_trips():
    tok = build_tokenizer()
    assert tok.chat_template == qwen3_chat_template  # TRL identifies templates by exact string
    text = tok.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert '"name": "run_tests", "description": "Run pytest on a path."' in text
    assert '<tool_call>\n{"name": "run_tests", "arguments": {"path": "tests/test_cache.py"}}\n</tool_call>' in text
    assert "<tool_response>\n1 failed, 3 passed in 0.12s\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text).input_ids
    assert tok.convert_tokens_to_ids("<tool_call>") in ids
    assert tok.decode(ids) == text


def test_trl_parses_tool_calls():
    tok = add_response_schema(build_tokenizer())
    prefix = tok.apply_chat_template(MESSAGES[:1], tools=TOOLS, add_generation_prompt=True)["input_ids"]
    call = '{"name": "run_tests", "arguments": {"path": "tests/test_cache.py"}}'
    completion = f"<tool_call>\n{call}\n</tool_call><|im_end|>"
    parsed = parse_response(tok, tok(completion).input_ids, prefix=prefix)
    assert parsed["tool_calls"] == [CALL]


def test_tiny_model_loads_and_generates():
    path = tiny_model()
    assert path.name.startswith("tiny-")
    assert sum(f.stat().st_size for f in path.iterdir()) < 5e6
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.dtype == torch.float32 and model.config.vocab_size == len(tok)
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.generation_config.pad_token_id == tok.pad_token_id
    ids = torch.tensor([tok("def load_user(path):").input_ids] * 2)
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (*ids.shape, len(tok)) and torch.isfinite(logits).all()
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, ids.shape[1] + 4)
    assert load_model(path, dtype=torch.bfloat16).dtype == torch.bfloat16
    assert load_tokenizer(path).backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()


def test_tiny_model_is_cached(monkeypatch):
    builds = []
    build = models._build_model
    monkeypatch.setattr(models, "_build_model", lambda *a: builds.append(a) or build(*a))
    first = tiny_model()
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert tiny_model() == first and len(builds) == 1
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime


def test_seed_controls_weights(cache, monkeypatch):
    a, b = weights(tiny_model(seed=0)), weights(tiny_model(seed=1))
    monkeypatch.setenv("COMPOSER_CACHE", str(cache / "rebuild"))
    again = weights(tiny_model(seed=0))
    assert all(torch.equal(a[k], again[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"], b["model.embed_tokens.weight"])


def test_overrides_change_the_hash():
    base, deeper = tiny_model(), tiny_model(num_hidden_layers=3)
    assert base != deeper and tiny_model("other") != base
    assert AutoModelForCausalLM.from_pretrained(deeper).config.num_hidden_layers == 3




def test_load_model_offline_error_is_actionable(network_attempts):
    with pytest.raises(OSError) as err:
        load_model("composer-test/no-such-model")
    assert network_attempts == []  # offline means no network, so no retries of it
    msg = str(err.value)
    assert "composer-test/no-such-model" in msg
    assert "HF_HUB_OFFLINE" in msg and "tiny_model()" in msg and "local" in msg
    with pytest.raises(OSError, match="offline"):
        load_tokenizer("composer-test/no-such-model")
