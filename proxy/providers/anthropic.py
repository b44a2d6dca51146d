"""Anthropic: messages; `{"type": "error", "error": {...}}` errors; usage split over events."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from tapeproxy.engine.rules import MatchRules
from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.providers.base import (
    Provider,
    TextField,
    ends_with,
    error_frame,
    pick_int,
    string_at,
    strings,
    type_of,
)

# A content block delta's type -> the field it adds to the block.
DELTA_FIELDS = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}


def error_body(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def tokens(payloads: Iterable[Any]) -> Tokens | None:
    """`input_tokens` holds only the uncached prompt: the cache's reads and writes are added to
    it, so that input means the whole prompt as for every other provider."""
    # message_start carries input tokens, message_delta the running output count.
    counts: dict[str, int | None] = dict.fromkeys(_COUNTS)
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        message = payload.get("message") if payload.get("type") == "message_start" else payload
        block = message.get("usage") if isinstance(message, dict) else None
        for name in _COUNTS:
            counts[name] = pick_int(block, name) or counts[name]
    if counts["input_tokens"] is None and counts["output_tokens"] is None:
        return None
    read, written = (
        counts["cache_read_input_tokens"] or 0,
        counts["cache_creation_input_tokens"] or 0,
    )
    return Tokens(
        (counts["input_tokens"] or 0) + read + written, counts["output_tokens"] or 0, read, written
    )


_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def text(payloads: Iterable[Any]) -> str:
    """`text_delta`s of a stream, or the `text` blocks of a whole message."""
    pieces: list[str] = []
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        delta = payload.get("delta")
        if payload.get("type") == "content_block_delta" and isinstance(delta, dict):
            pieces += strings(delta.get("text")) if delta.get("type") == "text_delta" else []
        elif payload.get("type") == "message":
            blocks = payload.get("content")
            for block in blocks if isinstance(blocks, list) else []:
                pieces += strings(block.get("text")) if isinstance(block, dict) else []
    return "".join(pieces)


def text_fields(payload: Any) -> Iterator[TextField]:
    """`text_delta`, `input_json_delta` (a tool call's input) and `thinking_delta`, per block."""
    delta = payload.get("delta") if type_of(payload) == "content_block_delta" else None
    name = DELTA_FIELDS.get(str(delta.get("type"))) if isinstance(delta, dict) else None
    if name is not None and string_at(delta, name):
        yield ("anthropic", name, str(payload.get("index"))), delta, name


def final_frame(event: str, payload: Any, data: str) -> bool:
    return event == "message_stop" or type_of(payload) == "message_stop"


def stream_error(event: str, payload: Any, data: str) -> bool:
    return error_frame(event, payload, data) or type_of(payload) == "error"


def ping(event: str, payload: Any, data: str) -> bool:
    return type_of(payload) == "ping"


def limit_headers(retry_after: int) -> list[tuple[str, str]]:
    """`anthropic-ratelimit-requests-*`: the limit, none remaining, and when it resets
    (RFC 3339, as Anthropic sends it)."""
    reset = datetime.now(UTC) + timedelta(seconds=retry_after)
    return [
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("anthropic-ratelimit-requests-reset", reset.strftime("%Y-%m-%dT%H:%M:%SZ")),
    ]


def claims_bare_v1(headers: Mapping[str, str]) -> bool:
    """The Anthropic SDKs send `anthropic-version` on every request; OpenAI's never do."""
    return "anthropic-version" in headers


PROVIDER = Provider(
    name="anthropic",
    ends_streams=ends_with("/v1/messages"),
    base_url="https://api.anthropic.com",
    hosts=("api.anthropic.com",),
    rules=MatchRules(
        ignore_body=("metadata",),
        key_headers=frozenset({"anthropic-version", "anthropic-beta"}),
    ),
    error_body=error_body,
    tokens=tokens,
    text=text,
    text_fields=text_fields,
    frame_signs=FrameSigns(final=final_frame, error=stream_error, idle=ping),
    volatile_headers=frozenset({"anthropic-organization-id"}),
    volatile_prefixes=("anthropic-ratelimit-",),
    claims_bare_v1=claims_bare_v1,
    server_error_type="api_error",
    overload=(529, "overloaded_error"),
    limit_headers=limit_headers,
)
