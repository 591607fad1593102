"""Tokenizer and tiny Qwen3 models built offline, plus loaders for real checkpoints.

    python -c "from composer.models import tiny_model; print(tiny_model())"

`tiny_model()` returns a directory holding a randomly initialised Qwen3ForCausalLM, its tokenizer and
generation config; pass that path wherever a Hub name would go (TRL trainers reload the reference model
from it). `build_tokenizer()` returns the byte-level BPE tokenizer those models share, with Qwen3's
special tokens and TRL's bundled Qwen3 chat template, so tool calling renders and parses like the real
thing. Live profiles call `load_model("Qwen/Qwen3-8B")` / `load_tokenizer(...)` instead.

Everything built is cached under $COMPOSER_CACHE (default <repo>/.cache) in a directory named by a
hash of what went into it, so a second call is a lookup and a stale cache can never be mistaken for a
fresh one.
"""

import hashlib
import importlib.resources
import json
import os
import random
import shutil
from pathlib import Path

import tokenizers
import torch
import transformers
from huggingface_hub import constants as hub_constants
from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors, trainers
from tokenizers.models import BPE
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from composer.files import config_hash, publish
from composer.paths import CACHE

VOCAB_SIZE = 1024  # len(tokenizer): learned BPE tokens plus the added tokens below
PAD, IM_START, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, EOS]
# Qwen3 marks these as added but not special, so decode(skip_special_tokens=True) keeps them and
# TRL's response parser can still find the tool calls and reasoning in a completion.
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
# Qwen2/3's pre-tokenizer split: single digits, letters with one leading non-letter, punctuation runs, newlines.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)


def cache_root() -> Path:
    """$COMPOSER_CACHE read per call (paths.CACHE is frozen at import, which tests and notebooks outlive)."""
    return Path(os.environ.get("COMPOSER_CACHE", CACHE))


# ---------------------------------------------------------------------------------------------------------
# Tokenizer


def chat_template() -> str:
    """TRL's bundled Qwen3 template, byte for byte: TRL picks its tool-call parser by string equality."""
    return importlib.resources.files("trl").joinpath("chat_templates/qwen3.jinja").read_text(encoding="utf-8")


NOUNS = (
    "user path config cache token model batch reward prompt result item node request response file line index queue "
    "worker session record"
).split()
VERBS = "load parse build fetch update compute validate render merge split resolve apply check encode count".split()
ISSUE_OPENERS = [
    "When I run the test suite on a fresh checkout,",
    "After upgrading to the latest release,",
    "Calling the function with an empty list",
    "The CLI crashes as soon as",
    "It looks like the cache is never invalidated, so",
]
ISSUE_DETAILS = [
    "it raises a KeyError instead of returning None.",
    "the output is off by one for the last element.",
    "the process hangs and never exits.",
    "the error message does not say which file failed.",
    "the results differ between two identical runs.",
]


def _python_snippet(rng: random.Random) -> str:
    noun, other, verb = rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(VERBS)
    n = rng.randint(0, 99)
    return f'''def {verb}_{noun}({noun}s: list[dict], limit: int = {n}) -> dict[str, int]:
    """{verb.capitalize()} each {noun} and return counts keyed by {other}."""
    counts: dict[str, int] = {{}}
    for i, {noun} in enumerate({noun}s):
        if i >= limit:
            break
        key = str({noun}.get("{other}", ""))
        counts[key] = counts.get(key, 0) + 1
    return counts


class {noun.capitalize()}{verb.capitalize()}er:
    def __init__(self, {other}=None):
        self.{other} = {other} or []

    def __len__(self):
        return len(self.{other})
'''


def _test_snippet(rng: random.Random) -> str:
    noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
    a, b = rng.randint(0, 9), rng.randint(10, 999)
    return f'''import pytest

from app.{noun} import {verb}_{noun}


def test_{verb}_{noun}_empty():
    assert {verb}_{noun}([]) == {{}}


@pytest.mark.parametrize("n", [{a}, {b}])
def test_{verb}_{noun}_limit(n):
    items = [{{"{noun}": i}} for i in range(n)]
    assert sum({verb}_{noun}(items, limit=n).values()) == n
'''


