"""A WebSocket session's frames: each as its exchange file holds it (JSON text stored as
JSON, sent back byte-equal), spooled to an anonymous temp file as the session runs (a long
audio session is never held in memory), and a client frame in the form it is matched in."""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from tapeproxy.engine.rules import MatchRules, parse_path, without_path
from tapeproxy.exchange.blobs import BLOB_MIN, held
from tapeproxy.exchange.blobstream import Blobber
from tapeproxy.exchange.bodies import Payload, payload_bytes, response_payload
from tapeproxy.exchange.jsontext import indent2
from tapeproxy.exchange.model import SocketFrame
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.upstream.protocol import Message

TokenReader = Callable[[Iterable[Any]], Tokens | None]
FRAME_ITEM = b"\n" + b" " * 6  # a frame's lines sit at exchange -> session -> frames
# What a frame costs its file beyond its payload (direction, type, time), counted against
# --max-record: a flood of empty frames is bounded too (each is held in memory on replay).
FRAME_COST = 64


def _may_mark(message: Message) -> bool:
    """Whether a frame may hold a large run or an object like a blob reference (else it
    surely holds none: not walked)."""
    mark = "$blob" if isinstance(message, str) else b"$blob"
    return len(message) >= BLOB_MIN // 4 or mark in message  # type: ignore[operator]


def readable(message: Message) -> str | None:
    """A frame as text where it is some: a text frame's, or a binary frame's UTF-8 holding a
    JSON object (Gemini Live sends every message so); None for other bytes (audio, which
    may start with `{` and be valid UTF-8 too: silence is NULs)."""
    if isinstance(message, str):
        return message
    if message.lstrip()[:1] != b"{":
        return None
    try:
        text = message.decode("utf-8")
        json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError too
        return None
    return text


def frame_record(direction: str, message: Message, ms: int, scrubber: Scrubber) -> dict[str, Any]:
    """One frame as the file holds it, scrubbed as HTTP bodies are (a binary frame of JSON
    too: readable, and sent back as bytes)."""
    text = readable(message)
    if text is None:
        assert isinstance(message, bytes)
        encoded = base64.b64encode(message).decode("ascii")
        return {"direction": direction, "type": "binary", "ms": ms, "base64": encoded}
    text = scrubber.json_text(text) if scrubber else text
    payload = response_payload(text.encode("utf-8", "surrogatepass"), "application/json")
    kind = "text" if isinstance(message, str) else "binary"
    out: dict[str, Any] = {"direction": direction, "type": kind, "ms": ms}
    if payload.kind == "json" and payload.value is not None:
        out["json"] = payload.value
        out["style"] = payload.style
    else:
        out["text"] = text
    return out


def message_of(frame: SocketFrame) -> Message:
    """A recorded frame as it goes on the wire again: the very bytes (or text) recorded."""
    if frame.base64 is not None:
        return base64.b64decode(frame.base64)
    if frame.text is not None:
        return frame.text.encode("utf-8") if frame.type == "binary" else frame.text
    data = payload_bytes(Payload("json", frame.json_, frame.style))
    return data if frame.type == "binary" else data.decode("utf-8")


def decoded(message: Message) -> Any:
    """A frame's JSON (`readable`), else the frame itself (text, or binary as base64)."""
    text = readable(message)
    if text is None:
        assert isinstance(message, bytes)
        return {"base64": base64.b64encode(message).decode("ascii")}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def matchable(value: Any, event_ids: frozenset[str], rules: MatchRules) -> Any:
    """A client frame as it is matched: its event ids and the fields the rules drop left out."""
    if isinstance(value, dict) and event_ids:
        value = {k: v for k, v in value.items() if k not in event_ids}
    for path in rules.ignore_body:
        value = without_path(value, parse_path(path))
    return value


def recorded_value(frame: SocketFrame) -> Any:
    if frame.base64 is not None:
        return {"base64": frame.base64}
    return frame.text if frame.text is not None else frame.json_


class Tape:
    """The frames of a session under way, in a temp file, one JSON line each (never all in
    memory: a long audio session is written to its exchange file frame by frame, `pieces`);
    `size` counts their payload bytes and FRAME_COST each, and past `limit` (--max-record)
    nothing more is kept; `tokens` sums the usage events (`read` is the provider's reader
    of one)."""

    def __init__(self, limit: int, scrubber: Scrubber, read: TokenReader) -> None:
        self.started = time.monotonic()
        self.limit = limit
        self.scrubber = scrubber
        self.read = read
        self.tokens: Tokens | None = None
        self.size = 0
        self.over = False
        self.count = 0
        self.marked = False  # a frame holds a large run, or an object that looks like a blob's
        self._file: IO[bytes] | None = tempfile.TemporaryFile()  # noqa: SIM115 (kept open)

    def ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def add(self, direction: str, message: Message) -> None:
        self.size += len(message) + FRAME_COST
        self.count += 1
        if self.size > self.limit:
            self.over = True
        if self.over or self._file is None:
            return
        record = frame_record(direction, message, self.ms(), self.scrubber)
        # Known now: the file's version is written before its frames (a large run: 2).
        self.marked = self.marked or (_may_mark(message) and held([record], False)[1])
        # ASCII: a JSON frame may hold a lone surrogate (`"\ud83d"`), which UTF-8 cannot.
        self._file.write(json.dumps(record).encode("ascii") + b"\n")
        event = record.get("json")
        if direction == "server" and isinstance(event, dict):
            found = self.read([event])
            if found is not None:
                self.tokens = found if self.tokens is None else self.tokens + found

    def pieces(self, ascii: bool, blobber: Blobber | None = None) -> Iterator[bytes]:
        """The frames as their exchange file lays them out (the items of the session's
        `frames` list, exchange -> session -> frames), read back one at a time in a writer
        thread as the file is written (`dump_around`), their large runs put out as blobs."""
        if self._file is None:
            return
        self._file.seek(0)
        for index, line in enumerate(self._file):
            record = json.loads(line)
            if blobber is not None:
                record = blobber.value(record)
            try:
                text = indent2(record, ensure_ascii=ascii)
            except UnicodeEncodeError:  # a lone surrogate: valid JSON only escaped
                text = indent2(record, ensure_ascii=True)
            yield (b"," + FRAME_ITEM if index else b"") + text.replace(b"\n", FRAME_ITEM)

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
