"""The price table: the shipped file, a model's price by name, the cost of tokens."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from tapeproxy.errors import ConfigError
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.tools.prices import load_prices


def test_the_shipped_table_says_its_date_and_source_and_prices_each_provider() -> None:
    raw = json.loads(resources.files("tapeproxy").joinpath("data", "prices.json").read_text())
    assert raw["date"] and raw["source"].count("https://") >= 4
    table = load_prices()
    for model in ("gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-pro", "mistral-large-2411"):
        assert table.price(model) is not None, model


@pytest.mark.parametrize(
    ("model", "input_price"),
    [
        ("gpt-4o-2024-08-06", 2.5),  # a dated snapshot of gpt-4o
        ("gpt-4o-2024-05-13", 5.0),  # a snapshot with a price of its own
        ("claude-sonnet-4-20250514", 3.0),
        ("models/gemini-2.0-flash-001", 0.1),
        ("gpt-4o-mini", 0.15),
    ],
)
def test_a_model_matches_exactly_or_without_its_version_suffix(
    model: str, input_price: float
) -> None:
    price = load_prices().price(model)
    assert price is not None and price.input == input_price


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o-audio-preview",
        "mistral-large-latest",
        "llama3.2",
        "",
        None,
        "gpt-4o-2099-01-01",  # a snapshot newer than the table: its price is unknown
        "claude-sonnet-4-20991231",
    ],
)
def test_a_model_without_a_price_has_no_cost(model: str | None) -> None:
    assert load_prices().cost(model, Tokens(100, 100)) is None


def test_cost_bills_cached_and_cache_written_tokens_at_their_own_prices() -> None:
    table = load_prices()
    # 1000 prompt tokens of which 400 came from the cache, 100 out: 600*2.5 + 400*1.25 + 100*10
    assert table.cost("gpt-4o", Tokens(1000, 100, cached_tokens=400)) == pytest.approx(0.003)
    # 10 plain + 100 read + 50 written, 20 out: 10*3 + 100*0.3 + 50*3.75 + 20*15
    tokens = Tokens(160, 20, cached_tokens=100, cache_write_tokens=50)
    assert table.cost("claude-sonnet-4-20250514", tokens) == pytest.approx(547.5e-6)
    assert table.cost("gpt-4o", None) is None


def test_a_cache_without_a_price_makes_the_cost_unknown(tmp_path: Path) -> None:
    own = tmp_path / "p.json"
    own.write_text(json.dumps({"models": {"m": {"input": 1, "output": 2}}}))
    table = load_prices(own)
    assert table.cost("m", Tokens(10, 10)) == pytest.approx(30e-6)
    assert table.cost("m", Tokens(10, 10, cached_tokens=5)) is None
    assert table.cost("gpt-4o", Tokens(1, 0)) is not None, "the shipped models are still there"
    assert table.sources[0] == str(own)


def test_long_prompts_take_the_long_context_prices() -> None:
    table = load_prices()
    short, long = Tokens(200_000, 1_000), Tokens(200_001, 1_000)
    assert table.cost("gemini-2.5-pro", short) == pytest.approx((200_000 * 1.25 + 10_000) / 1e6)
    assert table.cost("gemini-2.5-pro", long) == pytest.approx((200_001 * 2.5 + 15_000) / 1e6)


def test_a_user_file_that_is_no_price_table_is_a_config_error(tmp_path: Path) -> None:
    own = tmp_path / "p.json"
    own.write_text(json.dumps({"models": {"m": {"input": "cheap"}}}))
    with pytest.raises(ConfigError, match="is not a price table"):
        load_prices(own)


def test_a_cached_count_over_the_input_never_makes_a_cost_negative() -> None:
    # A usage block saying 900 of 10 prompt tokens came from the cache: 900*1.25 + 5*10, and
    # no negative plain part (a negative cost would pass any --max-cost in tapeproxy drift).
    cost = load_prices().cost("gpt-4o", Tokens(10, 5, cached_tokens=900))
    assert cost == pytest.approx((900 * 1.25 + 5 * 10) / 1e6)