def _diff_snippet(rng: random.Random) -> str:
    noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
    line = rng.randint(1, 400)
    return f"""diff --git a/src/app/{noun}.py b/src/app/{noun}.py
--- a/src/app/{noun}.py
+++ b/src/app/{noun}.py
@@ -{line},6 +{line},7 @@ def {verb}_{noun}({noun}s, limit=None):
     result = []
-    for {noun} in {noun}s[:limit]:
+    for {noun} in {noun}s[: limit or len({noun}s)]:
+        if {noun} is None:
+            continue
         result.append({noun})
     return result
"""


def _issue_snippet(rng: random.Random) -> str:
    noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
    return (
        f"Title: {verb}_{noun} fails on {rng.choice(NOUNS)} input\n\n"
        f"{rng.choice(ISSUE_OPENERS)} {rng.choice(ISSUE_DETAILS)} "
        f"Steps to reproduce: call `{verb}_{noun}()` with {rng.randint(2, 50)} items. "
        f"Expected the {noun} to be {verb}d; instead {rng.choice(ISSUE_DETAILS)}\n"
    )


def _tool_snippet(rng: random.Random) -> str:
    noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
    calls = [
        {"name": "run_tests", "arguments": {"path": f"tests/test_{noun}.py", "k": f"{verb}_{noun}"}},
        {"name": "read_file", "arguments": {"path": f"src/app/{noun}.py", "start": rng.randint(1, 200)}},
        {"name": "edit_file", "arguments": {"path": f"src/app/{noun}.py", "old": f"{noun}s[:1]", "new": f"{noun}s"}},
        {"name": "search", "arguments": {"query": f"def {verb}_{noun}"}},
    ]
    passed, failed = rng.randint(0, 40), rng.randint(0, 3)
    return (
        f"<tool_call>\n{json.dumps(rng.choice(calls))}\n</tool_call>\n"
        f"<tool_response>\n{passed} passed, {failed} failed in {rng.random():.2f}s\n</tool_response>\n"
    )


def corpus(n_docs: int = 300, seed: int = 0) -> str:
    """A deterministic mix of code, tests, diffs, issues and tool calls (~100 KB) to learn merges from."""
    rng = random.Random(seed)
    makers = [_python_snippet, _test_snippet, _diff_snippet, _issue_snippet, _tool_snippet]
    docs = [rng.choice(makers)(rng) for _ in range(n_docs)]
    # The template's fixed tool preamble appears in every tool prompt; let it learn merges too.
    return "\n".join(docs) + chat_template()


def _train_tokenizer(text: str) -> PreTrainedTokenizerFast:
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # No normalizer (Qwen uses NFC): byte-level encode/decode must round-trip any string exactly.
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS) - len(MARKUP_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    # Added after training so, as in Qwen, they sit at the end of the vocab and never take part in merges.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=chat_template(),
        clean_up_tokenization_spaces=False,
        model_max_length=TINY["max_position_embeddings"],
    )


