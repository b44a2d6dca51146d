"""Anthropic Messages API wire format (``POST /v1/messages``).

Non-stream answers are compact JSON ``message`` objects. Streams are the full
named-event sequence: ``message_start``, ``content_block_start``, one ``ping``,
``content_block_delta`` (``text_delta`` or ``input_json_delta``),
``content_block_stop``, ``message_delta`` (with usage), ``message_stop``.
"""

from __future__ import annotations

from typing import Any

from .wire import (
    JsonObj,
    JsonOut,
    Out,
    StreamOut,
    WireRequest,
    all_text,
    count_tokens,
    last_dict,
    split_in,
    split_words,
    sse,
    text_of,
)

TOOL_INPUT: JsonObj = {"city": "Paris"}
TOOL_INPUT_JSON = '{"city": "Paris"}'
OVERLOADED: JsonObj = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}


def error_body(kind: str, message: str) -> JsonObj:
    """Anthropic's error envelope."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def _auth_error(headers: dict[str, str]) -> str | None:
    has_key = bool(headers.get("x-api-key")) or headers.get("authorization", "").startswith(
        "Bearer "
    )
    if not has_key:
        return "x-api-key header is required"
    if not headers.get("anthropic-version"):
        return "anthropic-version header is required"
    return None


def _first_tool_name(body: JsonObj) -> str | None:
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        name = tools[0].get("name")
        return name if isinstance(name, str) else None
    return None


def _tool_results(content: Any) -> str | None:
    """The text of the tool_result blocks of a message's content; None when it has none."""
    if not isinstance(content, list):
        return None
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return None
    return " ".join(
        r["content"] if isinstance(r.get("content"), str) else text_of(r.get("content"))
        for r in results
    )


def _usage(input_tokens: int, output_tokens: int) -> JsonObj:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _message(
    req: WireRequest, content: list[JsonObj], stop_reason: str | None, usage: JsonObj
) -> JsonObj:
    return {
        "model": req.str_field("model", "claude-sonnet-4-5"),
        "id": req.ident("msg_", length=24),
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def messages(req: WireRequest) -> Out:
    """``POST /v1/messages``: echo the last user message, or call the first tool (unless the
    last message holds tool results: then echo those, so an agent's loop ends)."""
    problem = _auth_error(dict(req.headers))
    if problem is not None:
        return JsonOut(error_body("authentication_error", problem), status=401)
    messages_ = req.body.get("messages")
    content = last_dict(messages_).get("content")
    results = _tool_results(content)
    text = "echo: " + (results if results is not None else text_of(content))
    tool = None if results is not None else _first_tool_name(req.body)
    tool_id = req.ident("toolu_", "tool", length=24)
    input_tokens = count_tokens(all_text(messages_))
    output_tokens = count_tokens(TOOL_INPUT_JSON if tool else text)
    if req.body.get("stream") is True:
        return _stream(req, text, tool, tool_id, (input_tokens, output_tokens))
    block = (
        {"type": "tool_use", "id": tool_id, "name": tool, "input": TOOL_INPUT}
        if tool
        else _text(text)
    )
    stop = "tool_use" if tool else "end_turn"
    return JsonOut(_message(req, [block], stop, _usage(input_tokens, output_tokens)))


def _text(text: str) -> JsonObj:
    return {"type": "text", "text": text}


def _block_events(text: str, tool: str | None, tool_id: str) -> tuple[JsonObj, list[JsonObj]]:
    if tool is None:
        return _text(""), [{"type": "text_delta", "text": piece} for piece in split_words(text)]
    start = {"type": "tool_use", "id": tool_id, "name": tool, "input": {}}
    pieces = ["", *split_in(TOOL_INPUT_JSON, 2)]
    return start, [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]


def _stream(
    req: WireRequest, text: str, tool: str | None, tool_id: str, tokens: tuple[int, int]
) -> StreamOut:
    start, deltas = _block_events(text, tool, tool_id)
    stop = "tool_use" if tool else "end_turn"
    events: list[tuple[str, JsonObj]] = [
        ("message_start", {"message": _message(req, [], None, _usage(tokens[0], 1))}),
        ("content_block_start", {"index": 0, "content_block": start}),
        ("ping", {}),
        *(("content_block_delta", {"index": 0, "delta": delta}) for delta in deltas),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": _delta_usage(tokens)},
        ),
        ("message_stop", {}),
    ]
    frames = [sse({"type": name, **fields}, event=name) for name, fields in events]
    return StreamOut(
        frames, "text/event-stream; charset=utf-8", lambda _n: sse(OVERLOADED, event="error")
    )


def _delta_usage(tokens: tuple[int, int]) -> JsonObj:
    return {
        "input_tokens": tokens[0],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": tokens[1],
    }
