"""OpenAI: chat completions, Responses, embeddings; `{"error": {...}}` errors."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tapeproxy.engine.rules import MatchRules
from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens, tokens_of
from tapeproxy.providers.base import (
    Provider,
    Sockets,
    TextField,
    ends_with,
    error_frame,
    pick_dict,
    pick_int,
    string_at,
    strings,
    type_of,
)

# The Responses API's last event; chat completions end with `data: [DONE]`.
RESPONSES_FINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})


def error_body(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": error_type}}


def realtime_error(error_type: str, message: str, event_id: str) -> dict[str, Any]:
    """The Realtime API's error event (`type: error`), as its SDKs read it."""
    error = {"type": error_type, "code": error_type, "message": message, "param": None}
    return {"type": "error", "event_id": event_id, "error": {**error, "event_id": None}}


def tokens(payloads: Iterable[Any]) -> Tokens | None:
    """Chat's `prompt_tokens` / `completion_tokens` (and embeddings' `prompt_tokens`), the
    Responses API's `input_tokens` / `output_tokens`; cached tokens from their details."""
    found: Tokens | None = None
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        # Responses API streams carry usage inside response.completed's `response`.
        holder = payload.get("response") if isinstance(payload.get("response"), dict) else payload
        block = holder.get("usage") if isinstance(holder, dict) else None
        details = pick_dict(block, "prompt_tokens_details", "input_tokens_details")
        found = (
            tokens_of(
                pick_int(block, "prompt_tokens", "input_tokens"),
                pick_int(block, "completion_tokens", "output_tokens"),
                pick_int(details, "cached_tokens"),
            )
            or found
        )
    return found


def text(payloads: Iterable[Any]) -> str:
    """Chat deltas (`choices[].delta.content`) or messages, Responses `output_text` deltas or
    a whole response's `output_text` parts, legacy completions' `choices[].text`."""
    pieces: list[str] = []
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        if payload.get("type") == "response.output_text.delta":
            pieces += strings(payload.get("delta"))
        elif payload.get("object") == "response":
            pieces += _output_text(payload.get("output"))
        for choice in payload.get("choices") or []:
            if isinstance(choice, dict):
                delta, message = choice.get("delta"), choice.get("message")
                pieces += strings(choice.get("text"))
                pieces += strings(
                    *(m.get("content") for m in (delta, message) if isinstance(m, dict))
                )
    return "".join(pieces)


def _output_text(output: Any) -> list[str]:
    items = output if isinstance(output, list) else []
    return [
        part["text"]
        for item in items
        if isinstance(item, dict)
        for part in item.get("content") or []
        if isinstance(part, dict)
        and part.get("type") == "output_text"
        and isinstance(part.get("text"), str)
    ]


# Responses events whose `delta` adds to one output item's text, arguments, refusal,
# reasoning, or a built-in tool's input.
RESPONSES_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
    }
)
# Chat deltas' texts: OpenAI's, and the reasoning of compatible servers (DeepSeek, vLLM,
# OpenRouter, Ollama's /v1).
CHAT_TEXTS = ("content", "refusal", "reasoning_content", "reasoning")


def text_fields(payload: Any) -> Iterator[TextField]:
    """Chat deltas' CHAT_TEXTS, tool calls' `arguments` (per choice, per call), legacy `text`;
    Responses' RESPONSES_DELTAS (per item, part and summary)."""
    if not isinstance(payload, dict):
        return
    kind = payload.get("type")
    if kind in RESPONSES_DELTAS and string_at(payload, "delta"):
        place = (
            payload.get("item_id"),
            payload.get("output_index"),
            payload.get("content_index"),
            payload.get("summary_index"),
        )
        yield ("openai", kind, *map(str, place)), payload, "delta"
    choices = payload.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        index = str(choice.get("index"))
        if string_at(choice, "text"):
            yield ("openai", "text", index), choice, "text"
        delta = choice.get("delta")
        for name in CHAT_TEXTS:
            if string_at(delta, name):
                yield ("openai", name, index), delta, name
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if string_at(function, "arguments"):
                yield ("openai", "arguments", index, str(call.get("index"))), function, "arguments"


def final_frame(event: str, payload: Any, data: str) -> bool:
    return (
        data.strip() == "[DONE]" or event in RESPONSES_FINAL or type_of(payload) in RESPONSES_FINAL
    )


def stream_error(event: str, payload: Any, data: str) -> bool:
    """Chat's `{"error": {...}}` frame; the Responses API's `error` and `response.failed`."""
    return error_frame(event, payload, data) or type_of(payload) in ("error", "response.failed")


def limit_headers(retry_after: int) -> list[tuple[str, str]]:
    """OpenAI's six `x-ratelimit-*` headers, of requests and of tokens, all used up."""
    reset = f"{retry_after}s"
    return [
        (f"x-ratelimit-{name}-{what}", value)
        for what, limit in (("requests", "60"), ("tokens", "150000"))
        for name, value in (("limit", limit), ("remaining", "0"), ("reset", reset))
    ]


FRAME_SIGNS = FrameSigns(final=final_frame, error=stream_error)


PROVIDER = Provider(
    name="openai",
    ends_streams=ends_with("/chat/completions", "/completions", "/responses"),
    base_url="https://api.openai.com",
    hosts=("api.openai.com",),
    rules=MatchRules(
        ignore_body=("user", "safety_identifier", "prompt_cache_key", "metadata"),
        key_headers=frozenset({"openai-beta"}),
    ),
    error_body=error_body,
    tokens=tokens,
    text=text,
    text_fields=text_fields,
    frame_signs=FRAME_SIGNS,
    volatile_headers=frozenset({"openai-processing-ms"}),
    rate_limit_type="rate_limit_exceeded",
    overload=(503, "server_overloaded"),
    limit_headers=limit_headers,
    sockets=Sockets(error_event=realtime_error),
)
