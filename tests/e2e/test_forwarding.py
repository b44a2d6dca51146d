"""Forwarding: routes, methods, queries, headers, compression, and upstream failures."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_OPENAI, closed_port


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


def test_every_method_query_and_body_reaches_a_generic_upstream(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="passthrough", upstream={"tools": fake.url + "/base"})
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "QUERY", "PROPFIND"):
        response = httpx.request(
            method,
            proxy.url + "/tools/search/items?q=paris&page=2",
            json={"n": 1} if method != "GET" else None,
            headers={"x-custom": "yes", "connection": "keep-alive"},
        )
        assert response.status_code == 200, response.text
        hit = fake.hits[-1]
        assert (hit.method, hit.path, hit.query) == (
            method,
            "/base/search/items",
            {"q": "paris", "page": "2"},
        )
        assert hit.headers["x-custom"] == "yes"
        assert hit.headers["host"] == fake.url.removeprefix("http://")
        assert response.json()["method"] == method


def test_unknown_upstream_is_a_404_listing_the_known_ones(make_proxy: MakeProxy) -> None:
    proxy = make_proxy()
    response = httpx.get(proxy.url + "/nope/v1/models")
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    for name in ("openai", "anthropic", "gemini", "ollama"):
        assert name in message


def test_bare_v1_goes_to_anthropic_with_anthropic_version_else_to_openai(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    ant = anthropic.Anthropic(base_url=proxy.url, api_key=SECRET_ANTHROPIC)
    message = ant.messages.create(
        model="claude-test-1", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    oai = openai.OpenAI(base_url=proxy.url + "/v1", api_key=SECRET_OPENAI)
    models = [m.id for m in oai.models.list()]
    assert message.content[0].text == "echo: hi"  # type: ignore[union-attr]
    assert models
    proxy.stop()
    stored = [json.loads(p.read_text())["request"] for p in cassettes.rglob("*.json")]
    assert sorted((r["upstream"], r["path"]) for r in stored) == [
        ("anthropic", "/v1/messages"),
        ("openai", "/v1/models"),
    ]
    assert [h.path for h in fake.hits] == ["/v1/messages", "/v1/models"]


def test_compressed_answers_reach_the_client_and_the_cassette_readable(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    with FakeUpstream(gzip=True) as zipped:
        proxy = make_proxy(mode="record", upstream={"openai": zipped.url})
        response = httpx.get(proxy.url + "/openai/v1/models", headers={"accept-encoding": "br"})
        assert response.status_code == 200
        assert "content-encoding" not in response.headers
        assert response.json()["data"]
        proxy.stop()
    [stored] = list(cassettes.rglob("*.json"))
    assert '"object": "list"' in stored.read_text()


def test_an_unreachable_upstream_is_a_502_in_the_provider_shape(make_proxy: MakeProxy) -> None:
    port = closed_port()
    proxy = make_proxy(mode="record", upstream={"anthropic": f"http://127.0.0.1:{port}"})
    ant = anthropic.Anthropic(
        base_url=proxy.url + "/anthropic", api_key=SECRET_ANTHROPIC, max_retries=0
    )
    with pytest.raises(anthropic.InternalServerError) as caught:
        ant.messages.create(
            model="claude-test-1", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "upstream_unreachable"
    assert "'anthropic'" in body["error"]["message"]
    stats = proxy.stats
    assert (stats["errors"], stats["recorded"]) == (1, 0)


def test_gemini_shaped_errors_carry_the_real_status(make_proxy: MakeProxy) -> None:
    port = closed_port()
    proxy = make_proxy(mode="record", upstream={"gemini": f"http://127.0.0.1:{port}"})
    path = "/gemini/v1beta/models/gemini-test:generateContent"
    unreachable = httpx.post(proxy.url + path, json={"contents": []})
    assert unreachable.status_code == 502
    assert unreachable.json()["error"] | {"message": ""} == {
        "code": 502,
        "status": "UNAVAILABLE",
        "type": "upstream_unreachable",
        "message": "",
    }
    proxy.put_cassette(mode="replay")
    miss = httpx.post(proxy.url + path, json={"contents": []}).json()["error"]
    assert (miss["code"], miss["status"], miss["type"]) == (
        422,
        "FAILED_PRECONDITION",
        "cassette_miss",
    )


@pytest.fixture
def silent_upstream() -> Iterator[str]:
    """Accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_an_upstream_that_does_not_answer_in_time_is_a_504(
    make_proxy: MakeProxy, silent_upstream: str, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record", read_timeout=0.3, upstream={"openai": silent_upstream})
    response = httpx.get(proxy.url + "/openai/v1/models", timeout=10)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["type"] == "upstream_timeout" and "'openai'" in error["message"]
    assert proxy.stats["errors"] == 1


def test_an_upstream_error_never_shows_the_api_key_from_the_query(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    port = closed_port()
    proxy = make_proxy(mode="record", upstream={"gemini": f"http://127.0.0.1:{port}"})
    with caplog.at_level("INFO", logger="tapeproxy"):
        response = httpx.post(
            proxy.url + "/gemini/v1beta/models/g:generateContent?key=AIzaTopSecret123",
            json={"contents": []},
        )
    assert response.status_code == 502
    assert "AIzaTopSecret123" not in response.text
    assert "key=[redacted]" in response.json()["error"]["message"]
    assert caplog.records and "AIzaTopSecret123" not in caplog.text


def test_a_client_that_leaves_before_the_upstream_answers_closes_the_upstream_request(
    make_proxy: MakeProxy, hanging_upstream: tuple[str, threading.Event]
) -> None:
    url, hung_up = hanging_upstream
    proxy = make_proxy(mode="record", upstream={"tools": url})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(proxy.url + "/tools/slow", json={"q": 1}, timeout=0.3)
    assert hung_up.wait(timeout=10), "the upstream request was closed, not left to time out"
    assert proxy.stats["aborted"] == 1


def test_headers_a_connection_header_names_are_hop_by_hop_both_ways(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="passthrough", upstream={"tools": fake.url})
    response = httpx.get(
        proxy.url + "/tools/x",
        headers={"connection": "keep-alive, x-hop", "x-hop": "only for tapeproxy", "x-end": "kept"},
    )
    assert response.status_code == 200
    hit = fake.hits[-1]
    assert "x-hop" not in hit.headers and hit.headers["x-end"] == "kept"


def test_expect_100_continue_is_not_passed_on_since_the_body_is_already_read(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="passthrough", upstream={"tools": fake.url})
    response = httpx.post(
        proxy.url + "/tools/upload", content=b"x" * 100_000, headers={"expect": "100-continue"}
    )
    assert response.status_code == 200
    assert "expect" not in fake.hits[-1].headers


def test_a_compressed_request_body_goes_upstream_with_its_content_encoding(
    make_proxy: MakeProxy, raw: RawUpstream
) -> None:
    raw.answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
    proxy = make_proxy(mode="passthrough", upstream={"tools": raw.url})
    body = gzip.compress(b'{"q": "paris"}')
    response = httpx.post(
        proxy.url + "/tools/search",
        content=body,
        headers={"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert response.status_code == 200
    [request] = raw.requests
    assert b"\r\ncontent-encoding: gzip\r\n" in request.lower()


def test_a_head_answer_keeps_its_content_length_live_and_in_replay(
    make_proxy: MakeProxy, raw: RawUpstream
) -> None:
    raw.answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n")
    recorder = make_proxy(mode="record", upstream={"tools": raw.url})
    live = httpx.head(recorder.url + "/tools/file")
    recorder.stop()
    replayer = make_proxy(mode="replay", upstream={"tools": raw.url})
    again = httpx.head(replayer.url + "/tools/file")
    assert live.headers["content-length"] == again.headers["content-length"] == "42"


def test_cookies_an_upstream_sets_are_not_kept_for_other_clients(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    """tapeproxy is a transparent proxy, not a browser: a `set-cookie` (Cloudflare's
    `__cf_bm` on OpenAI) goes to the client that got it, and never rides along on the
    next request of another client; a client's own cookie goes upstream as it sent it."""
    fake.script(
        "/x",
        Reply(headers={"set-cookie": "__cf_bm=upstream-set; Path=/; HttpOnly"}, body={}),
        Reply(body={}),
        Reply(body={}),
    )
    # By name: aiohttp's default jar keeps no cookie of a bare IP address.
    by_name = fake.url.replace("127.0.0.1", "localhost")
    proxy = make_proxy(mode="passthrough", upstream={"tools": by_name})
    first = httpx.get(proxy.url + "/tools/x")
    assert "__cf_bm=upstream-set" in first.headers["set-cookie"]
    httpx.get(proxy.url + "/tools/x")  # another client, no cookie of its own
    assert "cookie" not in fake.hits[-1].headers
    httpx.get(proxy.url + "/tools/x", headers={"cookie": "mine=1"})
    assert fake.hits[-1].headers["cookie"] == "mine=1"
