"""Secrets split across stream frames: each text a client joins across frames (a choice's
content, a tool call's arguments, a content block: the providers' `text_fields`) is matched
whole. A match is laid back over the frames it touches: the marker where it starts, the rest
of its characters taken out of the frames after, each frame still a valid frame of its
dialect (the same event lines, valid JSON, only the changed string literals written anew).
Then each frame's raw text is scrubbed alone, as before."""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tapeproxy.exchange import eventframes
from tapeproxy.exchange.layout import Record
from tapeproxy.providers import stream_text_fields
from tapeproxy.redaction.percent import decoded_with_starts, escaped, raw_spans
from tapeproxy.redaction.secrets import MARKER

Patterns = Sequence[re.Pattern[str]]
# A JSON string literal, and the colon after it when it is an object's key.
LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"(\s*:)?')
LINE = re.compile(r"(\r\n|\r|\n)")
ROUNDS = 8  # a replacement may make a new match (`x` + `[redacted]`): scrub again, a bit
# A stream too large to hold is scrubbed a window of frames at a time, each window starting
# with the end of the one before: a key split across frames at a window's edge is whole in one.
WINDOW_BYTES = 1024 * 1024
CARRY_BYTES = 64 * 1024


def scrub_pieces(pieces: list[str], patterns: Patterns) -> list[str]:
    """The pieces of one text with every match in their join replaced: MARKER in the piece
    where it starts, its other characters taken out of the pieces it runs on into. Their
    join is then what scrubbing the joined text gives."""
    for _ in range(ROUNDS):
        before = pieces
        joined = "".join(pieces)
        if escaped(joined):  # a key percent-encoded (tapeproxy.redaction.percent)
            plain, starts = decoded_with_starts(joined)
            found = [m.span() for p in patterns for m in p.finditer(plain) if m.end() > m.start()]
            if found:
                pieces = _laid(pieces, raw_spans(starts, found))
        for pattern in patterns:
            found = [m.span() for m in pattern.finditer("".join(pieces)) if m.end() > m.start()]
            if found:
                pieces = _laid(pieces, found)
        if pieces == before:
            break
    return pieces


def _laid(pieces: list[str], spans: list[tuple[int, int]]) -> list[str]:
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    new = list(pieces)
    for start, end in reversed(spans):  # from the right: earlier offsets stay true
        first = True
        index = max(bisect.bisect_right(starts, start) - 1, 0)  # (not every piece: a stream
        while index < len(pieces) and starts[index] < end:  # of keys was quadratic)
            a, b = starts[index], starts[index] + len(pieces[index])
            if b > start and a != b:
                low, high = max(a, start) - a, min(b, end) - a
                new[index] = new[index][:low] + (MARKER if first else "") + new[index][high:]
                first = False
            index += 1
    return new


@dataclass
class Parsed:
    """A frame's (or a document's) JSON, the JSON text it was read from, and its strings in
    document order as read (to write back only the literals that change), kept only once
    something in it is about to change."""

    payload: Any
    text: str
    strings: list[str] | None = None

    @classmethod
    def read(cls, text: str) -> Parsed | None:
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError):  # nested past the parser's depth: left as text
            return None
        if not isinstance(payload, dict | list):
            return None
        return cls(payload, text)

    def keep(self) -> None:
        """Note its strings as read, before the first change."""
        if self.strings is None:
            self.strings = list(leaves(self.payload))

    def written(self) -> str:
        """The JSON text with the strings changed since `keep` written anew."""
        after = list(leaves(self.payload))
        literals = [m for m in LITERAL.finditer(self.text) if not m.group(1)]
        if self.strings is not None and len(literals) == len(self.strings) == len(after):
            out, last = [], 0
            for match, old, new in zip(literals, self.strings, after, strict=True):
                if old == new:
                    continue
                if json.loads(match.group(0)) != old:
                    break  # not the literal it should be: write the whole anew
                out += [self.text[last : match.start()], _dumps(new, match.group(0).isascii())]
                last = match.end()
            else:
                return "".join(out) + self.text[last:]
        return json.dumps(self.payload, ensure_ascii=self.text.isascii(), separators=(",", ":"))


def _dumps(value: str, ascii: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii)


