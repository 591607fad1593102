"""composer.prices: OpenRouter prices read back from genai-prices, a call's cost, the budget guard's prices.

    .venv/bin/pytest tests/test_prices.py
"""

import pytest
from genai_prices import Usage, calc_price

from composer import prices
from composer.providers import cost


@pytest.mark.parametrize("model", ["anthropic/claude-opus-4.7", "openai/gpt-5", "deepseek/deepseek-v4-pro"])
def test_linear_prices_match_genai_prices(model):
    table = prices.openrouter_prices(model)
    for prompt, cached, written, out in [(1000, 0, 0, 0), (12345, 8000, 2000, 777), (50000, 49000, 0, 1500)]:
        expected = float(calc_price(Usage(input_tokens=prompt, cache_read_tokens=cached, cache_write_tokens=written,
                                          output_tokens=out), model, provider_id="openrouter").total_price)
        assert cost(table, prompt, cached, written, out) == pytest.approx(expected, rel=1e-12)
        assert prices.computed_cost(model, prompt, cached, written, out) == pytest.approx(expected, rel=1e-12)


def test_opus_prices_by_hand():
    # $5 in, $25 out, reads $0.50, writes $6.25 per million: 10k prompt of which 8k read and 1k written, 300 out
    assert prices.computed_cost("anthropic/claude-opus-4.7", 10_000, 8_000, 1_000, 300) == pytest.approx(
        (1_000 * 5 + 8_000 * 0.5 + 1_000 * 6.25 + 300 * 25) / 1e6)


def test_guard_prices_take_the_dearer_of_table_and_simulation():
    p = prices.guard_prices("deepseek/deepseek-v4-pro")
    table = prices.openrouter_prices("deepseek/deepseek-v4-pro")
    assert p.input == max(table.input, 1.74) and p.output == max(table.output, 3.48)
    with pytest.raises(LookupError, match="budget"):
        prices.guard_prices("nobody/no-model")


