"""The price table: list prices per model shipped with tapeproxy (data/prices.json), a user's
own file over them, and the cost of an exchange's tokens. A model with no price has no cost:
it is unknown, never guessed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tapeproxy.errors import ConfigError
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.problems import one_line

PER = 1_000_000  # prices are per million tokens
DIGITS = 9  # costs are rounded to a billionth of a dollar, so that sums print clean
# A dated snapshot or a version of a model: `gpt-4o-2024-08-06`, `claude-sonnet-4-20250514`,
# `gemini-2.0-flash-001`. Taken off when the full name has no price of its own.
_VERSION_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{3})$")
_DATE = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})$")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rates(_Model):
    """USD per million tokens. Without `cached_input` (or `cache_write`) an exchange that
    read from (or wrote to) a prompt cache has no known cost."""

    input: float = Field(ge=0)
    output: float = Field(0.0, ge=0)
    cached_input: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)


class LongContext(Rates):
    above: int = Field(gt=0, description="These rates apply when the prompt has more tokens.")


class ModelPrice(Rates):
    long_context: LongContext | None = None

    def rates(self, tokens: Tokens) -> Rates:
        long = self.long_context
        return long if long is not None and tokens.input_tokens > long.above else self


class PriceFile(_Model):
    date: str | None = None
    source: str | None = None
    unit: str | None = None
    models: dict[str, ModelPrice]


def cost(rates: Rates, tokens: Tokens) -> float | None:
    """USD for `tokens` at `rates`; None where a cache price the tokens need is missing."""
    if (tokens.cached_tokens and rates.cached_input is None) or (
        tokens.cache_write_tokens and rates.cache_write is None
    ):
        return None
    # Never below 0: a usage block whose cached count exceeds its input (a provider's or a
    # hand-edited one) must not make an exchange's cost negative, and so free to a budget.
    plain = max(0, tokens.input_tokens - tokens.cached_tokens - tokens.cache_write_tokens)
    total = plain * rates.input + tokens.output_tokens * rates.output
    total += tokens.cached_tokens * (rates.cached_input or 0.0)
    total += tokens.cache_write_tokens * (rates.cache_write or 0.0)
    return round(total / PER, DIGITS)


@dataclass(frozen=True)
class PriceTable:
    models: dict[str, ModelPrice]
    sources: tuple[str, ...]  # where the prices come from, each with its date
    date: str | None = None  # the newest table's date, YYYY-MM-DD

    def price(self, model: str | None) -> ModelPrice | None:
        """The model's price: its exact name, else the name without a version suffix. A
        dated snapshot newer than the table (or any, when the table has no date) takes no
        price from its base model: the table cannot know what it costs."""
        if not model:
            return None
        name = model.removeprefix("models/")
        found = self.models.get(name)
        if found is not None:
            return found
        suffix = _VERSION_SUFFIX.search(name)
        if suffix is None:
            return None
        dated = _DATE.search(suffix.group(0))
        if dated is not None and (self.date is None or "-".join(dated.groups()) > self.date):
            return None
        return self.models.get(name[: suffix.start()])

    def cost(self, model: str | None, tokens: Tokens | None) -> float | None:
        """USD for an exchange; None when its tokens or its model's price are unknown."""
        price = self.price(model)
        if tokens is None or price is None:
            return None
        return cost(price.rates(tokens), tokens)


NO_PRICES = PriceTable({}, ())


def _parsed(text: str, where: str) -> PriceFile:
    try:
        return PriceFile.model_validate(json.loads(text))
    except ValueError as exc:  # bad JSON, and pydantic's ValidationError
        raise ConfigError(
            f"price file {where} is not a price table: {one_line(exc)}; it takes "
            '{"date": ..., "source": ..., "models": {"MODEL": {"input": USD, "output": USD, '
            '"cached_input": USD, "cache_write": USD}}}, USD per million tokens'
        ) from exc


def _described(name: str, table: PriceFile) -> str:
    return name + (f" ({table.date})" if table.date else "")


def shipped() -> PriceFile:
    text = resources.files("tapeproxy").joinpath("data", "prices.json").read_text("utf-8")
    return _parsed(text, "shipped with tapeproxy")


def load_prices(user_file: Path | None = None) -> PriceTable:
    """The shipped table, with a user's file over it model by model."""
    base = shipped()
    models: dict[str, Any] = dict(base.models)
    sources = [_described("tapeproxy's table", base)]
    dates = [base.date]
    if user_file is not None:
        try:
            text = user_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"price file {user_file} cannot be read: {exc.strerror}") from exc
        own = _parsed(text, str(user_file))
        models.update(own.models)
        sources.insert(0, _described(str(user_file), own))
        dates.append(own.date)
    known = ["-".join(m.groups()) for date in dates if date and (m := _DATE.fullmatch(date))]
    return PriceTable(models, tuple(sources), max(known, default=None))
