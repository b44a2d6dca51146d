"""A JSON array streamed piecewise (Gemini's streamGenerateContent without alt=sse), read item
by item without holding the whole document."""

from __future__ import annotations

import codecs
import itertools
import json
from collections.abc import Iterable, Iterator
from typing import Any

MAX_ITEM = 8 * 1024 * 1024  # an item of a streamed JSON array larger than this is not parsed


def json_items(pieces: Iterable[bytes]) -> Iterator[Any]:
    """The elements of a streamed JSON array read piece by piece, each parsed alone (a
    document too large to parse whole); it stops at an element it cannot read, or one
    larger than MAX_ITEM. A document that is no array yields nothing."""
    decoder = json.JSONDecoder()
    chars = codecs.getincrementaldecoder("utf-8")("replace")
    text, started = "", False
    for piece in itertools.chain(pieces, [None]):
        last = piece is None
        text += chars.decode(piece or b"", final=last)
        at = 0
        while True:
            while at < len(text) and (text[at].isspace() or (started and text[at] == ",")):
                at += 1
            if at == len(text):
                break
            if not started:
                if text[at] != "[":
                    return
                started, at = True, at + 1
                continue
            if text[at] == "]":
                return
            try:
                item, end = decoder.raw_decode(text, at)
            except ValueError:
                if last or len(text) - at > MAX_ITEM:
                    return
                break
            # An element is whole once a `,` or `]` follows it: a number at the end of the
            # text so far (`1` of `10`, `1.5` of `1.5e-7`) may go on in the next piece.
            after = end
            while after < len(text) and text[after].isspace():
                after += 1
            if after == len(text) or text[after] not in ",]":
                if last or len(text) - at > MAX_ITEM:
                    return
                break
            at = end
            yield item
        text = text[at:]
