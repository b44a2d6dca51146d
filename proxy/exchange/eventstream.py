"""AWS eventstream (`application/vnd.amazon.eventstream`): one message's bytes decoded into its
headers and payload and encoded back byte for byte, with its prelude and message CRCs; bounded."""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass

# botocore's own limits (botocore.eventstream): a larger message is refused, never buffered.
MAX_HEADERS = 128 * 1024
MAX_PAYLOAD = 24 * 1024 * 1024
PRELUDE = 12  # total length, headers length, prelude CRC
OVERHEAD = PRELUDE + 4  # and the message CRC at the end
MAX_MESSAGE = OVERHEAD + MAX_HEADERS + MAX_PAYLOAD

# Header value types on the wire, and the fixed-size ones' struct formats.
TRUE, FALSE, BYTE, SHORT, INT, LONG, BYTES, STRING, TIMESTAMP, UUID = range(10)
_FIXED = {BYTE: ">b", SHORT: ">h", INT: ">i", LONG: ">q", TIMESTAMP: ">q"}
# The name of each typed value in readable form (strings and booleans are plain JSON).
TYPE_NAMES = {
    BYTE: "int8",
    SHORT: "int16",
    INT: "int32",
    LONG: "int64",
    BYTES: "bytes",
    TIMESTAMP: "timestamp",
    UUID: "uuid",
}
TYPES_BY_NAME = {name: kind for kind, name in TYPE_NAMES.items()}


class EventStreamError(ValueError):
    """A message that is not well-formed eventstream: its one-line reason."""


@dataclass(frozen=True)
class Typed:
    """A header value other than a string or a boolean: its wire type and its value (an int,
    or bytes for `bytes` and `uuid`)."""

    kind: int
    value: int | bytes


HeaderValue = str | bool | Typed


@dataclass(frozen=True)
class Message:
    """One eventstream message: its headers in wire order, and its payload."""

    headers: tuple[tuple[str, HeaderValue], ...]
    payload: bytes

    def header(self, name: str) -> str | None:
        """A string header's value (`:event-type`, `:message-type`), or None."""
        return next((v for k, v in self.headers if k == name and isinstance(v, str)), None)


def message_length(prelude: bytes) -> int:
    """A message's whole length from its first 12 bytes, the prelude checked: its CRC, and
    lengths within the limits. EventStreamError otherwise."""
    total, headers = struct.unpack_from(">II", prelude)
    (crc,) = struct.unpack_from(">I", prelude, 8)
    if zlib.crc32(prelude[:8]) != crc:
        raise EventStreamError("an eventstream prelude's CRC does not match its bytes")
    if headers > MAX_HEADERS:
        raise EventStreamError(f"an eventstream message's headers exceed {MAX_HEADERS} bytes")
    if total < OVERHEAD + headers:
        raise EventStreamError("an eventstream message is shorter than its own headers")
    if total - OVERHEAD - headers > MAX_PAYLOAD:
        raise EventStreamError(f"an eventstream message's payload exceeds {MAX_PAYLOAD} bytes")
    return int(total)


def decode(raw: bytes) -> Message:
    """One whole message, every length and both CRCs checked. EventStreamError otherwise."""
    if len(raw) < PRELUDE:
        raise EventStreamError("an eventstream message is cut short in its prelude")
    total = message_length(raw)
    if len(raw) != total:
        raise EventStreamError(
            f"an eventstream message says {total} bytes and has {len(raw)}: cut short or joined"
        )
    (crc,) = struct.unpack_from(">I", raw, total - 4)
    if zlib.crc32(raw[: total - 4]) != crc:
        raise EventStreamError("an eventstream message's CRC does not match its bytes")
    (size,) = struct.unpack_from(">I", raw, 4)
    headers = _headers(raw[PRELUDE : PRELUDE + size])
    return Message(headers, raw[PRELUDE + size : total - 4])


def _headers(data: bytes) -> tuple[tuple[str, HeaderValue], ...]:
    found: list[tuple[str, HeaderValue]] = []
    at = 0
    try:
        while at < len(data):
            size = data[at]
            name = data[at + 1 : at + 1 + size].decode("utf-8")
            kind = data[at + 1 + size]
            value, at = _value(data, kind, at + 2 + size)
            found.append((name, value))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise EventStreamError("an eventstream message's headers are malformed") from exc
    if at != len(data):
        raise EventStreamError("an eventstream message's headers run past their length")
    return tuple(found)


