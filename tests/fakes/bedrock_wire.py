"""AWS Bedrock runtime wire format: ``POST /model/{id}/converse``, ``/converse-stream``,
``/invoke`` and ``/invoke-with-response-stream``.

Converse answers Bedrock's own shapes; InvokeModel speaks the model's (Anthropic's messages,
as Claude on Bedrock does). Streams are ``application/vnd.amazon.eventstream`` messages made
by tapeproxy's codec (checked against botocore in tests/unit/test_eventstream.py): Converse's
events by ``:event-type``; InvokeModel's ``chunk`` events, each the base64 ``bytes`` of one
Anthropic event, the last with ``amazon-bedrock-invocationMetrics``. The error frame is an
exception message (``modelStreamErrorException``).
"""

from __future__ import annotations

import base64
import json
import re

from tapeproxy.exchange.eventstream import Message, encode

from . import anthropic_wire
from .wire import JsonObj, JsonOut, Out, StreamOut, WireRequest, count_tokens, dumps, split_words

PATH = re.compile(
    r"^/model/(?P<model>[^/]+)/(?P<action>converse|converse-stream|invoke|invoke-with-response-stream)$"
)
EVENTSTREAM = "application/vnd.amazon.eventstream"
PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"  # Bedrock pads events against size side channels
ANTHROPIC = {"x-api-key": "bedrock", "anthropic-version": "bedrock-2023-05-31"}


def event(kind: str, payload: JsonObj) -> bytes:
    """One eventstream event message."""
    headers = (
        (":event-type", kind),
        (":content-type", "application/json"),
        (":message-type", "event"),
    )
    return encode(Message(headers, dumps(payload)))


def exception(kind: str, message: str) -> bytes:
    """One eventstream exception message, as Bedrock fails mid-stream."""
    headers = (
        (":exception-type", kind),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    )
    return encode(Message(headers, dumps({"message": message})))


def _stream_error(_index: int) -> bytes:
    return exception("modelStreamErrorException", "The model stream failed (fake)")


def _prompt(req: WireRequest) -> str:
    messages = req.body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    blocks = content if isinstance(content, list) else []
    return " ".join(
        b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


def converse(req: WireRequest, stream: bool) -> Out:
    prompt = _prompt(req)
    text = "echo: " + prompt
    usage = {"inputTokens": count_tokens(prompt), "outputTokens": count_tokens(text)}
    usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"]
    if not stream:
        message = {"role": "assistant", "content": [{"text": text}]}
        body = {
            "output": {"message": message},
            "stopReason": "end_turn",
            "usage": usage,
            "metrics": {"latencyMs": 42},
        }
        return JsonOut(body)
    frames = [
        event("messageStart", {"p": PAD[:8], "role": "assistant"}),
        *(
            event(
                "contentBlockDelta",
                {"contentBlockIndex": 0, "delta": {"text": piece}, "p": PAD[:5]},
            )
            for piece in split_words(text)
        ),
        event("contentBlockStop", {"contentBlockIndex": 0, "p": PAD[:3]}),
        event("messageStop", {"p": PAD[:11], "stopReason": "end_turn"}),
        event("metadata", {"metrics": {"latencyMs": 42}, "p": PAD[:2], "usage": usage}),
    ]
    return StreamOut(frames, EVENTSTREAM, _stream_error)


def invoke(req: WireRequest, stream: bool) -> Out:
    body = {**req.body, "model": req.params.get("model", "anthropic.claude")}
    if stream:
        body["stream"] = True
    inner = req.__class__(body=body, seed=req.seed, headers=ANTHROPIC)
    out = anthropic_wire.messages(inner)
    if not isinstance(out, StreamOut):
        return out
    frames = []
    for index, frame in enumerate(out.frames):
        payload = json.loads(frame.split(b"data: ", 1)[1])
        if index == len(out.frames) - 1:
            payload["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": 3,
                "outputTokenCount": 4,
                "invocationLatency": 42,
                "firstByteLatency": 7,
            }
        chunk = base64.b64encode(dumps(payload)).decode()
        frames.append(event("chunk", {"bytes": chunk, "p": PAD[: index % 7]}))
    return StreamOut(frames, EVENTSTREAM, _stream_error)


def dispatch(req: WireRequest) -> Out:
    """``req.params`` holds ``model`` and ``action``."""
    action = req.params["action"]
    if action.startswith("converse"):
        return converse(req, action == "converse-stream")
    return invoke(req, action == "invoke-with-response-stream")


def error(kind: str, message: str, status: int) -> JsonOut:
    return JsonOut({"message": message}, status=status)
