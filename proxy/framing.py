"""Stream framing: cut a response into the frames its dialect defines (SSE events,
NDJSON lines, or raw chunks), keeping every byte, so replay sends the same frames."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

Dialect = Literal["sse", "ndjson", "chunks"]

_SSE_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def dialect_for(content_type: str, chunked: bool) -> Dialect | None:
    """The stream dialect of a response, or None for a plain body stored whole."""
    lowered = content_type.lower()
    if "text/event-stream" in lowered:
        return "sse"
    if "ndjson" in lowered or "jsonl" in lowered:
        return "ndjson"
    if chunked and "json" not in lowered:
        return "chunks"
    return None


class FrameSplitter:
    """Fed bytes as they arrive; returns the frames completed so far (delimiters included)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        if self.dialect == "chunks":
            return [chunk] if chunk else []
        self._buffer += chunk
        frames: list[bytes] = []
        start = 0
        while True:
            end = self._frame_end(start)
            if end is None:
                break
            frames.append(self._buffer[start:end])
            start = end
        self._buffer = self._buffer[start:]
        return frames

    def flush(self) -> list[bytes]:
        rest, self._buffer = self._buffer, b""
        return [rest] if rest else []

    def _frame_end(self, start: int) -> int | None:
        if self.dialect == "ndjson":
            index = self._buffer.find(b"\n", start)
            return None if index < 0 else index + 1
        match = _SSE_END.search(self._buffer, start)
        return None if match is None else match.end()


def frame_payload(dialect: Dialect, frame: str) -> Any:
    """The JSON a frame carries (an SSE event's data, an NDJSON line), or None."""
    if dialect == "ndjson":
        text = frame.strip()
    elif dialect == "sse":
        text = "\n".join(
            line[5:].lstrip(" ") for line in frame.splitlines() if line.startswith("data:")
        )
    else:
        return None
    if not text or text == "[DONE]":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
