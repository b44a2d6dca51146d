"""The one secret filter: what never reaches a cassette, a log line or a key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlencode

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
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
        "password", "pass", "pwd",
    }
)
# Any header name holding one of these is treated as a credential too: unknown upstreams
# invent names, and a header that is not a key header is never stored anyway.
_SECRET_WORDS = ("auth", "token", "secret", "password", "passwd", "api-key", "apikey", "api_key",
                 "cookie", "session", "signature", "credential")
# Query names are matched more narrowly: `page_token`, `nextPageToken` or `author` are not
# credentials, and dropping them would give different pages one key.
_SECRET_QUERY_WORDS = ("secret", "password", "passwd", "signature", "credential", "apikey")


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def is_secret_query(name: str) -> bool:
    squashed = name.lower().replace("-", "").replace("_", "")
    return squashed in SECRET_QUERY or any(word in squashed for word in _SECRET_QUERY_WORDS)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers without any credential, names lowercased."""
    return {k.lower(): v for k, v in headers.items() if not is_secret_header(k)}


def redact_query(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Query pairs without key-like parameters (Gemini's `?key=`, signed URLs, ...)."""
    return [(k, v) for k, v in pairs if not is_secret_query(k)]


def redact_url(url: str) -> str:
    """A URL fit for a message or a log line: key-like query values replaced."""
    base, sep, query = url.partition("?")
    if not sep:
        return url
    pairs = parse_qsl(query, keep_blank_values=True)
    shown = [(k, "[redacted]" if is_secret_query(k) else v) for k, v in pairs]
    return f"{base}?{urlencode(shown, safe='[]')}"
