"""Ollama: /api/chat and /api/generate, streamed as NDJSON; counts on the `done` line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens, tokens_of
from tapeproxy.providers.base import (
    Provider,
    TextField,
    ends_with,
    error_frame,
    generic_error,
    pick_int,
    string_at,
    strings,
)


def tokens(payloads: Iterable[Any]) -> Tokens | None:
    found: Tokens | None = None
    for payload in payloads:
        if isinstance(payload, dict) and payload.get("done") is True:
            found = tokens_of(
                pick_int(payload, "prompt_eval_count"), pick_int(payload, "eval_count")
            )
    return found


def text(payloads: Iterable[Any]) -> str:
    """`/api/chat`'s `message.content`, `/api/generate`'s `response`, line after line."""
    pieces: list[str] = []
    for payload in payloads:
        if isinstance(payload, dict):
            message = payload.get("message")
            pieces += strings(payload.get("response"))
            pieces += strings(message.get("content")) if isinstance(message, dict) else []
    return "".join(pieces)


def text_fields(payload: Any) -> Iterator[TextField]:
    """`/api/chat`'s `message.content` and `/api/generate`'s `response`, and the `thinking`
    of each, line after line."""
    if not isinstance(payload, dict):
        return
    for name in ("response", "thinking"):
        if string_at(payload, name):
            yield ("ollama", name), payload, name
    message = payload.get("message")
    for name in ("content", "thinking"):
        if string_at(message, name):
            yield ("ollama", "message", name), message, name


def final_frame(event: str, payload: Any, data: str) -> bool:
    return isinstance(payload, dict) and payload.get("done") is True


PROVIDER = Provider(
    name="ollama",
    ends_streams=ends_with("/api/chat", "/api/generate"),
    base_url="http://127.0.0.1:11434",
    error_body=generic_error,
    tokens=tokens,
    text=text,
    text_fields=text_fields,
    frame_signs=FrameSigns(final=final_frame, error=error_frame),
)