def leaves(value: Any, numbers: bool = False) -> Iterator[str]:
    """The strings of a JSON value in document order (object keys not counted), and with
    `numbers` its numbers as JSON text (what a scrubber's patterns see of them)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item, numbers)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item, numbers)
    elif numbers and isinstance(value, int | float) and not isinstance(value, bool):
        yield json.dumps(value)


Worth = Callable[[str], bool]  # whether a text holds a match at all (a quick test)


def scrub_joined(
    payloads: Iterable[tuple[int, Any, Parsed]], patterns: Patterns, worth: Worth
) -> set[int]:
    """Scrub each text the payloads (numbered, each with the Parsed it is in) carry across
    frames, in place; the numbers of the payloads changed."""
    channels: dict[Hashable, list[tuple[int, Parsed, Any, str | int]]] = {}
    for number, payload, parsed in payloads:
        for channel, holder, name in stream_text_fields(payload):
            channels.setdefault(channel, []).append((number, parsed, holder, name))
    changed = set()
    for fields in channels.values():
        pieces = [holder[name] for _, _, holder, name in fields]
        if not worth("".join(pieces)):
            continue
        for (number, parsed, holder, name), old, new in zip(
            fields, pieces, scrub_pieces(pieces, patterns), strict=True
        ):
            if new != old:
                parsed.keep()
                holder[name] = new
                changed.add(number)
    return changed


@dataclass
class Frame:
    """An SSE event or an NDJSON line split around the one JSON value it carries."""

    head: str
    parsed: Parsed
    tail: str
    message: bool = False  # an eventstream message: its text is the readable record

    @property
    def payload(self) -> Any:
        """What the provider's text fields are read in (an eventstream message's payload)."""
        if self.message:
            return eventframes.payload_of(self.parsed.payload)
        return self.parsed.payload

    @classmethod
    def read(cls, text: str, dialect: str | None) -> Frame | None:
        if dialect == "eventstream":  # its text is one JSON object: the message readable
            parsed = Parsed.read(text)
            return None if parsed is None else cls("", parsed, "", message=True)
        if dialect == "ndjson":
            body = text.rstrip("\r\n")
            start = len(body) - len(body.lstrip())
            parsed = Parsed.read(body)
            return None if parsed is None else cls(text[:start], parsed, text[len(body) :])
        if dialect != "sse":
            return None
        pieces = LINE.split(text)  # lines and their ends, alternating
        data = [i for i in range(0, len(pieces), 2) if pieces[i].startswith("data:")]
        if len(data) != 1:  # a value over several data lines: its frames are scrubbed alone
            return None
        line = pieces[data[0]]
        start = 6 if line.startswith("data: ") else 5
        parsed = Parsed.read(line[start:])
        if parsed is None:
            return None
        head = "".join(pieces[: data[0]]) + line[:start]
        return cls(head, parsed, "".join(pieces[data[0] + 1 :]))

    def written(self) -> str:
        return self.head + self.parsed.written() + self.tail


def joined_frames(
    frames: list[Record], dialect: str | None, patterns: Patterns, worth: Worth
) -> list[Record]:
    """SSE or NDJSON frames with each text they carry across frames scrubbed whole."""
    if not patterns:
        return frames
    read = [Frame.read(f["text"], dialect) if f.get("text") else None for f in frames]
    numbered = ((n, one.payload, one.parsed) for n, one in enumerate(read) if one is not None)
    changed = scrub_joined(numbered, patterns, worth)
    return [
        {**f, "text": one.written()} if n in changed and one is not None else f
        for n, (f, one) in enumerate(zip(frames, read, strict=True))
    ]


def joined_document(text: str, patterns: Patterns, worth: Worth) -> str:
    """A streamed JSON document (Gemini's array of chunks) with each text its items carry
    across items scrubbed whole."""
    parsed = Parsed.read(text) if patterns else None
    if parsed is None:
        return text
    items = parsed.payload if isinstance(parsed.payload, list) else [parsed.payload]
    numbered = ((n, item, parsed) for n, item in enumerate(items))
    return parsed.written() if scrub_joined(numbered, patterns, worth) else text


def frame_text(
    text: str, dialect: str | None, json_text: Callable[[str], str], plain: Callable[[str], str]
) -> str:
    """One frame's raw text scrubbed alone: an SSE event's data lines and an NDJSON line as
    JSON (keeping the frame valid), a raw chunk (or a piece of a JSON document) as text."""
    if dialect == "eventstream":  # its text is the message readable: its payload is scrubbed
        return eventframes.scrubbed(text, json_text, plain)
    if dialect == "ndjson":
        body = text.rstrip("\r\n")
        return json_text(body) + text[len(body) :] if body.strip() else text
    if dialect != "sse":
        return plain(text)
    pieces = LINE.split(text)
    for index in range(0, len(pieces), 2):
        line = pieces[index]
        if line.startswith("data:"):
            start = 6 if line.startswith("data: ") else 5
            pieces[index] = line[:start] + json_text(line[start:])
    return "".join(pieces)


def windowed(
    frames: Iterable[Record], scrub: Callable[[list[Record]], list[Record]]
) -> Iterator[Record]:
    """The frames of a stream too large to hold, scrubbed by `scrub` about WINDOW_BYTES at a
    time. A window's last CARRY_BYTES of frames (at most half of them) start the next one,
    scrubbed again (scrubbing is idempotent), so a text that runs across a window's edge is
    matched whole in the next window."""
    window: list[Record] = []
    size = 0
    for frame in frames:
        window.append(frame)
        size += _size(frame)
        if size < WINDOW_BYTES:
            continue
        window = scrub(window)
        keep = size = 0
        while keep < len(window) // 2 and size < CARRY_BYTES:
            keep += 1
            size += _size(window[-keep])
        yield from window[: len(window) - keep]
        window = window[len(window) - keep :]
    if window:
        yield from scrub(window)


def _size(frame: Record) -> int:
    return len(frame.get("text") or frame.get("base64") or "")


def spaced(pieces: Iterable[str], most: int = WINDOW_BYTES) -> Iterator[str]:
    """A long text's pieces cut again just after their last line end or comma (no key
    format's match holds one: a space or a quote may be in one, `"x-amz-security-token":
    "..."`), so a key split across two pieces is whole in one when each is scrubbed alone;
    a stretch of over `most` characters with none is cut where it is."""
    rest = ""
    for piece in pieces:
        text = rest + piece
        cut = max(text.rfind(end) for end in "\n\r,") + 1
        if len(text) - cut > most:
            cut = len(text)
        if cut:
            yield text[:cut]
        rest = text[cut:]
    yield rest
