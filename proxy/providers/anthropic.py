"""Anthropic: messages; `{"type": "error", "error": {...}}` errors; usage split over events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llmtape.framing import FrameSigns
from llmtape.providers.base import Provider, Usage, error_frame, pick_int, type_of, usage_of
from llmtape.rules import MatchRules


def error_body(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def usage(payloads: Iterable[Any]) -> Usage | None:
    # message_start carries input tokens, message_delta the running output count.
    input_tokens = output_tokens = None
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        message = payload.get("message") if payload.get("type") == "message_start" else payload
        block = message.get("usage") if isinstance(message, dict) else None
        input_tokens = pick_int(block, "input_tokens") or input_tokens
        output_tokens = pick_int(block, "output_tokens") or output_tokens
    return usage_of(input_tokens, output_tokens)


def final_frame(event: str, payload: Any, data: str) -> bool:
    return event == "message_stop" or type_of(payload) == "message_stop"


def stream_error(event: str, payload: Any, data: str) -> bool:
    return error_frame(event, payload, data) or type_of(payload) == "error"


def ping(event: str, payload: Any, data: str) -> bool:
    return type_of(payload) == "ping"


def claims_bare_v1(headers: Mapping[str, str]) -> bool:
    """The Anthropic SDKs send `anthropic-version` on every request; OpenAI's never do."""
    return "anthropic-version" in headers


PROVIDER = Provider(
    name="anthropic",
    base_url="https://api.anthropic.com",
    rules=MatchRules(
        ignore_body=("metadata",),
        key_headers=frozenset({"anthropic-version", "anthropic-beta"}),
    ),
    error_body=error_body,
    usage=usage,
    frame_signs=FrameSigns(final=final_frame, error=stream_error, idle=ping),
    volatile_headers=frozenset({"anthropic-organization-id"}),
    volatile_prefixes=("anthropic-ratelimit-",),
    claims_bare_v1=claims_bare_v1,
)
