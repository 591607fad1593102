"""Prices of OpenRouter models: genai-prices' bundled table (the OpenRouter provider), read back per million tokens,
dated, and priced per call; the budget guard's prices, which also cover the simulated providers
(composer/providers.yaml).

    from composer import prices
    prices.openrouter_prices("qwen/qwen3-8b")                   # Prices(input=..., output=..., cache_read=..., ...)
    prices.computed_cost("openai/gpt-5", prompt=1200, cached=1000, written=0, completion=80)   # dollars
    prices.price_provenance(["openai/gpt-5"])                  # the table's version and each price's date
    prices.guard_prices("openai/gpt-5")                        # the dearer of the table and the simulation, per kind
"""

import contextlib
from datetime import UTC, date, datetime
from importlib import metadata

from genai_prices import Usage, calc_price
from genai_prices.data_snapshot import get_snapshot

from composer.providers import Prices, load_profiles


def openrouter_prices(model: str, when: datetime | None = None) -> Prices:
    """$ per million tokens for `model` on OpenRouter in genai-prices' bundled table, in effect at `when` (now).

    Read back from genai-prices itself (pricing a million tokens of each kind), so dated price changes apply
    exactly as calc_price applies them. LookupError if the table does not know the model."""
    def price(**usage) -> float:
        result = calc_price(Usage(**usage), model, provider_id="openrouter", genai_request_timestamp=when)
        return float(result.total_price)

    m = 1_000_000
    return Prices(input=price(input_tokens=m), output=price(output_tokens=m),
                  cache_read=price(input_tokens=m, cache_read_tokens=m),
                  cache_write=price(input_tokens=m, cache_write_tokens=m))


def computed_cost(model: str, prompt: int, cached: int, written: int, completion: int) -> float:
    """Dollars for one call from its token counts (genai-prices, OpenRouter table, now). Reasoning tokens are
    part of completion tokens, as OpenAI and OpenRouter count them."""
    usage = Usage(input_tokens=prompt, cache_read_tokens=cached, cache_write_tokens=written, output_tokens=completion)
    return float(calc_price(usage, model, provider_id="openrouter").total_price)


def price_provenance(models: list[str], today: date | None = None) -> dict:
    """Where the prices come from: the genai-prices version, and per model the date its current OpenRouter
    price took effect in that table (None: no dated change recorded, the model's first listed price)."""
    today = today or datetime.now(UTC).date()
    since = {}
    for model in models:
        _, info = get_snapshot().find_provider_model(model, None, "openrouter", None)
        dated = info.prices if isinstance(info.prices, list) else []  # a list: prices with date constraints
        dates = [d for p in dated if (d := getattr(p.constraint, "start_date", None)) is not None and d <= today]
        since[model] = max(dates).isoformat() if dates else None
    return {"source": f"genai-prices {metadata.version('genai-prices')} (bundled table, provider openrouter)",
            "as_of": today.isoformat(), "price_since": since}


def guard_prices(model: str) -> Prices:
    """Per-kind maximum of the OpenRouter price and the simulated profile's price (the offline server bills
    the latter): whichever endpoint answers, the worst case is not under-estimated."""
    candidates = []
    with contextlib.suppress(LookupError):
        candidates.append(openrouter_prices(model))
    profile = load_profiles().get(model)
    if profile is not None:
        candidates.append(profile.prices)
    if not candidates:
        raise LookupError(f"no price known for {model!r} (genai-prices or providers.yaml): the budget "
                          "guard cannot bound its cost")

    def top(kind):
        return max((getattr(p, kind) if getattr(p, kind) is not None else p.input) for p in candidates)

    return Prices(input=top("input"), output=top("output"), cache_read=top("cache_read"),
                  cache_write=top("cache_write"))
