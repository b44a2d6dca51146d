"""Random paths, methods, headers, cassette names and bodies at the HTTP surface: the server
always answers, never with a 500 or a traceback, and writes nothing outside its library."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream

SEGMENT = st.one_of(
    st.sampled_from(
        [
            "openai",
            "anthropic",
            "gemini",
            "ollama",
            "v1",
            "__tapeproxy",
            "..",
            ".",
            "%2e%2e",
            "%zz",
            "%0a",
            "%00",
            "a%2Fb",
            "chat",
            "completions",
            "",
            "ü",
        ]
    ),
    st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="?#/"),
        max_size=12,
    ),
)
HEADER_VALUE = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
    st.sampled_from(
        [
            "none",
            "recorded",
            "0.5",
            "-1",
            "nan",
            "openai",
            "openai,nope",
            "a/../b",
            "suite/test_a",
            "application/json",
            "gzip",
            "2023-06-01",
        ]
    ),
)
OURS = [
    "x-tapeproxy-cassette",
    "x-tapeproxy-live",
    "x-tapeproxy-timing",
    "content-type",
    "content-encoding",
    "anthropic-version",
    "authorization",
]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "QUERY"]),
    first=st.sampled_from(["openai", "anthropic", "gemini", "ollama", "tool", "v1", "__tapeproxy"]),
    segments=st.lists(SEGMENT, max_size=4),
    query=st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="#"),
        max_size=20,
    ),
    headers=st.dictionaries(st.sampled_from(OURS), HEADER_VALUE, max_size=4),
    body=st.one_of(st.binary(max_size=300), st.just(b'{"model": "m", "stream": true}')),
)
def test_the_server_always_answers_and_writes_only_in_its_library(
    fuzz_server: tuple[httpx.Client, Path],
    method: str,
    first: str,
    segments: list[str],
    query: str,
    headers: dict[str, str],
    body: bytes,
) -> None:
    client, root = fuzz_server
    path = "/" + "/".join([first, *segments]) + (f"?{query}" if query else "")
    try:
        response = client.request(method, path, headers=headers, content=body)
    except (httpx.InvalidURL, httpx.LocalProtocolError, UnicodeError, ValueError) as exc:
        event(f"not sendable: {type(exc).__name__}")
        return
    event(f"answered {response.status_code}")
    # An upstream's own 500 passes through (it carries the key of its exchange); tapeproxy's own
    # answers never are a 500.
    ours = "x-tapeproxy-key" not in response.headers
    assert not (ours and response.status_code >= 500), (method, path, headers, response.text)
    assert files_outside(root, "cassettes") == []


def files_outside(root: Path, library: str) -> list[Path]:
    """The files under `root` but not in `library`. Walked with os.walk, which passes over
    a folder removed while it walks (the server's journal folder, handed to its scribe)."""
    return [
        Path(folder) / name
        for folder, _, names in os.walk(root)
        if library not in Path(folder).relative_to(root).parts
        for name in names
    ]


@pytest.fixture
def fuzz_server(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> object:
    proxy = make_proxy(mode="auto", upstream={"tool": fake.url}, read_timeout=5)
    with caplog.at_level(logging.WARNING), httpx.Client(base_url=proxy.url, timeout=20) as c:
        yield c, tmp_path
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert tracebacks == [], tracebacks[0].getMessage()
