"""tapeproxy's own HTTP/1.1 client (tapeproxy.http1) through the real server, against raw-socket
upstreams: kept connections, answers a library's server would not send, exact header bytes,
and HTTPS with a CA of the test's own (trustme)."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import MakeProxy
from tests.fakes.raw import KeepAliveUpstream
from tests.support import wait_for

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"n": "ok"}'


def answer(body: bytes, *headers: bytes) -> bytes:
    head = b"".join(h + b"\r\n" for h in headers)
    return b"HTTP/1.1 200 OK\r\n%bContent-Length: %d\r\n\r\n%b" % (head, len(body), body)


def recorded(cassettes: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(cassettes.rglob("*.json"))]


def test_requests_one_after_another_share_one_upstream_connection(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    with KeepAliveUpstream() as up:
        for n in range(5):
            up.answer(answer(b'{"n": %d}' % n, b"Content-Type: application/json"))
        proxy = make_proxy(mode="record", upstream={"tool": up.url})
        got = [httpx.post(proxy.url + "/tool/v1/x", json={"n": n}).json() for n in range(5)]
    assert got == [{"n": n} for n in range(5)]
    assert up.connections == 1
    assert len(recorded(cassettes)) == 5


def test_a_connection_its_upstream_closed_while_idle_is_not_used_again(
    make_proxy: MakeProxy,
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(answer(b'{"n": 1}'), close=True)  # no `Connection: close`: it just hangs up
        up.answer(answer(b'{"n": 2}'))
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        assert httpx.post(proxy.url + "/tool/a", json={}).json() == {"n": 1}
        time.sleep(0.2)
        assert httpx.post(proxy.url + "/tool/b", json={}).json() == {"n": 2}
    assert up.connections == 2


def test_a_get_sent_on_a_connection_closed_as_it_went_is_sent_again_on_a_new_one(
    make_proxy: MakeProxy,
) -> None:
    """No pause here: the second GET may go out before the upstream's FIN is read, and then
    it is retried once (a GET may be sent twice; a POST is not)."""
    with KeepAliveUpstream() as up:
        for n in range(10):
            up.answer(answer(b'{"n": %d}' % n), close=True)
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        got = [httpx.get(proxy.url + f"/tool/{n}").json() for n in range(10)]
    assert got == [{"n": n} for n in range(10)]


def test_an_interim_100_continue_is_dropped_and_the_answer_after_it_recorded(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK
        )
        up.answer(OK)
        proxy = make_proxy(mode="record", upstream={"tool": up.url})
        first = httpx.post(proxy.url + "/tool/v1/x", json={"a": 1})
        second = httpx.post(proxy.url + "/tool/v1/x", json={"a": 2})
    assert (first.status_code, first.json()) == (200, {"n": "ok"})
    assert "link" not in first.headers
    assert second.json() == {"n": "ok"}
    assert up.connections == 1
    assert [e["response"]["status"] for e in recorded(cassettes)] == [200, 200]  # type: ignore[index]


def test_the_answer_to_a_head_has_no_body_and_the_connection_goes_on(
    make_proxy: MakeProxy,
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")  # the size of a GET's
        up.answer(OK)
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        head = httpx.head(proxy.url + "/tool/file")
        after = httpx.get(proxy.url + "/tool/file")
    assert (head.status_code, head.headers["content-length"], head.content) == (200, "1000", b"")
    assert after.json() == {"n": "ok"}
    assert up.connections == 1


def test_bytes_after_the_end_of_an_answer_make_its_connection_unfit_for_another(
    make_proxy: MakeProxy,
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(OK + b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
        up.answer(answer(b'{"n": "fresh"}'))
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        assert httpx.post(proxy.url + "/tool/a", json={}).json() == {"n": "ok"}
        assert httpx.post(proxy.url + "/tool/b", json={}).json() == {"n": "fresh"}
    assert up.connections == 2


def test_a_body_that_ends_with_the_connection_is_whole_and_recorded(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(
            b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"until": "close"}', True
        )
        proxy = make_proxy(mode="record", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/x", json={})
    assert response.json() == {"until": "close"}
    [stored] = recorded(cassettes)
    assert stored["response"]["body"]["json"] == {"until": "close"}  # type: ignore[index]


def test_header_bytes_go_upstream_as_they_came_with_its_host_and_a_user_agent(
    make_proxy: MakeProxy,
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(OK)
        up.answer(OK)
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        port = int(proxy.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /tool/v1/x?q=%zz HTTP/1.1\r\nHost: x\r\nX-Note: caf\xc3\xa9 \xff\xfe\r\n"
                b"Content-Length: 2\r\n\r\n{}"
            )
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        httpx.get(proxy.url + "/tool/v1/y", headers={"user-agent": "agent/7"})
    first, second = up.requests
    assert first.startswith(b"POST /v1/x?q=%zz HTTP/1.1\r\n")
    assert b"\r\nx-note: caf\xc3\xa9 \xff\xfe\r\n" in first  # uvicorn lowercases names
    assert f"\r\nHost: {up.url.split('//')[1]}\r\n".encode() in first
    assert b"\r\nUser-Agent: tapeproxy/" in first and first.endswith(b"\r\n\r\n{}")
    assert b"\r\nuser-agent: agent/7\r\n" in second and b"tapeproxy/" not in second
    assert b"Content-Length" not in second  # a GET with no body names no length


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_upstream(ca: trustme.CA) -> Iterator[KeepAliveUpstream]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with KeepAliveUpstream(tls=context) as up:
        yield up


def test_an_https_upstream_is_called_over_tls_with_the_trust_store_of_ssl_cert_file(
    make_proxy: MakeProxy,
    cassettes: Path,
    ca: trustme.CA,
    tls_upstream: KeepAliveUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    tls_upstream.answer(OK)
    tls_upstream.answer(OK)
    proxy = make_proxy(mode="record", upstream={"tool": tls_upstream.url})
    for n in range(2):
        response = httpx.post(proxy.url + "/tool/v1/x", json={"n": n})
        assert response.json() == {"n": "ok"}
    assert tls_upstream.connections == 1
    assert len(recorded(cassettes)) == 2


def test_an_https_upstream_whose_certificate_is_not_trusted_is_a_502_that_says_why(
    make_proxy: MakeProxy, cassettes: Path, tls_upstream: KeepAliveUpstream
) -> None:
    tls_upstream.answer(OK)
    proxy = make_proxy(mode="record", upstream={"tool": tls_upstream.url})
    response = httpx.post(proxy.url + "/tool/v1/x", json={})
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in error["message"], error["message"]
    wait_for(lambda: tls_upstream.connections == 1)
    assert not recorded(cassettes)
