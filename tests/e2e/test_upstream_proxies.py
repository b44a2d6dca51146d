"""Recording behind a corporate proxy: HTTPS_PROXY (a CONNECT tunnel, TLS to an upstream whose
CA only SSL_CERT_FILE names), HTTP_PROXY (absolute-form requests), NO_PROXY, and proxy
credentials that reach the proxy and nothing else. The upstreams' host name, provider.test,
resolves nowhere: only the proxy knows where it is.

The server runs in this process, so the variables are set (monkeypatch) before it starts
and taken away when the test ends; the test's own client (httpx) is told to ignore them."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import MakeProxy
from tests.fakes.forward_proxy import ForwardProxy
from tests.fakes.raw import KeepAliveUpstream
from tests.fakes.upstream import FakeUpstream
from tests.support import files_under

HOST = "provider.test"
PROXY_USER, PROXY_PASSWORD = "corp-user", "Pr0xyPassw0rd-SECRET"
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"n": "ok"}'
VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable of the machine's (in either case) in the way of the test's own."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=20) as http:
        yield http


@pytest.fixture
def tls_upstream(tmp_path: Path, environment: pytest.MonkeyPatch) -> Iterator[KeepAliveUpstream]:
    """An HTTPS upstream for provider.test, with a CA of the test's own in SSL_CERT_FILE."""
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    environment.setenv("SSL_CERT_FILE", str(bundle))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(context)
    with KeepAliveUpstream(tls=context) as up:
        yield up


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def recorded(cassettes: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(cassettes.rglob("*.json"))]


def test_an_exchange_is_recorded_through_the_connect_tunnel_of_https_proxy(
    make_proxy: MakeProxy,
    cassettes: Path,
    tls_upstream: KeepAliveUpstream,
    environment: pytest.MonkeyPatch,
    client: httpx.Client,
) -> None:
    tls_upstream.answer(OK)
    port = port_of(tls_upstream.url)
    with ForwardProxy({HOST: "127.0.0.1"}) as forward:
        environment.setenv("HTTPS_PROXY", forward.url)
        proxy = make_proxy(mode="record", upstream={"openai": f"https://{HOST}:{port}"})
        response = client.post(proxy.url + "/openai/v1/embeddings", json={"input": "hi"})
        proxy.stop()
    assert (response.status_code, response.json()) == (200, {"n": "ok"})
    assert [(s.method, s.target) for s in forward.seen] == [("CONNECT", f"{HOST}:{port}")]
    assert tls_upstream.requests[0].startswith(b"POST /v1/embeddings HTTP/1.1\r\n")
    assert f"\r\nHost: {HOST}:{port}\r\n".encode() in tls_upstream.requests[0]
    [exchange] = recorded(cassettes)
    assert exchange["response"]["body"]["json"] == {"n": "ok"}  # type: ignore[index]


def test_an_exchange_is_recorded_through_http_proxy_and_no_proxy_goes_direct(
    make_proxy: MakeProxy,
    cassettes: Path,
    fake: FakeUpstream,
    environment: pytest.MonkeyPatch,
    client: httpx.Client,
) -> None:
    port = port_of(fake.url)
    with ForwardProxy({HOST: "127.0.0.1"}) as forward:
        environment.setenv("HTTP_PROXY", forward.url)
        environment.setenv("NO_PROXY", "127.0.0.1")
        proxy = make_proxy(
            mode="record",
            upstream={"tools": f"http://{HOST}:{port}", "direct": fake.url},
        )
        through = client.post(proxy.url + "/tools/v1/search?q=%zz", json={"q": "paris"})
        direct = client.post(proxy.url + "/direct/v1/search", json={"q": "rome"})
        proxy.stop()
    assert through.status_code == direct.status_code == 200
    assert [(s.method, s.target) for s in forward.seen] == [
        ("POST", f"http://{HOST}:{port}/v1/search?q=%zz")
    ]
    assert [(hit.path, hit.json()) for hit in fake.hits] == [
        ("/v1/search", {"q": "paris"}),
        ("/v1/search", {"q": "rome"}),
    ]
    assert sorted(e["request"]["upstream"] for e in recorded(cassettes)) == ["direct", "tools"]  # type: ignore[index]


def test_proxy_credentials_reach_the_proxy_and_never_a_cassette_or_the_log(
    make_proxy: MakeProxy,
    cassettes: Path,
    tls_upstream: KeepAliveUpstream,
    environment: pytest.MonkeyPatch,
    client: httpx.Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tls_upstream.answer(OK)
    upstream = f"https://{HOST}:{port_of(tls_upstream.url)}"
    credentials = f"{PROXY_USER}:{PROXY_PASSWORD}"
    with (
        ForwardProxy({HOST: "127.0.0.1"}, credentials=credentials) as forward,
        caplog.at_level("DEBUG"),
    ):
        proxy_url = forward.url.replace("http://", f"http://{credentials}@")
        environment.setenv("HTTPS_PROXY", proxy_url)
        proxy = make_proxy(mode="record", upstream={"openai": upstream})
        response = client.post(proxy.url + "/openai/v1/embeddings", json={"input": "hi"})
        proxy.stop()
        # The same proxy told the wrong password: a 502 that says the proxy refused.
        environment.setenv("HTTPS_PROXY", proxy_url.replace(PROXY_PASSWORD, "Wr0ng-SECRET"))
        refused = make_proxy(mode="record", upstream={"openai": upstream})
        denied = client.post(refused.url + "/openai/v1/embeddings", json={"input": "hi"})
        refused.stop()
    assert response.status_code == 200
    [granted, rejected] = forward.seen
    assert granted.method == "CONNECT" and granted.authorization is not None
    assert granted.authorization == forward.wanted
    assert rejected.authorization is not None and rejected.authorization != forward.wanted
    assert denied.status_code == 502
    error = denied.json()["error"]
    assert error["type"] == "upstream_unreachable" and "407" in error["message"]
    stored = b"".join(files_under(cassettes).values())
    assert len(recorded(cassettes)) == 1
    for secret in (PROXY_PASSWORD, "Wr0ng-SECRET", granted.authorization.split()[1]):
        assert secret.encode() not in stored
        assert secret not in caplog.text and secret not in denied.text
    assert caplog.records
