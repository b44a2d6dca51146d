"""The secret filter: no credential value survives redaction, whatever the name's case."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from proxy.redact import (
    is_secret_header,
    is_secret_query,
    redact_headers,
    redact_query,
    redact_url,
)

KNOWN_SECRET_HEADERS = [
    "authorization", "x-api-key", "api-key", "cookie", "set-cookie", "proxy-authorization",
    "x-goog-api-key",
]
SAFE_HEADERS = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "anthropic-version": "2023-06-01",
    "openai-beta": "assistants=v2",
    "user-agent": "OpenAI/Python 1.40.0",
    "x-stainless-lang": "python",
}
SAFE_QUERY = [("alt", "sse"), ("limit", "10"), ("model", "gemini-pro")]

name_part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_", max_size=6)


def random_case(name: str, flips: list[bool]) -> str:
    flips = (flips + [False] * len(name))[: len(name)]
    return "".join(c.upper() if flip else c for c, flip in zip(name, flips, strict=True))


@st.composite
def secret_names(draw: st.DrawFn, known: list[str], words: list[str]) -> str:
    """A credential-ish name: a known one, or any name holding a telltale word, in any case."""
    known_name = st.sampled_from(known)
    invented = st.builds(lambda a, w, b: a + w + b, name_part, st.sampled_from(words), name_part)
    name = draw(known_name | invented)
    return random_case(name, draw(st.lists(st.booleans(), max_size=len(name))))


secret_values = st.text(min_size=6).map(lambda s: "SECRET<" + s + ">")


@given(
    names=st.lists(secret_names(KNOWN_SECRET_HEADERS, ["token", "secret", "auth"]), min_size=1),
    secret=secret_values,
)
def test_redacted_headers_never_contain_a_secret(names: list[str], secret: str) -> None:
    headers = {**SAFE_HEADERS, **{name: secret for name in names}}
    redacted = redact_headers(headers)
    assert all(secret not in k and secret not in v for k, v in redacted.items())
    assert redacted == SAFE_HEADERS


@given(
    names=st.lists(secret_names(["key", "api_key", "token", "sig", "access_token"],
                                ["secret", "password", "signature", "apikey"])),
    secret=secret_values,
)
def test_redacted_query_never_contains_a_secret(names: list[str], secret: str) -> None:
    pairs = [*SAFE_QUERY, *((name, secret) for name in names)]
    redacted = redact_query(pairs)
    assert all(secret not in k and secret not in v for k, v in redacted)
    assert redacted == SAFE_QUERY


@given(name=st.sampled_from(sorted(SAFE_HEADERS)), flips=st.lists(st.booleans()))
def test_safe_headers_are_kept_with_their_names_lowercased(name: str, flips: list[bool]) -> None:
    assume(not any(word in name for word in ("auth", "token", "secret")))
    assert redact_headers({random_case(name, flips): "v"}) == {name: "v"}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("AUTHORIZATION", True),
        ("X-Api-Key", True),
        ("X-Goog-Api-Key", True),
        ("Set-Cookie", True),
        ("X-Amz-Security-Token", True),
        ("OpenAI-Organization", True),
        ("x-custom-auth", True),
        ("x-session-id", True),
        ("content-type", False),
        ("anthropic-version", False),
        ("openai-beta", False),
        ("x-stainless-lang", False),
    ],
)
def test_is_secret_header(name: str, secret: bool) -> None:
    assert is_secret_header(name) is secret


@pytest.mark.parametrize(
    ("name", "secret"),
    [("key", True), ("KEY", True), ("api_key", True), ("X-Amz-Signature", True),
     ("X-Amz-Credential", True), ("access_token", True), ("token", True),
     ("client_secret", True), ("alt", False), ("model", False), ("limit", False),
     ("page_token", False), ("pageToken", False), ("nextPageToken", False),
     ("author", False), ("max_tokens", False)],
)
def test_is_secret_query(name: str, secret: bool) -> None:
    assert is_secret_query(name) is secret


@pytest.mark.parametrize("name", ["api_token", "apiToken", "accessToken", "access-token",
                                  "auth", "X-Api-Key", "client_secret"])
def test_common_credential_spellings_in_queries_are_secret(name: str) -> None:
    assert is_secret_query(name)


def test_redact_url_hides_key_values_and_keeps_the_rest() -> None:
    url = "http://g/v1beta/models/x:generateContent?alt=sse&key=AIzaSECRET&pageToken=p2"
    shown = redact_url(url)
    assert "AIzaSECRET" not in shown
    assert shown == "http://g/v1beta/models/x:generateContent?alt=sse&key=[redacted]&pageToken=p2"
    assert redact_url("http://g/plain") == "http://g/plain"
