"""Bodies as stored: JSON as JSON, text as text, anything else base64; and back, byte for byte."""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from tapeproxy.exchange.jsontext import indent2

Kind = Literal["empty", "json", "text", "base64"]


@dataclass(frozen=True)
class Payload:
    """A body in its readable form. `style` says how to turn JSON back into the exact bytes."""

    kind: Kind
    value: Any = None
    style: str | None = None

    def to_dict(self) -> dict[str, Any] | None:
        if self.kind == "empty":
            return None
        out: dict[str, Any] = {self.kind: self.value}
        if self.style:
            out["style"] = self.style
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Payload:
        if not data:
            return EMPTY
        kind: Kind
        for kind in ("json", "text", "base64"):
            if kind in data:
                return cls(kind, data[kind], data.get("style"))
        raise ValueError(f"a body needs one of json, text or base64, got keys {sorted(data)}")


EMPTY = Payload("empty")

# How providers print JSON, as (name, indent, separators); tried in order when recording.
_LAYOUTS: tuple[tuple[str, int | None, tuple[str, str]], ...] = (
    ("compact", None, (",", ":")),
    ("indent2", 2, (",", ": ")),
    ("spaced", None, (", ", ": ")),
)


def render_json(value: Any, style: str) -> bytes:
    """The bytes `style` describes, e.g. `indent2+ascii+newline`."""
    name, *flags = style.split("+")
    layout = next((lay for lay in _LAYOUTS if lay[0] == name), None)
    if layout is None:
        raise ValueError(f"unknown JSON style {style!r}")
    ascii, end = "ascii" in flags, b"\n" if "newline" in flags else b""
    if layout[1] is not None:  # the one layout json.dumps writes in pure Python
        return indent2(value, ensure_ascii=ascii) + end
    return json.dumps(value, separators=layout[2], ensure_ascii=ascii).encode() + end


def _json_style(value: Any, raw: bytes) -> str | None:
    """The first style, in _LAYOUTS and flag order, that renders `value` as `raw`. Styles
    that cannot give `raw` are not rendered: json.dumps never ends its text with a line
    break (so `newline` is read off the end of `raw`), writes one only when indenting (an
    indented text without one is the compact text, tried before it), and writes nothing but
    ASCII with `ascii`. Usually one render instead of up to twelve."""
    newline = raw.endswith(b"\n")
    broken = b"\n" in (raw[:-1] if newline else raw)
    asciis = ("", "+ascii") if raw.isascii() else ("",)
    for name, indent, _ in _LAYOUTS:
        if (indent is not None) != broken:
            continue
        for ascii_flag in asciis:
            style = name + ascii_flag + ("+newline" if newline else "")
            try:
                if render_json(value, style) == raw:
                    return style
            except UnicodeEncodeError:  # a lone surrogate only renders escaped (+ascii)
                continue
    return None


def looks_json(content_type: str) -> bool:
    lowered = content_type.lower()
    return "json" in lowered and "ndjson" not in lowered and "jsonl" not in lowered


def textual(content_type: str) -> bool:
    """Whether a body of this type is stored as text when it is UTF-8."""
    lowered = content_type.lower()
    return (
        not lowered
        or lowered.startswith("text/")
        or any(word in lowered for word in ("json", "xml", "javascript", "x-www-form-urlencoded"))
    )


def _text(raw: bytes, content_type: str) -> str | None:
    if not textual(content_type):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


MULTIPART_BOUNDARY = b"tapeproxy-boundary"


def _fixed_boundary(raw: bytes, content_type: str) -> bytes:
    """Clients pick a random multipart boundary per request; one fixed boundary makes the
    same upload (an audio file, an image) key the same every time."""
    if not content_type.lower().startswith("multipart/"):
        return raw
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return raw.replace(value.strip('"').encode("latin-1"), MULTIPART_BOUNDARY)
    return raw


MAX_DECODED = 64 * 2**20  # a compressed request body is unpacked up to this size


