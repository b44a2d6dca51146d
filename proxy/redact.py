"""The one secret filter: what never reaches a cassette, a log line or a key."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlencode

from proxy.bodies import Payload

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
        "key", "apikey", "xapikey", "xgoogapikey", "token", "apitoken", "accesstoken",
        "idtoken", "refreshtoken", "authtoken", "sessiontoken", "securitytoken",
        "xamzsecuritytoken", "bearer", "auth", "sig", "signature", "secret", "clientsecret",
        "password", "pass", "pwd", "accesskey", "authkey", "subscriptionkey", "privatetoken",
        "appid", "appkey", "secretkey", "privatekey", "sessionkey",
    }
)
# Any header name holding one of these is treated as a credential too: unknown upstreams
# invent names, and a header that is not a key header is never stored anyway.
_SECRET_WORDS = ("auth", "token", "secret", "password", "passwd", "api-key", "apikey", "api_key",
                 "cookie", "session", "signature", "credential")
# Query names are matched more narrowly: `page_token`, `nextPageToken` or `author` are not
# credentials, and dropping them would give different pages one key.
_SECRET_QUERY_WORDS = ("secret", "password", "passwd", "signature", "credential", "apikey")
# Body field names, narrower still: a body is the request itself, and `key`, `token`,
# `max_tokens` or `auth` are ordinary field names there. Exact names, then name endings.
_SECRET_FIELDS = frozenset(
    {"idtoken", "authtoken", "sessiontoken", "securitytoken", "apitoken", "passwd",
     "clientassertion"}
)
_SECRET_FIELD_ENDINGS = ("apikey", "apisecret", "accesstoken", "refreshtoken", "clientsecret",
                         "secret", "secretkey", "secretaccesskey", "privatekey", "password")
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


def redact_json(value: Any, hidden: bool = False) -> Any:
    """`value` with every string or number under a credential-named field replaced by
    MARKER, at any depth. Booleans and nulls stay: `"secret": true` is a flag, not a key."""
    if isinstance(value, dict):
        return {k: redact_json(v, hidden or is_secret_field(str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(item, hidden) for item in value]
    if hidden and isinstance(value, str | int | float) and not isinstance(value, bool):
        return MARKER
    return value


def redact_form(text: str) -> str:
    """An x-www-form-urlencoded body with credential values replaced; every other byte kept."""
    pieces = []
    for piece in text.split("&"):
        name, sep, _ = piece.partition("=")
        secret = is_secret_field(unquote_plus(name)) or is_secret_query(unquote_plus(name))
        pieces.append(f"{name}={MARKER}" if sep and secret else piece)
    return "&".join(pieces)


def redact_payload(payload: Payload, content_type: str) -> Payload:
    """A request body as it may be stored and keyed: credentials in it replaced by MARKER, so
    the key ignores them and every developer's own key replays the same cassette."""
    if payload.kind == "json":
        return Payload("json", redact_json(payload.value), payload.style)
    if payload.kind == "text" and "x-www-form-urlencoded" in content_type.lower():
        return Payload("text", redact_form(str(payload.value)), payload.style)
    return payload


def redact_url(url: str) -> str:
    """A URL fit for a message or a log line: no user:password@, key-like query values
    replaced."""
    url = _USERINFO.sub(r"\1", url)
    base, sep, query = url.partition("?")
    if not sep:
        return url
    pairs = parse_qsl(query, keep_blank_values=True)
    shown = [(k, MARKER if is_secret_query(k) else v) for k, v in pairs]
    return f"{base}?{urlencode(shown, safe='[]')}"


def redact_text(text: str) -> str:
    """Free text (an aiohttp error message) with every URL in it passed through redact_url."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)
