"""What a recorded answer says, read from its body or frames whatever form they were stored
in: its JSON payloads, its token counts, its model, the assistant's text."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tapeproxy.engine import jsonrpc
from tapeproxy.exchange.framing import Dialect, frame_payload, json_document
from tapeproxy.exchange.model import Exchange, Frame, SocketFrame
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.providers import BUILTIN
from tapeproxy.providers.base import Provider

T = TypeVar("T")
# A Google-style model path: `/v1beta/models/gemini-2.0-flash:generateContent`.
_MODEL_PATH = re.compile(r"/models/([^/:]+)")


def frame_text(frame: Frame) -> str:
    """A frame's bytes as text (a frame stored as base64 decoded with replacement)."""
    if frame.text is not None:
        return frame.text
    return base64.b64decode(frame.base64 or "").decode("utf-8", "replace")


def payloads(exchange: Exchange) -> list[Any]:
    """The decoded JSON of a body, or of every stream frame in order. A JSON body stored as
    text (its layout could not be reproduced byte for byte) is decoded all the same, and a
    JSON array (Gemini's `streamGenerateContent` without `alt=sse`) gives its items."""
    response = exchange.response
    if exchange.session is not None:  # a WebSocket session: the server's JSON events
        frames = exchange.session.frames
        return [f.json_ for f in frames if f.direction == "server" and f.json_ is not None]
    if response.frames is not None:
        if response.dialect in ("sse", "ndjson", "eventstream"):
            dialect = cast(Dialect, response.dialect)
            decoded = [frame_payload(dialect, frame_text(f)) for f in response.frames]
            return [payload for payload in decoded if payload is not None]
        return json_document("".join(map(frame_text, response.frames)).encode()) or []
    body = response.body or {}
    if "json" in body:
        value = body["json"]
    elif isinstance(body.get("text"), str):
        try:
            value = json.loads(body["text"])
        except (ValueError, RecursionError):
            return []
    else:
        return []
    return value if isinstance(value, list) else [value]


def readers(upstream: str) -> list[Provider]:
    """The providers whose readers apply: the built-in of that name; for an upstream of the
    user's (a gateway may speak any dialect), every built-in, the first that finds wins."""
    known = BUILTIN.get(upstream)
    return [known] if known is not None else list(BUILTIN.values())


# Each reader below takes `decoded`, the exchange's payloads() where the caller has them: a
# stream's frames are then decoded once for all it asks, not once for each (tapeproxy ls).
def _payloads(exchange: Exchange, decoded: list[Any] | None) -> list[Any]:
    return payloads(exchange) if decoded is None else decoded


def _first(
    exchange: Exchange,
    read: Callable[[Provider, list[Any]], T | None],
    decoded: list[Any] | None = None,
) -> T | None:
    found = _payloads(exchange, decoded)
    for provider in readers(exchange.request.upstream):
        value = read(provider, found)
        if value:
            return value
    return None


def tokens(exchange: Exchange, decoded: list[Any] | None = None) -> Tokens | None:
    """The answer's token counts from its provider's usage block (a stream's last one); the
    file's own `usage` where the answer holds none that a provider reads."""
    if exchange.session is not None:
        found = _session_tokens(exchange, _payloads(exchange, decoded))
    else:
        found = _first(exchange, lambda provider, payloads: provider.tokens(payloads), decoded)
    stored = exchange.usage
    if found is None and stored:
        return Tokens(stored.get("input_tokens", 0), stored.get("output_tokens", 0))
    return found


def _session_tokens(exchange: Exchange, events: list[Any]) -> Tokens | None:
    """A session's tokens: its usage events (one per turn: `response.done`, `usageMetadata`)
    summed."""
    total: Tokens | None = None
    for event in events:
        for provider in readers(exchange.request.upstream):
            found = provider.tokens([event])
            if found is not None:
                total = found if total is None else total + found
                break
    return total


def text(exchange: Exchange, decoded: list[Any] | None = None) -> str:
    """The assistant's text: a whole answer's, or a stream's pieces joined."""
    return _first(exchange, lambda provider, payloads: provider.text(payloads), decoded) or ""


def model(exchange: Exchange, decoded: list[Any] | None = None) -> str | None:
    """The model that answered: the answer's own `model` (`modelVersion` for Gemini), which
    names the dated snapshot an alias resolved to; else the request's, or its model path."""
    for payload in _payloads(exchange, decoded):
        found = _named_model(payload)
        if found:
            return found
    if exchange.session is not None:
        return _session_model(exchange)
    body = exchange.request.body or {}
    asked = body.get("json")
    if isinstance(asked, dict) and isinstance(asked.get("model"), str):
        return str(asked["model"])
    match = _MODEL_PATH.search(exchange.request.path)
    return match.group(1) if match else None


def _session_model(exchange: Exchange) -> str | None:
    """A session's model: its upgrade's `?model=` (Realtime), else its setup message's
    (Gemini Live's `setup.model`, `models/` dropped)."""
    for name, value in exchange.request.query:
        if name == "model" and value:
            return value
    assert exchange.session is not None
    for frame in exchange.session.frames:
        setup = frame.json_.get("setup") if isinstance(frame.json_, dict) else None
        if isinstance(setup, dict) and isinstance(setup.get("model"), str):
            return str(setup["model"]).removeprefix("models/")
    return None


def _named_model(payload: Any) -> str | None:
    if not isinstance(payload, dict):
        return None
    for holder in (payload, payload.get("message"), payload.get("response")):
        if isinstance(holder, dict):
            for name in ("model", "modelVersion"):
                if isinstance(holder.get(name), str) and holder[name]:
                    return str(holder[name])
    return None


def tool_call(exchange: Exchange, decoded: list[Any] | None = None) -> dict[str, Any] | None:
    """An MCP tool call's name, arguments and result; None for any other exchange."""
    found = _payloads(exchange, decoded)
    return jsonrpc.tool_call((exchange.request.body or {}).get("json"), found)


def joined_frames(exchange: Exchange) -> str:
    """A stream's frames as one text, every byte (for answers no provider reads text from)."""
    return "".join(map(frame_text, exchange.response.frames or []))


def session_lines(exchange: Exchange, width: int = 160) -> list[str]:
    """A WebSocket session as lines, one a frame (`+ms client|server payload`, long ones
    cut), then how it ended: what `tapeproxy show --full` prints."""
    if exchange.session is None:
        return []
    lines = []
    for frame in exchange.session.frames:
        shown = socket_frame_text(frame)
        if len(shown) > width:
            shown = shown[: width - 3] + "..."
        lines.append(f"+{frame.ms}ms {frame.direction:6} {shown}")
    end = exchange.session.end
    closed = f"closed {end.code} by the {end.by}" if end.by else f"closed {end.code}"
    lines.append(
        f"+{end.ms}ms {'cut (no close frame)' if end.cut else closed} {end.reason}".rstrip()
    )
    return lines


def socket_frame_text(frame: SocketFrame) -> str:
    """A WebSocket frame as a reader sees it: its text, its JSON, or its size when binary."""
    if frame.base64 is not None:
        return f"<binary, {len(base64.b64decode(frame.base64)):,} bytes>"
    if frame.text is not None:
        return frame.text
    return json.dumps(frame.json_, ensure_ascii=False)
