"""The one secret filter: what never reaches a cassette, a log line or a key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
SECRET_QUERY = frozenset(
    {
        "key", "api_key", "apikey", "api-key", "token", "access_token", "id_token",
        "refresh_token", "auth_token", "session_token", "security_token",
        "x-amz-security-token", "sig", "signature", "secret", "client_secret", "password",
    }
)
# Any header name holding one of these is treated as a credential too: unknown upstreams
# invent names, and a header that is not a key header is never stored anyway.
_SECRET_WORDS = ("auth", "token", "secret", "password", "passwd", "api-key", "apikey", "api_key",
                 "cookie", "session", "signature", "credential")
# Query names are matched more narrowly: `page_token`, `nextPageToken` or `author` are not
# credentials, and dropping them would give different pages one key.
_SECRET_QUERY_WORDS = ("secret", "password", "passwd", "signature", "credential", "apikey",
                       "api_key", "api-key")


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def is_secret_query(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_QUERY or any(word in lowered for word in _SECRET_QUERY_WORDS)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers without any credential, names lowercased."""
    return {k.lower(): v for k, v in headers.items() if not is_secret_header(k)}


def redact_query(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Query pairs without key-like parameters (Gemini's `?key=`, signed URLs, ...)."""
    return [(k, v) for k, v in pairs if not is_secret_query(k)]