def decode_content(raw: bytes, encoding: str, limit: int = MAX_DECODED) -> bytes:
    """A body with its Content-Encoding (gzip, deflate, br) undone: a gzip header holds
    the time, so the same JSON compressed a second later would key differently, and nothing
    inside could be masked. `raw` itself for an unknown encoding, corrupt data, or data that
    unpacks beyond `limit` bytes."""
    data = raw
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        unpacked = _unpacked(data, coding, limit)
        if unpacked is None:
            return raw
        data = unpacked
    return data


def _unpacked(data: bytes, coding: str, limit: int) -> bytes | None:
    if coding == "identity":
        return data
    if coding in ("gzip", "x-gzip"):
        return _inflated(data, 16 + zlib.MAX_WBITS, limit)
    if coding == "br":
        return _unbrotli(data, limit)
    if coding == "deflate":
        # HTTP's deflate is zlib-wrapped, but some clients send bare deflate data.
        found = _inflated(data, zlib.MAX_WBITS, limit)
        return found if found is not None else _inflated(data, -zlib.MAX_WBITS, limit)
    return None


def _unbrotli(data: bytes, limit: int) -> bytes | None:
    """Brotli unpacked (None past `limit`), where the `brotli` package is installed: no
    client of the server's asks for it, but cassettes from other tools hold it."""
    try:
        import brotli  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    decompressor = brotli.Decompressor()
    try:
        out = decompressor.process(data, output_buffer_limit=limit + 1)
    except brotli.error:
        return None
    if len(out) > limit or not decompressor.is_finished():
        return None
    return bytes(out)


def _inflated(data: bytes, wbits: int, limit: int) -> bytes | None:
    """Every stream in `data` (gzip allows several members one after another), unpacked, or
    None past `limit` bytes."""
    out: list[bytes] = []
    size = 0
    while data:
        inflater = zlib.decompressobj(wbits)
        try:
            chunk = inflater.decompress(data, limit - size + 1)
        except zlib.error:
            return None
        size += len(chunk)
        if size > limit or not inflater.eof:  # too big, or cut short
            return None
        out.append(chunk)
        data = inflater.unused_data
    return b"".join(out)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:20]} is too large for a float: read back, it would be Infinity")
    return value


def strict_json(raw: bytes) -> Any:
    """`raw` as JSON, refusing what is not JSON but Python's json reads: NaN, Infinity and
    -Infinity, and numbers too large for a float (read as infinite). Stored as JSON, such a
    value would be written as `NaN` or `Infinity`, and the exchange file would be no JSON for
    any other reader (`jq` reads null); a body that holds one is kept as text, as sent."""
    return json.loads(raw, parse_constant=_not_json, parse_float=_finite)


def request_payload(raw: bytes, content_type: str) -> Payload:
    """A request body for the key: JSON whenever it parses as strict JSON (canonical form is
    applied later)."""
    if not raw:
        return EMPTY
    raw = _fixed_boundary(raw, content_type)
    if looks_json(content_type) or raw[:1] in (b"{", b"["):
        try:
            return Payload("json", strict_json(raw))
        except ValueError:
            pass
    text = _text(raw, content_type)
    if text is not None:
        return Payload("text", text)
    return Payload("base64", base64.b64encode(raw).decode("ascii"))


def response_payload(raw: bytes, content_type: str) -> Payload:
    """A response body that replays to exactly `raw`: JSON only where a known layout
    reproduces every byte (key order is kept as sent), else text, else base64."""
    if not raw:
        return EMPTY
    if looks_json(content_type):
        try:
            # NaN and Infinity are refused (kept as text); a number too large for a float is
            # read as infinite, but only renders back to the bytes as `Infinity`: refused too.
            # (No parse_float here: an answer may hold a million floats.)
            value = json.loads(raw, parse_constant=_not_json)
        except (ValueError, RecursionError):  # kept as text, byte for byte
            value = None
        style = _json_style(value, raw) if value is not None else None
        if style is not None:
            return Payload("json", value, style)
    text = _text(raw, content_type)
    if text is not None:
        return Payload("text", text)
    return Payload("base64", base64.b64encode(raw).decode("ascii"))


def payload_bytes(payload: Payload) -> bytes:
    if payload.kind == "empty":
        return b""
    if payload.kind == "text":
        return str(payload.value).encode("utf-8")
    if payload.kind == "base64":
        return base64.b64decode(payload.value)
    return render_json(payload.value, payload.style or "compact")
