"""The exchange file's layout: an exchange's plain data (a `Record`, what
`Exchange.record()` gives; models.py defines the exchange) rendered as the bytes every
writer writes, whole or, for an answer too large to hold, in pieces."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Any

from tapeproxy.exchange.jsontext import indent2

# 2: a body's large strings may be blobs beside the file (exchange/blobs.py); a file with
# none is still written as 1.
SCHEMA_VERSION = 2

# An exchange file's data: str keys, JSON values (and an Outcome, a str, as its `outcome`).
Record = dict[str, Any]


class Outcome(StrEnum):
    COMPLETE = "complete"
    FAILURE_STATUS = "failure_status"  # a 429 or 5xx, kept only with --record-failures
    UPSTREAM_CUT = "upstream_cut"  # the stream ended early, kept only with --record-failures
    STREAM_ERROR = "stream_error"  # an error event mid-stream, kept only with --record-failures
    TRUNCATED = "truncated"  # a stream that ended without its final frame, likewise


class NewerSchema(ValueError):
    """A file written by a newer tapeproxy, in a schema this one does not know."""


def schema_version(data: dict[str, Any]) -> int:
    """The version a file says it is in; ValueError when it is no version tapeproxy can read."""
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerSchema(
            f"schema_version {version} was written by a newer tapeproxy (this one reads up to "
            f"{SCHEMA_VERSION}): upgrade tapeproxy (pip install -U tapeproxy)"
        )
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(
            f"schema_version {version!r} is not supported (this tapeproxy reads {SCHEMA_VERSION})"
        )
    return version


def frame(ms: int, text: str | None = None, base64: str | None = None) -> Record:
    """One stream frame as a Record holds it: its bytes as text (UTF-8) or base64."""
    if base64 is not None:
        return {"ms": ms, "base64": base64}
    return {"ms": ms} if text is None else {"ms": ms, "text": text}


def render(record: Record) -> bytes:
    """Pretty JSON with sorted keys, except the response body's JSON, which keeps the
    upstream's key order so that replay gives back the very bytes that were recorded."""
    return _render(record)[0]


def _render(record: Record) -> tuple[bytes, bool]:
    """`render`, and whether it had to escape all but ASCII."""
    try:
        return _rendered(record, ascii=False), False
    except UnicodeEncodeError:  # a lone surrogate: valid JSON only when escaped
        return _rendered(record, ascii=True), True


def _rendered(record: Record, ascii: bool) -> bytes:
    """The record with sorted keys; a JSON body, which keeps its own order, is rendered on
    its own and put in its place (orjson sorts keys in C: ~10x what a sorted copy costs)."""
    session = record.get("session")
    if isinstance(session, dict):  # a WebSocket session's frames keep their JSON's key order
        out = _rendered({**record, "session": _BODY}, ascii)
        inner = indent2(session, ensure_ascii=ascii).replace(b"\n", b"\n  ")
        at = out.index(_BODY_MARK)
        return b"".join((out[:at], inner, out[at + len(_BODY_MARK) :]))
    response = record["response"]
    body = response.get("body")
    if not body or "json" not in body:
        return indent2(record, ensure_ascii=ascii, sort_keys=True) + b"\n"
    skeleton = {**record, "response": {**response, "body": {**body, "json": _BODY}}}
    out = indent2(skeleton, ensure_ascii=ascii, sort_keys=True)
    inner = indent2(body["json"], ensure_ascii=ascii).replace(b"\n", _BODY_INDENT)
    at = out.index(_BODY_MARK)
    return b"".join((out[:at], inner, out[at + len(_BODY_MARK) :], b"\n"))


# Stands in a skeleton exchange for the one value that is written piece by piece (see
# `render_around`): random, so no recorded text can hold it.
STREAMED = f"tapeproxy-streamed-{secrets.token_hex(16)}"
FRAME_INDENT = " " * 6  # the frames list sits at exchange -> response -> frames
# A JSON body sits at exchange -> response -> body -> json: its lines indented 6 more.
_BODY = STREAMED
_BODY_MARK = json.dumps(STREAMED).encode()
_BODY_INDENT = b"\n" + b" " * 6


def render_around(
    skeleton: Record,
    middle: Callable[[bool], Iterable[bytes]],
    blobbed: Callable[[], bool] = lambda: False,
) -> Iterator[bytes]:
    """`render` of an exchange too large to hold, piece by piece: `skeleton` holds STREAMED
    where its big value goes (a body's `text` or `base64`, or one frame standing for the
    whole list) and `middle(ascii)` yields that value's JSON (`frames_json`, `string_json`),
    escaped to ASCII when the rest of the file had to be. When `blobbed()` says, once the
    middle is written, that it wrote a blob reference, the version that follows it (keys
    are sorted: `schema_version` comes after `response`) is the one that holds them."""
    out, ascii = _render(skeleton)
    mark = json.dumps(STREAMED).encode()
    at = out.index(mark)
    start, end = at, at + len(mark)
    if skeleton["response"].get("frames") is not None:  # the whole list goes, brackets included
        start, end = out.rindex(b"[", 0, at), out.index(b"]", end) + 1
    yield out[:start]
    yield from middle(ascii)
    rest = out[end:]
    if blobbed():
        rest = rest.replace(b'\n  "schema_version": 1,', b'\n  "schema_version": 2,', 1)
    yield rest


def frames_json(
    frames: Iterable[Record], ascii: bool = False, blobbed: Callable[[Any], Any] | None = None
) -> Iterator[bytes]:
    """A frames list as `render` lays it out in an exchange file (sorted keys, two spaces a
    level), written out by hand: a stream may hold a million frames. `blobbed` (a
    `Blobber.value`) puts each frame's large runs out as blobs."""
    first = True
    inner = FRAME_INDENT + "  "
    for one in frames:
        if blobbed is not None:
            one = blobbed(one)
        data = one.get("base64")
        if data is not None:
            fields = f'{inner}"base64": {_value(data, ascii, inner)},\n{inner}"ms": {one["ms"]}'
        else:
            fields = f'{inner}"ms": {one["ms"]}'
            text = one.get("text")
            if text is not None:
                fields += f',\n{inner}"text": {_value(text, ascii, inner)}'
        lead = "[\n" if first else ",\n"
        first = False
        yield f"{lead}{FRAME_INDENT}{{\n{fields}\n{FRAME_INDENT}}}".encode()
    yield b"[]" if first else f"\n{FRAME_INDENT[:-2]}]".encode()


def _value(value: Any, ascii: bool, indent: str) -> str:
    """A frame's text or base64 as its line holds it: a string, or a blob reference or join."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ascii)
    out = indent2(value, ensure_ascii=ascii, sort_keys=True).decode("utf-8")
    return out.replace("\n", "\n" + indent)


def string_json(pieces: Iterable[str], ascii: bool = False) -> Iterator[bytes]:
    """A JSON string written from its pieces, as `json.dumps` would write it whole."""
    yield b'"'
    for piece in pieces:
        yield json.dumps(piece, ensure_ascii=ascii)[1:-1].encode("utf-8")
    yield b'"'
