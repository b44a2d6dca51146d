"""The cache of worked-out keys: exact (every input of the key is in its key) and bounded."""

from __future__ import annotations

from tapeproxy.engine.keycache import KeyCache, raw_key
from tapeproxy.engine.keying import RequestParts
from tapeproxy.exchange.bodies import Payload

WANTED = frozenset({b"x-tenant"})
HEADERS = ((b"Content-Type", b"application/json"), (b"User-Agent", b"sdk/1"))


def parts() -> RequestParts:
    return RequestParts("POST", "openai", "/v1/x", (), (), Payload("json", {"a": 1}))


def test_only_the_headers_the_key_reads_are_in_the_raw_key() -> None:
    one = raw_key("openai", "POST", "/v1/x", "", HEADERS, b"{}", WANTED)
    other_agent = ((b"content-type", b"application/json"), (b"user-agent", b"sdk/2"))
    assert one == raw_key("openai", "POST", "/v1/x", "", other_agent, b"{}", WANTED)
    tenant = (*HEADERS, (b"X-Tenant", b"a"))
    assert one != raw_key("openai", "POST", "/v1/x", "", tenant, b"{}", WANTED)
    gzip = (*HEADERS, (b"content-encoding", b"gzip"))
    assert one != raw_key("openai", "POST", "/v1/x", "", gzip, b"{}", WANTED)


def test_every_request_field_tells_requests_apart() -> None:
    keys = {
        raw_key("openai", "POST", "/v1/x", "a=1", HEADERS, b"{}", WANTED),
        raw_key("anthropic", "POST", "/v1/x", "a=1", HEADERS, b"{}", WANTED),
        raw_key("openai", "PUT", "/v1/x", "a=1", HEADERS, b"{}", WANTED),
        raw_key("openai", "POST", "/v1/y", "a=1", HEADERS, b"{}", WANTED),
        raw_key("openai", "POST", "/v1/x", "a=2", HEADERS, b"{}", WANTED),
        raw_key("openai", "POST", "/v1/x", "a=1", (), b"{}", WANTED),
        raw_key("openai", "POST", "/v1/x", "a=1", HEADERS, b"{ }", WANTED),
    }
    assert len(keys) == 7


def test_a_header_name_that_is_not_ascii_is_not_cached() -> None:
    assert raw_key("openai", "POST", "/", "", ((b"x-\xc0", b"v"),), b"", WANTED) is None


def test_the_cache_gives_back_what_was_put_and_stays_within_its_bytes() -> None:
    cache = KeyCache(limit=4000)
    first = raw_key("openai", "POST", "/", "", (), b"x" * 1000, WANTED)
    assert first is not None
    cache.put(first, parts(), "k0")
    assert cache.get(first) == (parts(), "k0")
    for i in range(1, 10):
        raw = raw_key("openai", "POST", "/", "", (), bytes([i]) * 1000, WANTED)
        assert raw is not None
        cache.put(raw, parts(), f"k{i}")
    assert cache.size <= 4000
    assert cache.get(first) is None


def test_header_values_count_toward_the_bytes_held() -> None:
    cache = KeyCache(limit=100_000)
    for i in range(50):
        headers = ((b"content-type", b"x" * 10_000 + bytes([i])),)
        raw = raw_key("openai", "POST", "/", "", headers, b"{}", WANTED)
        assert raw is not None
        cache.put(raw, parts(), f"k{i}")
    held = sum(len(v) for entry in cache._entries for _, v in entry[4])
    assert cache.size <= 100_000 and held <= 100_000
