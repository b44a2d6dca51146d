"""OpenAI: chat completions, Responses, embeddings; `{"error": {...}}` errors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmtape.framing import FrameSigns
from llmtape.providers.base import Provider, Usage, error_frame, pick_int, type_of, usage_of
from llmtape.rules import MatchRules

# The Responses API's last event; chat completions end with `data: [DONE]`.
RESPONSES_FINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})


def error_body(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": error_type}}


def usage(payloads: Iterable[Any]) -> Usage | None:
    found: Usage | None = None
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        # Responses API streams carry usage inside response.completed's `response`.
        holder = payload.get("response") if isinstance(payload.get("response"), dict) else payload
        block = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(block, dict):
            found = usage_of(
                pick_int(block, "prompt_tokens", "input_tokens"),
                pick_int(block, "completion_tokens", "output_tokens"),
            )
    return found


def final_frame(event: str, payload: Any, data: str) -> bool:
    return (
        data.strip() == "[DONE]" or event in RESPONSES_FINAL or type_of(payload) in RESPONSES_FINAL
    )


def stream_error(event: str, payload: Any, data: str) -> bool:
    """Chat's `{"error": {...}}` frame; the Responses API's `error` and `response.failed`."""
    return error_frame(event, payload, data) or type_of(payload) in ("error", "response.failed")


FRAME_SIGNS = FrameSigns(final=final_frame, error=stream_error)


PROVIDER = Provider(
    name="openai",
    base_url="https://api.openai.com",
    rules=MatchRules(
        ignore_body=("user", "safety_identifier", "prompt_cache_key", "metadata"),
        key_headers=frozenset({"openai-beta"}),
    ),
    error_body=error_body,
    usage=usage,
    frame_signs=FRAME_SIGNS,
    volatile_headers=frozenset({"openai-processing-ms"}),
)
