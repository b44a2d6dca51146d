"""The one secret filter: what never reaches a cassette, a log line or a key."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlencode

from tapeproxy.exchange.bodies import MULTIPART_BOUNDARY, Payload

MARKER = "[redacted]"
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "ocp-apim-subscription-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "x-amz-security-token",
    }
)
# Compared with `-` and `_` taken out and lowercased: `api_token`, `apiToken` and
# `api-token` are one name.
SECRET_QUERY = frozenset(
    {
        "key",
        "apikey",
        "xapikey",
        "xgoogapikey",
        "token",
        "apitoken",
        "accesstoken",
        "idtoken",
        "refreshtoken",
        "authtoken",
        "sessiontoken",
        "securitytoken",
        "xamzsecuritytoken",
        "bearer",
        "auth",
        "sig",
        "signature",
        "secret",
        "clientsecret",
        "password",
        "pass",
        "pwd",
        "accesskey",
        "authkey",
        "subscriptionkey",
        "privatetoken",
        "appid",
        "appkey",
        "secretkey",
        "privatekey",
        "sessionkey",
        "code",  # an OAuth authorization code
    }
)
# Any header name holding one of these is treated as a credential too: unknown upstreams
# invent names, and a header that is not a key header is never stored anyway.
_SECRET_WORDS = (
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "api_key",
    "cookie",
    "session",
    "signature",
    "credential",
)
# Query names are matched more narrowly: `page_token`, `nextPageToken` or `author` are not
# credentials, and dropping them would give different pages one key.
_SECRET_QUERY_WORDS = ("secret", "password", "passwd", "signature", "credential", "apikey")
# Body field names, narrower still: a body is the request itself, and `key`, `max_tokens`,
# `auth` or `page_token` are ordinary field names there. Exact names, then name endings.
# `authorization` and `token` are exact: MCP servers in Anthropic and OpenAI requests carry
# their credential as `authorization_token`, `authorization` or a bare `token`.
_SECRET_FIELDS = frozenset(
    {
        "idtoken",
        "authtoken",
        "sessiontoken",
        "securitytoken",
        "apitoken",
        "passwd",
        "clientassertion",
        "authorization",
        "token",
        "bearer",
        "credential",
        "credentials",
    }
)
_SECRET_FIELD_ENDINGS = (
    "apikey",
    "apisecret",
    "accesstoken",
    "refreshtoken",
    "clientsecret",
    "secret",
    "secretkey",
    "secretaccesskey",
    "privatekey",
    "password",
    "authorizationtoken",
    "bottoken",
    "oauthtoken",
    "bearertoken",
)
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
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@")


def _squash(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def is_secret_query(name: str) -> bool:
    squashed = _squash(name)
    return squashed in SECRET_QUERY or any(word in squashed for word in _SECRET_QUERY_WORDS)


def is_secret_field(name: str) -> bool:
    """A JSON or form body field that holds a credential (`api_key`, `client_secret`)."""
    squashed = _squash(name)
    return squashed in _SECRET_FIELDS or squashed.endswith(_SECRET_FIELD_ENDINGS)


def is_secret_form_field(name: str) -> bool:
    """A form or multipart field holding a credential: a credential-named body field, or
    exactly a key-like query name (`key`, `token`, `api_key`). Not the query rule's substring
    words: `secret_santa` is a field, not a secret."""
    return is_secret_field(name) or _squash(name) in SECRET_QUERY


def looks_form(text: str) -> bool:
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
    if payload.kind == "base64" and (
        lowered.startswith("multipart/") or str(payload.value).startswith(_MULTIPART_B64)
    ):
        return _redacted_multipart(payload)
    return payload


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


def redact_text(text: str) -> str:
    """Free text (an upstream error's message) with every URL in it passed through redact_url."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)