def _value(data: bytes, kind: int, at: int) -> tuple[HeaderValue, int]:
    if kind in (TRUE, FALSE):
        return kind == TRUE, at
    if kind in _FIXED:
        form = _FIXED[kind]
        return Typed(kind, struct.unpack_from(form, data, at)[0]), at + struct.calcsize(form)
    if kind == UUID:
        if at + 16 > len(data):
            raise IndexError(at)
        return Typed(UUID, data[at : at + 16]), at + 16
    if kind in (BYTES, STRING):
        (size,) = struct.unpack_from(">H", data, at)
        value = data[at + 2 : at + 2 + size]
        if len(value) != size:
            raise IndexError(at)
        return (value.decode("utf-8") if kind == STRING else Typed(BYTES, value)), at + 2 + size
    raise EventStreamError(f"an eventstream header has an unknown type {kind}")


def encode(message: Message) -> bytes:
    """A message's bytes, with its lengths and both CRCs; EventStreamError past the limits."""
    headers = b"".join(_header(name, value) for name, value in message.headers)
    if len(headers) > MAX_HEADERS or len(message.payload) > MAX_PAYLOAD:
        raise EventStreamError("an eventstream message is over botocore's limits")
    total = OVERHEAD + len(headers) + len(message.payload)
    prelude = struct.pack(">II", total, len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + message.payload
    return head + struct.pack(">I", zlib.crc32(head))


def _header(name: str, value: HeaderValue) -> bytes:
    encoded = name.encode("utf-8")
    if len(encoded) > 255:
        raise EventStreamError("an eventstream header name is longer than 255 bytes")
    lead = bytes([len(encoded)]) + encoded
    if isinstance(value, bool):
        return lead + bytes([TRUE if value else FALSE])
    if isinstance(value, str):
        return lead + bytes([STRING]) + _sized(value.encode("utf-8"))
    if value.kind in _FIXED and isinstance(value.value, int):
        return lead + bytes([value.kind]) + struct.pack(_FIXED[value.kind], value.value)
    if value.kind == UUID and isinstance(value.value, bytes) and len(value.value) == 16:
        return lead + bytes([UUID]) + value.value
    if value.kind == BYTES and isinstance(value.value, bytes):
        return lead + bytes([BYTES]) + _sized(value.value)
    raise EventStreamError(f"an eventstream header {name!r} has a value its type cannot hold")


def _sized(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise EventStreamError("an eventstream header value is longer than 65535 bytes")
    return struct.pack(">H", len(data)) + data


def split(data: bytes) -> list[bytes]:
    """A whole stream cut into its messages' bytes (each prelude checked, not yet the CRCs);
    EventStreamError for a stream that ends inside a message."""
    frames: list[bytes] = []
    at = 0
    while at < len(data):
        if len(data) - at < PRELUDE:
            raise EventStreamError("an eventstream ends inside a message's prelude")
        total = message_length(data[at : at + PRELUDE])
        if len(data) - at < total:
            raise EventStreamError("an eventstream ends inside a message")
        frames.append(data[at : at + total])
        at += total
    return frames


def readable_value(value: HeaderValue) -> object:
    """A header value as JSON: strings and booleans as they are, others as {type: value}."""
    if isinstance(value, str | bool):
        return value
    name = TYPE_NAMES[value.kind]
    if isinstance(value.value, bytes):
        shown = value.value.hex() if value.kind == UUID else base64.b64encode(value.value)
        return {name: shown if isinstance(shown, str) else shown.decode("ascii")}
    return {name: value.value}


def header_value(shown: object) -> HeaderValue:
    """readable_value undone; EventStreamError for what it never gives."""
    if isinstance(shown, str | bool):
        return shown
    if isinstance(shown, dict) and len(shown) == 1:
        ((name, value),) = shown.items()
        kind = TYPES_BY_NAME.get(name)
        try:  # a hand edit: hex or base64 that is not, a number its type cannot hold
            if kind == UUID and isinstance(value, str) and len(bytes.fromhex(value)) == 16:
                return Typed(kind, bytes.fromhex(value))
            if kind == BYTES and isinstance(value, str):
                return Typed(kind, base64.b64decode(value, validate=True))
            if kind in _FIXED and isinstance(value, int) and not isinstance(value, bool):
                struct.pack(_FIXED[kind], value)
                return Typed(kind, value)
        except (ValueError, struct.error):
            pass
    raise EventStreamError(f"not an eventstream header value: {str(shown)[:60]}")
