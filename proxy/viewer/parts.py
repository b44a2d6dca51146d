"""A huge exchange shown in parts: each text an exchange page shows cut to a bound (scrubbed
past the cut, so no secret is shown in half), its frames a page at a time, and each text's
whole by name (`request`, `response`, `message.I.J`, `answer.I.J`, `frame.N`) for the
download route. Values only: the page stays small whatever the exchange holds."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tapeproxy.errors import ConfigError
from tapeproxy.exchange.answers import frame_text, socket_frame_text
from tapeproxy.exchange.model import Exchange
from tapeproxy.viewer.conversation import Message

CUT = 20_000  # characters of one text (a message, a body) an exchange page shows
FRAME_CUT = 2_000  # characters of one stream frame on the timeline
SOCKET_CUT = 400  # characters of one WebSocket frame (an audio delta runs to many KB)
FRAMES = 500  # frames one page of the timeline shows
MESSAGES = 500  # messages of a request (or an answer) a page shows; the rest: its body
# Texts shown in all past which each further one is cut to PEEK: many large messages make
# no large page either.
BUDGET, PEEK = 200_000, 500
# Scrubbed this far past a cut: a key that crosses the cut is masked whole before the cut.
MARGIN = 4_096
_PART = re.compile(r"(request|response)|(message|answer)\.(\d{1,9})\.(\d{1,9})|frame\.(\d{1,9})")

Scrub = Callable[[str], str]


class BadPart(ConfigError):
    """A page's `part` or `start` that names nothing it could show (400)."""

    status = 400


@dataclass(frozen=True)
class Shown:
    """A text as a page shows it: whole, or its first characters (`cut`) of `size`."""

    text: str
    size: int
    whole: str = ""  # the part's name for the download route, where it is cut

    @property
    def cut(self) -> bool:
        return len(self.text) < self.size


def shown(text: str, limit: int, scrub: Scrub, whole: str = "") -> Shown:
    if len(text) <= limit:
        return Shown(text, len(text), whole)
    return Shown(_head(lambda n: text[:n], len(text), limit, scrub), len(text), whole)


def _head(first: Callable[[int], str], size: int, limit: int, scrub: Scrub) -> str:
    """The first `limit` characters of a text of `size`, scrubbed from a head of it that holds
    MARGIN more once scrubbed: keys masked shorten the head, and what then came into view
    could end in half a key (which no key format matches). Longer heads only where it did."""
    n = limit + MARGIN
    while True:
        kept = scrub(first(n))
        if len(kept) >= limit + MARGIN or n >= size:
            return kept[:limit]
        n *= 2


def pretty(value: Any, limit: int, scrub: Scrub, whole: str) -> Shown:
    """A body pretty-printed as JSON, cut: encoded a piece at a time, only the first kept
    (the rest counted), so a 60 MB body is never one more 60 MB string."""
    if value is None or isinstance(value, str):
        return shown("(empty)" if value is None else value, limit, scrub, whole)
    text, size = _encoded(value, limit + MARGIN)
    if size <= limit:
        return Shown(text, size, whole)

    def first(n: int) -> str:
        return text[:n] if n <= len(text) else _encoded(value, n)[0]

    return Shown(_head(first, size, limit, scrub), size, whole)


def _encoded(value: Any, keep: int) -> tuple[str, int]:
    """The first `keep` characters of a value's pretty JSON, and the whole's length."""
    kept: list[str] = []
    size = held = 0
    for piece in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(value):
        size += len(piece)
        if held < keep:
            kept.append(piece[: keep - held])
            held += len(kept[-1])
    return "".join(kept), size


def pretty_whole(value: Any) -> str:
    if value is None:
        return "(empty)"
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def cut_messages(messages: list[Message], side: str, scrub: Scrub) -> list[Message]:
    """The first MESSAGES, each text cut to CUT (to PEEK past BUDGET in all), named
    `side.I.J` for its whole."""
    out = []
    spent = 0
    for i, message in enumerate(messages[:MESSAGES]):
        parts = []
        for j, part in enumerate(message.parts):
            seen = shown(part.text, CUT if spent < BUDGET else PEEK, scrub, f"{side}.{i}.{j}")
            spent += len(seen.text)
            if seen.cut:
                part = replace(part, text=seen.text, size=seen.size, whole=seen.whole)
            parts.append(part)
        out.append(Message(message.role, parts))
    return out


def start_of(value: str | None, total: int) -> int:
    """The first frame of a page of the timeline: 0 when not given; a frame number, else
    BadPart (never int() of thousands of digits: past 18 it is past the end anyway)."""
    if value is None:
        return 0
    if not (value.isascii() and value.isdigit()):
        raise BadPart(f"start must be a frame number (0 or more), not {_quoted(value)}")
    start = int(value) if len(value) <= 18 else 10**18
    if start and not total:
        raise BadPart(f"start {value[:40]}: this exchange has no frames to page through")
    if start and start >= total:
        raise BadPart(f"start {value[:40]} is past the last frame ({max(total - 1, 0)})")
    return start


def _quoted(value: str) -> str:
    """A value given, quoted whole (the page's scrub sees a key in it whole) or, long, not at
    all: cut, a key's head matches no key format and would be shown."""
    return repr(value) if len(value) <= 40 else f"a text of {len(value):,} characters"


@dataclass(frozen=True)
class Named:
    """A part's name read: its kind and its numbers."""

    kind: str
    numbers: tuple[int, ...]


def named(value: str | None) -> Named:
    found = _PART.fullmatch(value or "")
    if found is None:
        text = _quoted(value or "")
        raise BadPart(
            f"part must be request, response, message.I.J, answer.I.J or frame.N, not {text}"
        )
    if found[1]:
        return Named(found[1], ())
    if found[2]:
        return Named(found[2], (int(found[3]), int(found[4])))
    return Named("frame", (int(found[5]),))


def frame_of(exchange: Exchange, index: int) -> str | None:
    """The `index`-th frame's whole text on the timeline (a session's with who sent it)."""
    if exchange.session is not None:
        frames = exchange.session.frames
        if 0 <= index < len(frames):
            frame = frames[index]
            return f"{frame.direction}: {socket_frame_text(frame)}"
        return None
    stream = exchange.response.frames or []
    return frame_text(stream[index]) if 0 <= index < len(stream) else None


def part_of(messages: list[Message], numbers: tuple[int, ...]) -> str | None:
    i, j = numbers
    if i < len(messages) and j < len(messages[i].parts):
        return messages[i].parts[j].text
    return None
