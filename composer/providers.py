"""Simulated provider profiles (composer/providers.yaml): latency, prices, prompt caching and faults, and the
dollar cost of one request; the local server plays them, the replay's projection and the teachers' budget guard
price with them.

    from composer.providers import load_profiles, cost, PromptCache
    profile = load_profiles()["openai/gpt-5"]
    cost(profile.prices, prompt=1200, cached=1000, written=0, completion=80)   # dollars
    PromptCache(profile.cache).lookup(token_ids, breakpoints)                  # (cached, written) tokens
"""

import bisect
import collections
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

PROFILES_FILE = Path(__file__).with_name("providers.yaml")
FAULTS = ("rate_limit", "server_error", "payment_required", "malformed", "stall")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in providers.yaml must fail, not silently simulate nothing


class Latency(_Strict):
    ttft_median_s: float = Field(0.0, ge=0)  # time to first token: lognormal with this median...
    ttft_sigma: float = Field(0.0, ge=0)  # ...and this sigma of its log
    per_token_s: float = Field(0.0, ge=0)  # then each further output token


class Prices(_Strict):
    """Dollars per million tokens. Cache prices default to the input price (no discount, no premium)."""

    input: float = Field(0.0, ge=0)
    output: float = Field(0.0, ge=0)
    cache_read: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)


class Cache(_Strict):
    mode: Literal["automatic", "explicit", "off"] = "automatic"
    block: int = Field(1, ge=1)  # cached_tokens is rounded down to a multiple of this
    min_tokens: int = Field(0, ge=0)  # shorter prefixes are never cached
    entries: int = Field(64, ge=1)  # recent prefixes remembered per model (LRU)


class Errors(_Strict):
    """Probability per request of each fault (at most one fault per request)."""

    rate_limit: float = Field(0.0, ge=0, le=1)
    server_error: float = Field(0.0, ge=0, le=1)
    payment_required: float = Field(0.0, ge=0, le=1)
    malformed: float = Field(0.0, ge=0, le=1)
    stall: float = Field(0.0, ge=0, le=1)
    retry_after_s: float = Field(1.0, ge=0)  # sent with 429s; the openai SDK honours up to 60 s
    stall_s: float = Field(30.0, ge=0)  # how long a stalled request sleeps before it answers anyway

    @model_validator(mode="after")
    def _one_fault_at_most(self):
        if sum(getattr(self, kind) for kind in FAULTS) > 1:
            raise ValueError("the fault rates add up to more than 1")
        return self


class Profile(_Strict):
    latency: Latency = Latency()
    prices: Prices = Prices()
    cache: Cache = Cache()
    errors: Errors = Errors()


def load_profiles(path: str | Path = PROFILES_FILE) -> dict[str, Profile]:
    """The profiles in a providers YAML file (a mapping of profile name to Profile fields)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    profiles = {}
    for name, spec in data.items():
        try:
            profiles[name] = Profile.model_validate(spec or {})
        except ValidationError as e:
            raise ValueError(f"{path}: profile {name!r}: {e}") from None
    return profiles


class PromptCache:
    """Recent prompts of one model, scored the way providers bill prompt-cache hits.

    Prompts are kept as big-endian uint32 token bytes in sorted order, where byte order is token-sequence order:
    the longest prefix a prompt shares with any kept one is then shared with one of its two sorted neighbours,
    so a lookup is a bisection, not a scan.
    """

    def __init__(self, spec: Cache):
        self.spec = spec
        self.recent: collections.OrderedDict[bytes, None] = collections.OrderedDict()  # LRU order
        self.sorted: list[bytes] = []

    def lookup(self, ids: list[int], breakpoints: list[int]) -> tuple[int, int]:
        """(cached_tokens, cache_write_tokens) for this prompt; then remember it."""
        if self.spec.mode == "off":
            return 0, 0
        prompt = np.asarray(ids, dtype=">u4").tobytes()
        if self.spec.mode == "automatic":  # OpenAI/DeepSeek: any shared prefix counts; writes cost nothing extra
            i = bisect.bisect_left(self.sorted, prompt)
            hit = max((_shared(prompt, kept) for kept in self.sorted[max(i - 1, 0):i + 1]), default=0)
            hit = hit // self.spec.block * self.spec.block
            self._remember(prompt)
            return (hit if hit >= self.spec.min_tokens else 0), 0
        # Anthropic: only prefixes ending at a cache_control breakpoint are written (at the write price), and a
        # later prompt reads the longest written prefix it starts with, up to its own last breakpoint.
        marks = [b for b in breakpoints if b >= self.spec.min_tokens]
        if not marks:
            return 0, 0
        hit = max((len(kept) // 4 for kept in self.recent if len(kept) <= 4 * marks[-1] and prompt.startswith(kept)),
                  default=0)
        for mark in marks:
            self._remember(prompt[: 4 * mark])
        return hit, marks[-1] - hit

    def _remember(self, prefix: bytes) -> None:
        if prefix not in self.recent:
            bisect.insort(self.sorted, prefix)
        self.recent[prefix] = None
        self.recent.move_to_end(prefix)
        while len(self.recent) > self.spec.entries:
            oldest, _ = self.recent.popitem(last=False)
            del self.sorted[bisect.bisect_left(self.sorted, oldest)]


def _shared(a: bytes, b: bytes) -> int:
    """Tokens two prompts (as 4-byte tokens) share at their start."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n))
    return (int(differ[0]) if differ.size else n) // 4


def cost(prices: Prices, prompt: int, cached: int, written: int, completion: int) -> float:
    """Dollars for one request: uncached input, cache reads, cache writes and output at their prices."""
    read = prices.input if prices.cache_read is None else prices.cache_read
    write = prices.input if prices.cache_write is None else prices.cache_write
    return (prices.input * (prompt - cached - written) + read * cached + write * written
            + prices.output * completion) / 1e6
