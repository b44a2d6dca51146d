"""Large strings of a body stored once per cassette: an exchange file's record split into
what its file holds and its blobs (each named by the SHA-256 of its UTF-8 bytes), and joined
back, so the exchange in memory is always whole (its key, its replayed bytes unchanged)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tapeproxy.exchange.layout import Record

BLOB_MIN = 64 * 1024  # a body's string of at least this many bytes (UTF-8) is a blob
# A file with a blob reference (or an escaped literal) in it is written in version 2; one
# with none in version 1, as before: byte for byte what an older tapeproxy wrote and reads.
INLINE_VERSION = 1
BLOBS_VERSION = 2
REF, SIZE = "$blob", "size"  # {"$blob": "sha256:<hex>", "size": <bytes>} stands for a string
# A body's own object that has a `$blob` or `$blob-literal` member is written inside
# {"$blob-literal": {...}}, so no recorded object is ever read as a reference.
LITERAL = "$blob-literal"
DIGEST = re.compile(r"^[0-9a-f]{64}$")
PREFIX = "sha256:"

Fetch = Callable[[str], bytes]  # a blob's bytes by its digest (hex)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Packed:
    """An exchange file's record as written, and the blobs it refers to (digest -> bytes)."""

    record: Record
    blobs: dict[str, bytes] = field(default_factory=dict)
    marked: bool = False  # whether it holds a reference or an escaped literal


def pack(record: Record) -> Packed:
    """`record` with each body's large strings put out as blobs (and its objects that look
    like a reference escaped), in the version that holds it."""
    packed = Packed(dict(record))
    for side in ("request", "response"):
        part = record.get(side)
        if isinstance(part, dict) and part.get("body"):
            packed.record[side] = {**part, "body": _out(part["body"], packed)}
    packed.record["schema_version"] = BLOBS_VERSION if packed.marked else INLINE_VERSION
    return packed


def _out(value: Any, packed: Packed) -> Any:
    if isinstance(value, str):
        if len(value) < BLOB_MIN // 4:  # 4 bytes a character at most: surely too short
            return value
        data = value.encode("utf-8", "surrogatepass")
        if len(data) < BLOB_MIN:
            return value
        digest = digest_of(data)
        packed.blobs[digest] = data
        packed.marked = True
        return {REF: PREFIX + digest, SIZE: len(data)}
    if isinstance(value, dict):
        out = {name: _out(item, packed) for name, item in value.items()}
        if REF in value or LITERAL in value:
            packed.marked = True
            return {LITERAL: out}
        return out
    if isinstance(value, list):
        return [_out(item, packed) for item in value]
    return value


def unpack(data: Record, fetch: Fetch) -> Record:
    """A version-2 file's data with each reference replaced by its blob's text (`fetch`
    reads and checks it) and each literal unescaped."""
    out = dict(data)
    for side in ("request", "response"):
        part = data.get(side)
        if isinstance(part, dict) and part.get("body"):
            out[side] = {**part, "body": _in(part["body"], fetch)}
    return out


def _in(value: Any, fetch: Fetch) -> Any:
    if isinstance(value, dict):
        digest = reference(value)
        if digest is not None:
            data = fetch(digest)
            if len(data) != value[SIZE]:
                raise ValueError(f"blob {digest} holds {len(data)} bytes, not {value[SIZE]}")
            return data.decode("utf-8", "surrogatepass")
        if len(value) == 1 and isinstance(value.get(LITERAL), dict):
            return {name: _in(item, fetch) for name, item in value[LITERAL].items()}
        return {name: _in(item, fetch) for name, item in value.items()}
    if isinstance(value, list):
        return [_in(item, fetch) for item in value]
    return value


def reference(value: dict[str, Any]) -> str | None:
    """The digest a reference names, or None when `value` is no reference."""
    if len(value) != 2 or not isinstance(value.get(REF), str):
        return None
    size, named = value.get(SIZE), str(value[REF])
    if not isinstance(size, int) or isinstance(size, bool) or not named.startswith(PREFIX):
        return None
    digest = named[len(PREFIX) :]
    if not DIGEST.match(digest):
        raise ValueError(f"a blob reference names {named!r}, not sha256:<64 hex digits>")
    return digest


def held(bodies: list[Any]) -> tuple[set[str], bool]:
    """What `pack` would give of a record with these bodies, without building its file: the
    digests of the blobs its large strings are, and whether it is written in version 2 (a
    blob, or a literal). Walked by type alone: `verify` asks it of every file."""
    digests: set[str] = set()
    marked = False
    stack = [body for body in bodies if body]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            marked = marked or REF in value or LITERAL in value
            stack.extend(value.values())
        elif kind is list:
            stack.extend(value)
        elif kind is str and len(value) >= BLOB_MIN // 4:
            data = value.encode("utf-8", "surrogatepass")
            if len(data) >= BLOB_MIN:
                digests.add(digest_of(data))
    return digests, marked or bool(digests)
