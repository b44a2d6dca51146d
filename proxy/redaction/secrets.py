"""The one secret filter: what never reaches a cassette, a log line or a key. Which names hold a
credential is tapeproxy.redaction.credentials; here they are taken out of headers, queries,
bodies (JSON, forms, multipart), URLs and free text."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlencode

from tapeproxy.exchange.bodies import MULTIPART_BOUNDARY, Payload
from tapeproxy.redaction.credentials import is_secret_field, is_secret_form_field, is_secret_query

# engine/keying.py and engine/capture.py import it from here.
from tapeproxy.redaction.credentials import is_secret_header as is_secret_header

MARKER = "[redacted]"
# Top-level body fields that hold the conversation. What a user, a model or a tool said is
# the request itself: a tool result `{"secret": "1234"}` changes the answer, so nothing in
# them is masked by name, only the HTTP headers objects a tool call may carry.
_CONVERSATION = frozenset(
    {
        "messages",
        "contents",
        "input",
        "prompt",
        "system",
        "instructions",
        "systemInstruction",
        "system_instruction",
    }
)
# A form is a query sent as a body: strictly `name=value` pairs joined by `&`. A stored text
# body of this shape is masked as a form, since the content type is not stored.
_FORM = re.compile(r"[^=&\s]+=[^&\s]*(?:&[^=&\s]+=[^&\s]*)*")
_DELIMITER = b"--" + MULTIPART_BOUNDARY
# Whole 3-byte groups of the delimiter: the base64 text of any body that starts with it
# starts with this, so a stored multipart body is recognised without decoding it.
_MULTIPART_B64 = base64.b64encode(_DELIMITER[: len(_DELIMITER) // 3 * 3]).decode("ascii")
_PART_NAME = re.compile(
    rb'^content-disposition:[^\r\n]*?;[ \t]*name[ \t]*=[ \t]*(?:"([^"]*)"|([^;\s]+))',
    re.IGNORECASE | re.MULTILINE,
)
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@")


def looks_form(text: str) -> bool:
    """Whether a text body has a form's shape: `name=value` pairs joined by `&`."""
    return _FORM.fullmatch(text) is not None


def digest(value: str) -> str:
    """What a credential-like key header is stored and keyed as: it tells values apart, and
    the value itself never reaches the disk."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers without any credential, names lowercased."""
    return {k.lower(): v for k, v in headers.items() if not is_secret_header(k)}


