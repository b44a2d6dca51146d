"""OpenAI wire formats: chat completions, Responses API, embeddings, models.

Shapes follow the ``openai`` Python SDK's models (``ChatCompletion``,
``ChatCompletionChunk``, ``Response`` and its stream events,
``CreateEmbeddingResponse``, ``Model``), with every field those models require.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

from .wire import (
    CREATED,
    JsonObj,
    JsonOut,
    Out,
    StreamOut,
    WireRequest,
    all_text,
    count_tokens,
    dumps,
    last_dict,
    split_in,
    split_words,
    sse,
    text_of,
)

FINGERPRINT = "fp_fake0001"
TOOL_ARGUMENTS = '{"city":"Paris"}'
SSE_TYPE = "text/event-stream; charset=utf-8"
CHAT_ERROR: JsonObj = {
    "error": {
        "message": "The server is overloaded. Please try again later.",
        "type": "server_error",
        "param": None,
        "code": "server_overloaded",
    }
}

# --------------------------------------------------------------------------- chat


def _first_tool_name(body: JsonObj) -> str | None:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    function = tools[0].get("function")
    name = function.get("name") if isinstance(function, dict) else tools[0].get("name")
    return name if isinstance(name, str) else None


def _chat_usage(prompt: int, completion: int) -> JsonObj:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _envelope(req: WireRequest, kind: str, choices: list[JsonObj]) -> JsonObj:
    return {
        "id": req.ident("chatcmpl-"),
        "object": kind,
        "created": CREATED,
        "model": req.str_field("model", "gpt-4o-mini"),
        "choices": choices,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def chat_completions(req: WireRequest) -> Out:
    """``POST /v1/chat/completions``: echo the last message, or call the first tool (unless
    the last message is a tool's result: then echo that, so an agent's loop ends)."""
    messages = req.body.get("messages")
    last = last_dict(messages)
    text = "echo: " + text_of(last.get("content"))
    tool = None if last.get("role") == "tool" else _first_tool_name(req.body)
    call_id = req.ident("call_", "call")
    usage = _chat_usage(
        count_tokens(all_text(messages)), count_tokens(TOOL_ARGUMENTS if tool else text)
    )
    if req.body.get("stream") is True:
        return _chat_stream(req, text, tool, call_id, usage)
    message: JsonObj = {
        "role": "assistant",
        "content": None if tool else text,
        "refusal": None,
        "annotations": [],
    }
    if tool:
        function = {"name": tool, "arguments": TOOL_ARGUMENTS}
        message["tool_calls"] = [{"id": call_id, "type": "function", "function": function}]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": "tool_calls" if tool else "stop",
    }
    return JsonOut({**_envelope(req, "chat.completion", [choice]), "usage": usage}, indent=2)


def _chat_deltas(text: str, tool: str | None, call_id: str) -> list[JsonObj]:
    if tool is None:
        first: JsonObj = {"role": "assistant", "content": "", "refusal": None}
        return [first, *({"content": piece} for piece in split_words(text))]
    start = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": tool, "arguments": ""},
    }
    first = {"role": "assistant", "content": None, "tool_calls": [start], "refusal": None}
    pieces = split_in(TOOL_ARGUMENTS, 3)
    return [first, *({"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces)]


def _chat_stream(
    req: WireRequest, text: str, tool: str | None, call_id: str, usage: JsonObj
) -> StreamOut:
    options = req.body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True

    def chunk(delta: JsonObj | None, finish: str | None = None) -> JsonObj:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        out = _envelope(req, "chat.completion.chunk", choices)
        return {**out, "usage": usage if delta is None else None} if include_usage else out

    chunks = [chunk(d) for d in _chat_deltas(text, tool, call_id)]
    chunks.append(chunk({}, "tool_calls" if tool else "stop"))
    if include_usage:
        chunks.append(chunk(None))
    frames = [sse(c) for c in chunks] + [sse("[DONE]")]
    return StreamOut(frames, SSE_TYPE, lambda _n: sse(CHAT_ERROR))


# ---------------------------------------------------------------------- responses


def _responses_input_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return text_of(last_dict(value).get("content"))


def _output_message(msg_id: str, text: str | None) -> JsonObj:
    content = [] if text is None else [_text_part(text)]
    status = "in_progress" if text is None else "completed"
    return {
        "id": msg_id,
        "type": "message",
        "status": status,
        "content": content,
        "role": "assistant",
    }


def _text_part(text: str) -> JsonObj:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _response(req: WireRequest, output: list[JsonObj], usage: JsonObj | None) -> JsonObj:
    body = req.body
    return {
        "id": req.ident("resp_"),
        "object": "response",
        "created_at": CREATED,
        "status": "in_progress" if usage is None else "completed",
        "background": False,
        "completed_at": None if usage is None else CREATED + 1,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": req.str_field("model", "gpt-4o-mini"),
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def _responses_usage(prompt: int, output: int) -> JsonObj:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


def responses(req: WireRequest) -> Out:
    """``POST /v1/responses``: echo the (last) input as a single output message."""
    prompt = _responses_input_text(req.body.get("input"))
    text = "echo: " + prompt
    msg_id = req.ident("msg_", "msg", length=24)
    usage = _responses_usage(count_tokens(prompt), count_tokens(text))
    final = _response(req, [_output_message(msg_id, text)], usage)
    if req.body.get("stream") is not True:
        return JsonOut(final, indent=2)
    return _responses_stream(req, msg_id, text, final)


def _responses_stream(req: WireRequest, msg_id: str, text: str, final: JsonObj) -> StreamOut:
    started = _response(req, [], None)
    where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    events: list[tuple[str, JsonObj]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0, "item": _output_message(msg_id, None)}),
        ("response.content_part.added", {**where, "part": _text_part("")}),
        *(
            ("response.output_text.delta", {**where, "delta": p, "logprobs": []})
            for p in split_words(text)
        ),
        ("response.output_text.done", {**where, "text": text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": _text_part(text)}),
        ("response.output_item.done", {"output_index": 0, "item": _output_message(msg_id, text)}),
        ("response.completed", {"response": final}),
    ]
    frames = [
        sse({"type": name, **fields, "sequence_number": n}, event=name)
        for n, (name, fields) in enumerate(events)
    ]
    return StreamOut(frames, SSE_TYPE, _responses_error)


def _responses_error(sequence_number: int) -> bytes:
    error = {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error while processing your request.",
        "param": None,
        "sequence_number": sequence_number,
    }
    return sse(error, event="error")


# --------------------------------------------------------------- embeddings, models


def _embedding_inputs(value: Any) -> list[str]:
    if isinstance(value, list) and value and not all(isinstance(v, int) for v in value):
        return [v if isinstance(v, str) else dumps(v).decode() for v in value]
    return [value if isinstance(value, str) else dumps(value).decode()]


def _vector(text: str, as_base64: bool) -> list[float] | str:
    # Multiples of 1/256 survive the float32 round trip of the base64 encoding exactly.
    floats = [(b - 128) / 256 for b in hashlib.sha256(text.encode()).digest()[:8]]
    if not as_base64:
        return floats
    return base64.b64encode(struct.pack(f"<{len(floats)}f", *floats)).decode()


def embeddings(req: WireRequest) -> Out:
    """``POST /v1/embeddings``: 8 floats per input (base64 float32 if asked, as the SDK does)."""
    inputs = _embedding_inputs(req.body.get("input"))
    as_base64 = req.body.get("encoding_format") == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(t, as_base64)}
        for i, t in enumerate(inputs)
    ]
    tokens = sum(count_tokens(t) for t in inputs)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    model = req.str_field("model", "text-embedding-3-small")
    return JsonOut({"object": "list", "data": data, "model": model, "usage": usage}, indent=2)


def models(_req: WireRequest) -> Out:
    """``GET /v1/models``: two models."""
    data = [
        {"id": name, "object": "model", "created": CREATED, "owned_by": "system"}
        for name in ("gpt-4o-mini", "text-embedding-3-small")
    ]
    return JsonOut({"object": "list", "data": data}, indent=2)
