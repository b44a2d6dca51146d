"""The exchange file on disk: its pydantic model, SCHEMA_VERSION, and its exact byte layout."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from llmtape.jsontext import indent2

SCHEMA_VERSION = 1


class Outcome(StrEnum):
    COMPLETE = "complete"
    FAILURE_STATUS = "failure_status"  # a 429 or 5xx, kept only with --record-failures
    UPSTREAM_CUT = "upstream_cut"  # the stream ended early, kept only with --record-failures
    STREAM_ERROR = "stream_error"  # an error event mid-stream, kept only with --record-failures
    TRUNCATED = "truncated"  # a stream that ended without its final frame, likewise


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Frame(_Model):
    """One stream frame: its bytes (as text where they are UTF-8) and when it came."""

    ms: int = Field(ge=0, description="Milliseconds from the start of the response.")
    text: str | None = None
    base64: str | None = None


class StoredRequest(_Model):
    method: str
    upstream: str
    path: str
    query: list[tuple[str, str]] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | None = None


class StoredResponse(_Model):
    status: int
    headers: dict[str, str | list[str]] = Field(default_factory=dict)
    body: dict[str, Any] | None = None
    dialect: str | None = None
    frames: list[Frame] | None = None
    end_ms: int | None = Field(
        default=None, ge=0, description="For a cut answer: milliseconds from its start to the cut."
    )


class Exchange(_Model):
    schema_version: int = SCHEMA_VERSION
    key: str
    ordinal: int = Field(ge=1)
    seq: int = Field(ge=0, description="Position of the request in the run that recorded it.")
    rules: str
    outcome: Outcome = Outcome.COMPLETE
    usage: dict[str, int] | None = None
    request: StoredRequest
    response: StoredResponse
    _read_as: int = PrivateAttr(default=SCHEMA_VERSION)

    @property
    def read_as(self) -> int:
        """The schema_version of the file it was loaded from (older ones are migrated)."""
        return self._read_as


class NewerSchema(ValueError):
    """A file written by a newer llmtape, in a schema this one does not know."""


Migration = Callable[[dict[str, Any]], dict[str, Any]]
# Version N -> the step that turns a version-N file into a version-N+1 one, as in mitmproxy's
# io/compat.py. A format change bumps SCHEMA_VERSION and adds its `migrate_N_to_N+1` here;
# none has been needed yet, so the chain is empty while SCHEMA_VERSION is 1.
MIGRATIONS: dict[int, Migration] = {}


def schema_version(data: dict[str, Any]) -> int:
    """The version a file says it is in; ValueError when it is no version llmtape can read."""
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerSchema(
            f"schema_version {version} was written by a newer llmtape (this one reads up to "
            f"{SCHEMA_VERSION}): upgrade llmtape (pip install -U llmtape)"
        )
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(
            f"schema_version {version!r} is not supported (this llmtape reads {SCHEMA_VERSION})"
        )
    return version


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a file up to SCHEMA_VERSION in memory, one migrate_N_to_N+1 step at a time."""
    version = schema_version(data)
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise ValueError(f"schema_version {version} is not supported: no migration from it")
        data = step(data)
        version = data["schema_version"]
    return data


def _sorted(value: Any, verbatim: Any) -> Any:
    if value is verbatim:
        return value
    if isinstance(value, dict):
        return {k: _sorted(value[k], verbatim) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item, verbatim) for item in value]
    return value


def dump_exchange(exchange: Exchange) -> bytes:
    """Pretty JSON with sorted keys, except the response body's JSON, which keeps the
    upstream's key order so that replay gives back the very bytes that were recorded."""
    # Python mode: JSON mode would turn a body's NaN or Infinity into null.
    return _dump(exchange)[0]


def _dump(exchange: Exchange) -> tuple[bytes, bool]:
    """`dump_exchange`, and whether it had to escape all but ASCII."""
    data = exchange.model_dump(exclude_none=True)
    body = data["response"].get("body") or {}
    value = _sorted(data, body.get("json"))
    try:
        return indent2(value) + b"\n", False
    except UnicodeEncodeError:  # a lone surrogate: valid JSON only when escaped
        return indent2(value, ensure_ascii=True) + b"\n", True


def load_exchange(raw: bytes) -> Exchange:
    """An exchange file read back, migrated from an older schema_version where it is one."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("an exchange file holds one JSON object")
    read_as = schema_version(data)
    exchange = Exchange.model_validate(migrate(data))
    exchange._read_as = read_as
    return exchange


# Stands in a skeleton exchange for the one value that is written piece by piece (see
# `dump_around`): random, so no recorded text can hold it.
STREAMED = f"llmtape-streamed-{secrets.token_hex(16)}"
FRAME_INDENT = " " * 6  # the frames list sits at exchange -> response -> frames


def dump_around(skeleton: Exchange, middle: Callable[[bool], Iterable[bytes]]) -> Iterator[bytes]:
    """`dump_exchange` of an exchange too large to hold, piece by piece: `skeleton` holds
    STREAMED where its big value goes (a body's `text` or `base64`, or one frame standing for
    the whole list) and `middle(ascii)` yields that value's JSON (`frames_json`,
    `string_json`), escaped to ASCII when the rest of the file had to be."""
    out, ascii = _dump(skeleton)
    mark = json.dumps(STREAMED).encode()
    at = out.index(mark)
    start, end = at, at + len(mark)
    if skeleton.response.frames is not None:  # the whole list goes, brackets included
        start, end = out.rindex(b"[", 0, at), out.index(b"]", end) + 1
    yield out[:start]
    yield from middle(ascii)
    yield out[end:]


def frames_json(frames: Iterable[Frame], ascii: bool = False) -> Iterator[bytes]:
    """A frames list as `dump_exchange` lays it out in an exchange file (sorted keys, two
    spaces a level), written out by hand: a stream may hold a million frames."""
    first = True
    inner = FRAME_INDENT + "  "
    for frame in frames:
        if frame.base64 is not None:
            fields = f'{inner}"base64": {json.dumps(frame.base64)},\n{inner}"ms": {frame.ms}'
        else:
            fields = f'{inner}"ms": {frame.ms}'
            if frame.text is not None:
                fields += f',\n{inner}"text": {json.dumps(frame.text, ensure_ascii=ascii)}'
        lead = "[\n" if first else ",\n"
        first = False
        yield f"{lead}{FRAME_INDENT}{{\n{fields}\n{FRAME_INDENT}}}".encode()
    yield b"[]" if first else f"\n{FRAME_INDENT[:-2]}]".encode()


def string_json(pieces: Iterable[str], ascii: bool = False) -> Iterator[bytes]:
    """A JSON string written from its pieces, as `json.dumps` would write it whole."""
    yield b'"'
    for piece in pieces:
        yield json.dumps(piece, ensure_ascii=ascii)[1:-1].encode("utf-8")
    yield b'"'