def redact_query(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Query pairs without key-like parameters (Gemini's `?key=`, signed URLs, ...)."""
    return [(k, v) for k, v in pairs if not is_secret_query(k)]


def redact_json(value: Any) -> Any:
    """`value` with every string or number held directly under a credential-named field
    (or in a list there) replaced by MARKER, at any depth. Booleans and nulls stay
    (`"secret": true` is a flag), and so does an object: under `password` it is a tool's
    schema, not a secret, and its own fields are checked by name. Nothing in the
    conversation is masked by name; an object under `headers` is HTTP headers, and its
    credential headers are masked wherever it is."""
    if not isinstance(value, dict):
        return _masked(value, False, False)
    return _masked_object(value, content=False, headers=False, top=True)


def _masked_object(
    value: dict[Any, Any], *, content: bool, headers: bool, top: bool = False
) -> dict[Any, Any]:
    out = {}
    for key, item in value.items():
        name = str(key)
        inside = content or (top and name in _CONVERSATION)
        secret = (headers and is_secret_header(name)) or (not inside and is_secret_field(name))
        out[key] = _masked(item, secret, inside, name.lower() == "headers")
    return out


def _masked(value: Any, hidden: bool, content: bool, headers: bool = False) -> Any:
    if isinstance(value, dict):
        return _masked_object(value, content=content, headers=headers)
    if isinstance(value, list):
        return [_masked(item, hidden, content, headers) for item in value]
    if hidden and isinstance(value, str | int | float) and not isinstance(value, bool):
        return MARKER
    return value


def redact_form(text: str) -> str:
    """An x-www-form-urlencoded body with credential values replaced; every other byte kept."""
    pieces = []
    for piece in text.split("&"):
        name, sep, _ = piece.partition("=")
        secret = is_secret_form_field(unquote_plus(name))
        pieces.append(f"{name}={MARKER}" if sep and secret else piece)
    return "&".join(pieces)


def redact_multipart(raw: bytes) -> bytes:
    """A multipart body, its boundary already made tapeproxy's fixed one, with the content of
    every credential-named part (an `apikey` field) replaced; every other byte kept."""
    pieces = raw.split(_DELIMITER)
    return _DELIMITER.join([pieces[0], *(_masked_part(piece) for piece in pieces[1:])])


def _masked_part(piece: bytes) -> bytes:
    """One part between two delimiters: CRLF, its headers, a blank line, the content, CRLF."""
    head, blank, content = piece.partition(b"\r\n\r\n")
    found = _PART_NAME.search(head)
    if not blank or not content.endswith(b"\r\n") or found is None:
        return piece
    name = (found.group(1) or found.group(2) or b"").decode("utf-8", "replace")
    return head + blank + MARKER.encode() + b"\r\n" if is_secret_form_field(name) else piece


def redact_payload(payload: Payload, content_type: str) -> Payload:
    """A request body as it may be stored and keyed: credentials in it replaced by MARKER, so
    the key ignores them and every developer's own key replays the same cassette.
    `content_type` is "" for a stored body: forms and multipart bodies are told by shape."""
    lowered = content_type.lower()
    if payload.kind == "json":
        return Payload("json", redact_json(payload.value), payload.style)
    if payload.kind == "text":
        text = str(payload.value)
        if "x-www-form-urlencoded" in lowered or looks_form(text):
            return Payload("text", redact_form(text), payload.style)
        return _redacted_json_text(payload, text)
    if payload.kind == "base64" and (
        lowered.startswith("multipart/") or str(payload.value).startswith(_MULTIPART_B64)
    ):
        return _redacted_multipart(payload)
    return payload


def _redacted_json_text(payload: Payload, text: str) -> Payload:
    """A body kept as text though Python reads it as JSON (it holds NaN, Infinity or a number
    too large for a float, so it is no strict JSON) with its credentials masked as a JSON
    body's are. Written anew, compact, only when one was: otherwise left as sent."""
    if text.lstrip()[:1] not in ("{", "["):
        return payload
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON at all (cut short, say): nothing to mask
        return payload
    masked = redact_json(value)
    # Equal when nothing was masked: a NaN left in place is the same object, and containers
    # compare their items by identity first.
    if masked == value:
        return payload
    written = json.dumps(masked, ensure_ascii=text.isascii(), separators=(",", ":"))
    return Payload("text", written, payload.style)


def _redacted_multipart(payload: Payload) -> Payload:
    try:
        raw = base64.b64decode(payload.value)
    except ValueError:  # a damaged cassette file: left as it is, nothing here to mask
        return payload
    masked = redact_multipart(raw)
    if masked == raw:
        return payload
    return Payload("base64", base64.b64encode(masked).decode("ascii"), payload.style)


def redact_url(url: str) -> str:
    """A URL fit for a message or a log line: no user:password@, and no query value at all
    (a name may say what it is; its value may be a credential under any name)."""
    url = _USERINFO.sub(r"\1", url)
    base, sep, query = url.partition("?")
    if not sep:
        return url
    pairs = parse_qsl(query, keep_blank_values=True)
    return f"{base}?{urlencode([(k, MARKER) for k, _ in pairs], safe='[]')}"


def masked_userinfo(url: str) -> str:
    """A URL as typed (an upstream's, refused) fit for a message: the `user:password@` in
    its authority as `***@`, with or without a scheme; the rest as it is, so the message
    still shows what is wrong with it."""
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    end = next((i for i, c in enumerate(url[start:], start) if c in "/?#"), len(url))
    at = url.rfind("@", start, end)
    return url if at < 0 else f"{url[:start]}***{url[at:]}"


def redact_text(text: str) -> str:
    """Free text (an upstream error's message) with every URL in it passed through redact_url."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)
