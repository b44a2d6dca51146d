"""Large strings of a body or a stream's frames stored once per cassette: an exchange file's
record split into what its file holds and its blobs (each named by the SHA-256 of its UTF-8
bytes), and joined back, so the exchange in memory is always whole (its key, its replayed
bytes unchanged). A blob is a run of a string between two double quotes (or its ends): an
image's base64 in an SSE frame's JSON, or in an answer kept as text, is a blob of its own."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
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
# {"$blob-join": [text, reference, text, ...]} stands for a string with a blob inside it.
JOIN = "$blob-join"
MARKS = (REF, LITERAL, JOIN)
# Where blobs may be: each body, a stream's frames, a WebSocket session's frames.
PLACES = (("request", "body"), ("response", "body"), ("response", "frames"), ("session", "frames"))
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
    for side, name in PLACES:
        part = record.get(side)
        if isinstance(part, dict) and part.get(name):
            packed.record[side] = {**packed.record[side], name: _out(part[name], packed)}
    packed.record["schema_version"] = BLOBS_VERSION if packed.marked else INLINE_VERSION
    return packed


def pack_value(value: Any) -> Packed:
    """One value (a frame) as its file holds it, in `record["value"]`, and its blobs."""
    packed = Packed({})
    packed.record["value"] = _out(value, packed)
    return packed


def long_runs(value: str) -> Iterator[tuple[int, int]]:
    """Where each run of a string between two double quotes (or its ends) is, of BLOB_MIN
    // 4 characters or more (only those may be BLOB_MIN bytes): the last quote within that
    many characters skips every shorter run before it at once (a text of short strings
    costs a step per BLOB_MIN // 4 characters, not a step of Python per quote)."""
    least, pos = BLOB_MIN // 4, 0
    while pos + least <= len(value):
        quote = value.rfind('"', pos, pos + least)
        if quote >= 0:
            pos = quote + 1
            continue
        end = value.find('"', pos + least)
        end = len(value) if end < 0 else end
        yield pos, end
        pos = end + 1


def _out(value: Any, packed: Packed) -> Any:
    if isinstance(value, str):
        if len(value) < BLOB_MIN // 4:  # 4 bytes a character at most: surely too short
            return value
        return _split(value, packed)
    if isinstance(value, dict):
        out = {name: _out(item, packed) for name, item in value.items()}
        if REF in value or LITERAL in value or JOIN in value:
            packed.marked = True
            return {LITERAL: out}
        return out
    if isinstance(value, list):
        return [_out(item, packed) for item in value]
    return value


def _split(value: str, packed: Packed) -> Any:
    """A long string as its file holds it: itself (no run of BLOB_MIN bytes), a reference
    (one run, the whole string), or a join of its texts and references."""
    items: list[Any] = []
    at = 0
    for start, end in long_runs(value):
        data = value[start:end].encode("utf-8", "surrogatepass")
        if len(data) < BLOB_MIN:
            continue
        if start > at:
            items.append(value[at:start])
        digest = digest_of(data)
        packed.blobs[digest] = data
        items.append({REF: PREFIX + digest, SIZE: len(data)})
        at = end
    if not items:
        return value
    if at < len(value):
        items.append(value[at:])
    packed.marked = True
    return items[0] if len(items) == 1 else {JOIN: items}


def unpack(data: Record, fetch: Fetch) -> Record:
    """A version-2 file's data with each reference replaced by its blob's text (`fetch`
    reads and checks it) and each literal unescaped."""
    out = dict(data)
    for side, name in PLACES:
        part = data.get(side)
        if isinstance(part, dict) and part.get(name):
            out[side] = {**out[side], name: _in(part[name], fetch)}
    return out


def _in(value: Any, fetch: Fetch) -> Any:
    if isinstance(value, dict):
        digest = reference(value)
        if digest is not None:
            return _fetched(digest, value[SIZE], fetch)
        if len(value) == 1 and isinstance(value.get(JOIN), list):
            return "".join(_joined(item, fetch) for item in value[JOIN])
        if len(value) == 1 and isinstance(value.get(LITERAL), dict):
            return {name: _in(item, fetch) for name, item in value[LITERAL].items()}
        return {name: _in(item, fetch) for name, item in value.items()}
    if isinstance(value, list):
        return [_in(item, fetch) for item in value]
    return value


def _fetched(digest: str, size: int, fetch: Fetch) -> str:
    data = fetch(digest)
    if len(data) != size:
        raise ValueError(f"blob {digest} holds {len(data)} bytes, not {size}")
    return data.decode("utf-8", "surrogatepass")


def _joined(item: Any, fetch: Fetch) -> str:
    if isinstance(item, str):
        return item
    digest = reference(item) if isinstance(item, dict) else None
    if digest is None:
        raise ValueError(f"a {JOIN} holds texts and blob references, not {type(item).__name__}")
    return _fetched(digest, item[SIZE], fetch)


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


def held(values: list[Any], hashed: bool = True) -> tuple[set[str], bool]:
    """What `pack` would give of a record with these bodies and frames, without building its
    file: the digests of the blobs its large runs are, and whether it is written in version
    2 (a blob, or a literal). Walked by type alone: `verify` asks it of every file. Without
    `hashed`, no digest is worked out (whether it is marked is all that is asked)."""
    digests: set[str] = set()
    marked = False
    stack = [value for value in values if value]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            marked = marked or any(mark in value for mark in MARKS)
            stack.extend(value.values())
        elif kind is list:
            stack.extend(value)
        elif kind is str and len(value) >= BLOB_MIN // 4:
            for start, end in long_runs(value):
                data = value[start:end].encode("utf-8", "surrogatepass")
                if len(data) >= BLOB_MIN:
                    marked = True
                    if hashed:
                        digests.add(digest_of(data))
        if marked and not hashed:
            break
    return digests, marked or bool(digests)
