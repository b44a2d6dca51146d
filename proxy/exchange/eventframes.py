"""An eventstream message stored readable: its headers and its payload as JSON text (the base64
`bytes` of a Bedrock InvokeModel chunk decoded too), replayed to the very bytes it came as."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from tapeproxy.exchange.bodies import Payload, payload_bytes, response_payload
from tapeproxy.exchange.eventstream import (
    EventStreamError,
    Message,
    decode,
    encode,
    header_value,
    readable_value,
)

# The readable form is one JSON object: {"headers": {...}, "payload": {json|text|base64,
# style}}, and "bytes": STYLE when the payload's `bytes` member is shown decoded.
CHUNK = "bytes"


def readable(raw: bytes) -> str | None:
    """One message's readable text, or None when it is not a well-formed message, or its
    readable form would not give back these very bytes (a header name twice, say)."""
    try:
        message = decode(raw)
    except EventStreamError:
        return None
    record: dict[str, Any] = {
        "headers": {name: readable_value(value) for name, value in message.headers},
    }
    content_type = message.header(":content-type") or "application/json"
    payload = response_payload(message.payload, content_type)
    style = _decoded_chunk(payload)
    if style is not None:
        inner, chunk_style = style
        payload = Payload(payload.kind, {**payload.value, CHUNK: inner}, payload.style)
        record[CHUNK] = chunk_style
    record["payload"] = payload.to_dict() or {"text": ""}
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        same = wire(text) == raw
    except EventStreamError:
        same = False
    return text if same else None


def _decoded_chunk(payload: Payload) -> tuple[Any, str] | None:
    """An InvokeModel stream chunk's `bytes` (base64 of the model's own JSON), decoded, and
    the style that writes it back; None for any other payload."""
    value = payload.value
    if payload.kind != "json" or not isinstance(value, dict):
        return None
    chunk = value.get(CHUNK)
    if not isinstance(chunk, str):
        return None
    try:
        inner = response_payload(base64.b64decode(chunk, validate=True), "application/json")
    except binascii.Error:
        return None
    if inner.kind != "json" or inner.style is None:
        return None
    return inner.value, inner.style


def _record(text: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as exc:  # nested past the parser's depth: no JSON here
        raise EventStreamError("an eventstream frame's text is not JSON") from exc
    if not isinstance(record, dict) or not isinstance(record.get("headers"), dict):
        raise EventStreamError("an eventstream frame's text holds no headers object")
    if not isinstance(record.get("payload"), dict):
        raise EventStreamError("an eventstream frame's text holds no payload object")
    return record


def _payload(record: dict[str, Any]) -> Payload:
    try:
        payload = Payload.from_dict(record["payload"])
    except ValueError as exc:
        raise EventStreamError(f"an eventstream frame's payload: {exc}") from exc
    style = record.get(CHUNK)
    if style is not None:
        if not (isinstance(style, str) and isinstance(payload.value, dict)):
            raise EventStreamError("an eventstream frame's decoded bytes hold no JSON object")
        inner = payload_bytes(Payload("json", payload.value.get(CHUNK), style))
        chunk = base64.b64encode(inner).decode("ascii")
        payload = Payload(payload.kind, {**payload.value, CHUNK: chunk}, payload.style)
    return payload


def wire(text: str) -> bytes:
    """A stored frame's text back to the message's bytes; EventStreamError for a text that is
    no readable message (a hand edit gone wrong)."""
    record = _record(text)
    headers = tuple((name, header_value(v)) for name, v in record["headers"].items())
    try:
        body = payload_bytes(_payload(record))
    except (ValueError, TypeError) as exc:
        raise EventStreamError(f"an eventstream frame's payload: {exc}") from exc
    return encode(Message(headers, body))


def payload_of(record: Any) -> Any:
    """The JSON a readable message's payload holds (a chunk's decoded `bytes`), in place:
    changing it changes the record."""
    payload = record.get("payload") if isinstance(record, dict) else None
    value = payload.get("json") if isinstance(payload, dict) else None
    if record.get(CHUNK) is not None and isinstance(value, dict):
        return value.get(CHUNK)
    return value


def scrubbed(text: str, json_text: Callable[[str], str], plain: Callable[[str], str]) -> str:
    """A stored frame's text scrubbed where the message says something: the JSON its payload
    carries (a chunk's decoded `bytes`) by `json_text` (field paths as in an SSE event's data,
    and patterns), a text payload and string header values by `plain`. The record's own
    layout is never touched, so it still encodes; a text that is no record, by `plain`."""
    try:
        record = _record(text)
    except EventStreamError:
        return plain(text)
    before = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    payload, chunk = record["payload"], record.get(CHUNK) is not None
    holder = payload.get("json") if chunk else payload
    name = CHUNK if chunk else "json"
    if isinstance(holder, dict) and name in holder:
        holder[name] = json.loads(json_text(json.dumps(holder[name], ensure_ascii=False)))
    elif isinstance(payload.get("text"), str):
        payload["text"] = plain(payload["text"])
    headers = record["headers"]
    record["headers"] = {k: plain(v) if isinstance(v, str) else v for k, v in headers.items()}
    after = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    return text if after == before else after


def meaning(text: str) -> tuple[str, Any, str]:
    """What a stored frame says, as a FrameTest reads it: its event (the `:event-type`, or
    the `:exception-type` of an exception), its JSON (a chunk's decoded `bytes`), and its
    payload's text; ("", None, "") for a text that is no readable message."""
    try:
        record = _record(text)
        payload = Payload.from_dict(record["payload"])
    except ValueError:  # EventStreamError too
        return "", None, ""
    headers = record["headers"]
    event = headers.get(":event-type") or headers.get(":exception-type") or ""
    value = payload.value if payload.kind == "json" else None
    if record.get(CHUNK) is not None and isinstance(value, dict):
        value = value.get(CHUNK)
    data = payload.value if payload.kind == "text" else ""
    return (event if isinstance(event, str) else ""), value, str(data or "")
