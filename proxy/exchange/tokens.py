"""Token counts of one answer, or of many added up: a plain value every provider reads into."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tokens:
    """Tokens as a provider bills them. `input_tokens` counts every prompt token: those read
    from a prompt cache (`cached_tokens`) and those written to one (`cache_write_tokens`,
    Anthropic's cache creation) are part of it, whatever the provider's own usage block says."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def stored(self) -> dict[str, int]:
        """What an exchange file keeps as its `usage`."""
        # int(): a count given as `true` is 1, as the model reads it (exchangefile.py).
        return {"input_tokens": int(self.input_tokens), "output_tokens": int(self.output_tokens)}


def tokens_of(
    input_tokens: int | None,
    output_tokens: int | None,
    cached_tokens: int | None = None,
    cache_write_tokens: int | None = None,
) -> Tokens | None:
    """The counts a usage block holds, or None when it holds neither input nor output."""
    if input_tokens is None and output_tokens is None:
        return None
    return Tokens(
        input_tokens or 0, output_tokens or 0, cached_tokens or 0, cache_write_tokens or 0
    )
