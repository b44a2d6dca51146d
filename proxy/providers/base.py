"""What a provider is to llmtape: where it lives, what keys a request, how errors and usage look."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from llmtape.rules import MatchRules

Usage = dict[str, int]


def generic_error(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {"error": {"type": error_type, "message": message}}


def no_usage(payloads: Iterable[Any]) -> Usage | None:
    return None


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str
    # Default match rules: the headers that change the answer, the body fields that never do.
    rules: MatchRules = field(default_factory=MatchRules)
    # The provider's error shape for (llmtape error type, message, HTTP status).
    error_body: Callable[[str, str, int], dict[str, Any]] = generic_error
    # Token usage from the decoded JSON payloads of a body or of every stream frame, in order.
    usage: Callable[[Iterable[Any]], Usage | None] = no_usage

    def with_url(self, url: str) -> Provider:
        return replace(self, base_url=url.rstrip("/"))


def pick_int(source: Any, *names: str) -> int | None:
    """The first of `names` in `source` that holds an int (usage fields vary by endpoint)."""
    if isinstance(source, dict):
        for name in names:
            value = source.get(name)
            if isinstance(value, int):
                return value
    return None


def usage_of(input_tokens: int | None, output_tokens: int | None) -> Usage | None:
    if input_tokens is None and output_tokens is None:
        return None
    return {"input_tokens": input_tokens or 0, "output_tokens": output_tokens or 0}