def tokenizer_dir() -> Path:
    """Directory of the cached tokenizer, building it on first use."""
    text = corpus()
    key = config_hash(
        corpus=hashlib.sha256(text.encode()).hexdigest(),
        vocab_size=VOCAB_SIZE,
        special=SPECIAL_TOKENS,
        markup=MARKUP_TOKENS,
        split=QWEN_SPLIT,
        template=chat_template(),
        tokenizers=tokenizers.__version__,
        transformers=transformers.__version__,
    )
    return publish(cache_root() / "tokenizers" / key, lambda tmp: _train_tokenizer(text).save_pretrained(tmp))


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The cached tokenizer, loaded back from disk: exactly what a trainer reloading the path will see."""
    return AutoTokenizer.from_pretrained(tokenizer_dir())


# ---------------------------------------------------------------------------------------------------------
# Tiny models


def tiny_model(name: str = "tiny", *, seed: int = 0, **overrides) -> Path:
    """Directory of a randomly initialised Qwen3ForCausalLM (TINY config plus overrides), built once per hash."""
    tok_dir = tokenizer_dir()
    config = dict(TINY, **overrides)
    key = config_hash(
        config=config,
        seed=seed,
        tokenizer=tok_dir.name,
        transformers=transformers.__version__,
        torch=torch.__version__,  # the init RNG stream belongs to torch
    )
    return publish(cache_root() / "models" / f"{name}-{key}", lambda tmp: _build_model(tmp, tok_dir, seed, config))


def _build_model(out: Path, tok_dir: Path, seed: int, config: dict) -> None:
    tok = AutoTokenizer.from_pretrained(tok_dir)
    pad, eos = tok.pad_token_id, tok.eos_token_id
    # Qwen3 checkpoints set bos_token_id to <|endoftext|> in config.json though the tokenizer prepends nothing.
    ids = dict(vocab_size=len(tok), pad_token_id=pad, bos_token_id=pad, eos_token_id=eos)
    cfg = Qwen3Config(**{**ids, **config})
    with torch.random.fork_rng(devices=[]):  # seed the init without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out)
    if not (out / "config.json").exists():
        # transformers writes checkpoints from rank 0 only once torch.distributed is initialised; publishing
        # this directory would poison the cache for every later run.
        raise RuntimeError(
            "tiny_model() built no checkpoint: it was called on a non-zero rank of an initialised process group. "
            "Call it before initialising torch.distributed (every rank may; the cache handles the race)."
        )
    # Copy the tokenizer files rather than re-saving the loaded object, which would also persist load-time
    # kwargs (transformers 5 writes local_files_only/is_local into tokenizer_config.json).
    shutil.copytree(tok_dir, out, dirs_exist_ok=True)


# ---------------------------------------------------------------------------------------------------------
# Loading (local paths or Hub names)


def load_model(name_or_path: str | os.PathLike, *, dtype=None, device=None) -> transformers.PreTrainedModel:
    """AutoModelForCausalLM.from_pretrained; dtype=None keeps the checkpoint's dtype, device places weights on load."""
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if _hub_offline():
        # transformers 5.23 does not pass local_files_only on to its PEFT adapter_config.json probe, which then
        # retries the Hub for ~25 s unless HF_HUB_OFFLINE was already set when huggingface_hub was imported.
        kwargs["adapter_kwargs"] = {"local_files_only": True}
    if device is not None:
        kwargs["device_map"] = device  # load straight onto the device rather than via a CPU copy of an 8B model
    return _from_pretrained(AutoModelForCausalLM, name_or_path, **kwargs)


def load_tokenizer(name_or_path: str | os.PathLike) -> PreTrainedTokenizerFast:
    return _from_pretrained(AutoTokenizer, name_or_path)


def _hub_offline() -> bool:
    # huggingface_hub reads HF_HUB_OFFLINE once at import; reread it so setting it later still keeps us off the network.
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return hub_constants.HF_HUB_OFFLINE or env.upper() in {"1", "ON", "YES", "TRUE"}


def _from_pretrained(auto_cls, name_or_path, **kwargs):
    offline = _hub_offline()
    try:
        return auto_cls.from_pretrained(name_or_path, local_files_only=offline, **kwargs)
    except OSError as e:
        if not offline or Path(name_or_path).is_dir():
            raise  # a real network error or a broken local checkpoint: the original message says more
        raise OSError(
            f"{str(name_or_path)!r} is not a local directory and is not in the Hugging Face cache, and the Hub is "
            "offline (HF_HUB_OFFLINE=1). Set HF_HUB_OFFLINE=0 on a machine with network access to download it, "
            "pass the path of a local checkpoint, or use composer.models.tiny_model() for an offline stand-in."
        ) from e
