"""The upstream client (aiohttp, upstream/client.py) through the real server, against
raw-socket upstreams: kept connections, answers a library's server would not send or a broken one
does, exact header bytes, credentials, and HTTPS with a CA of the test's own (trustme)."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import MakeProxy
from tests.fakes.raw import KeepAliveUpstream, LoopbackServer, RawUpstream
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
    """aiohttp writes a head in UTF-8: a UTF-8 value goes byte for byte; a value that is not
    UTF-8 (rare, and obsolete in RFC 9110) goes as its latin-1 reading. Nothing the client
    did not send is added but the Host, the length and tapeproxy's User-Agent."""
    with KeepAliveUpstream() as up:
        up.answer(OK)
        up.answer(OK)
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        port = int(proxy.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /tool/v1/x?q=%zz HTTP/1.1\r\nHost: x\r\nX-Note: caf\xc3\xa9 \xe2\x82\xac\r\n"
                b"X-Old: caf\xe9\r\nContent-Length: 2\r\n\r\n{}"
            )
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        httpx.get(proxy.url + "/tool/v1/y", headers={"user-agent": "agent/7"})
    first, second = up.requests
    assert first.startswith(b"POST /v1/x?q=%zz HTTP/1.1\r\n")
    assert b"\r\nx-note: caf\xc3\xa9 \xe2\x82\xac\r\n" in first  # uvicorn lowercases names
    assert b"\r\nx-old: caf\xc3\xa9\r\n" in first
    assert f"\r\nHost: {up.url.split('//')[1]}\r\n".encode() in first
    assert b"\r\nUser-Agent: tapeproxy/" in first and first.endswith(b"\r\n\r\n{}")
    names = [line.split(b":")[0].lower() for line in first.split(b"\r\n\r\n")[0].split(b"\r\n")]
    assert sorted(names[1:]) == [
        b"accept-encoding",
        b"content-length",
        b"host",
        b"user-agent",
        b"x-note",
        b"x-old",
    ]
    assert b"\r\nuser-agent: agent/7\r\n" in second and b"tapeproxy/" not in second
    assert b"Content-Length" not in second  # a GET with no body names no length


def test_a_post_whose_connection_closed_before_an_answer_is_never_sent_twice(
    make_proxy: MakeProxy,
) -> None:
    """RFC 9110 9.2.2: a request that is not idempotent is not sent again on a new
    connection (aiohttp sends a GET, a PUT or a DELETE once more)."""
    with RawUpstream() as up:  # reads each request, then closes without an answer
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/pay", json={"amount": 1}, timeout=10)
        assert response.status_code == 502
        assert "closed the connection before it answered" in response.json()["error"]["message"]
        assert len(up.requests) == 1
        assert httpx.get(proxy.url + "/tool/v1/item", timeout=10).status_code == 502
        wait_for(lambda: len(up.requests) == 3)


def test_the_client_authorization_wins_over_the_upstream_url_and_netrc_is_never_read(
    make_proxy: MakeProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp's trust_env reads ~/.netrc (or $NETRC) for a host's basic auth: tapeproxy
    sends the client's Authorization, or the upstream URL's user:pass, never that."""
    netrc = tmp_path / "netrc"
    netrc.write_text("default login netrc-user password NetrcSecret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with KeepAliveUpstream() as up, KeepAliveUpstream() as keyed:
        for server in (up, up, keyed, keyed):
            server.answer(OK)
        proxy = make_proxy(
            mode="passthrough",
            upstream={"tool": up.url, "keyed": keyed.url.replace("//", "//svc:s3cret@")},
        )
        for name in ("tool", "keyed"):
            httpx.get(proxy.url + f"/{name}/a", headers={"authorization": "Bearer mine"})
            httpx.get(proxy.url + f"/{name}/b")
    auth = [
        [line for line in request.split(b"\r\n") if line.lower().startswith(b"authorization")]
        for request in up.requests + keyed.requests
    ]
    assert auth == [
        [b"authorization: Bearer mine"],
        [],
        [b"authorization: Bearer mine"],
        [b"Authorization: Basic " + base64.b64encode(b"svc:s3cret")],
    ]


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


@pytest.mark.parametrize(
    "headers",
    [
        [b"X-Big: " + b"a" * (1024 * 1024)],  # one line past 64 KiB
        [b"X-Many-%d: v" % n for n in range(200)],  # more than 128 headers
    ],
    ids=["a-long-line", "many-headers"],
)
def test_an_answer_head_past_its_cap_is_a_502_not_passed_on(
    make_proxy: MakeProxy, headers: list[bytes]
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(answer(b"{}", *headers))
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/x", json={}, timeout=20)
    assert response.status_code == 502, response.headers.get("x-big", "")[:20]
    error = response.json()["error"]
    assert error["type"] == "upstream_error"
    assert "head passed the cap of 64 KiB a line or 128 headers" in error["message"]


def test_a_transfer_encoding_that_does_not_end_in_chunked_ends_with_the_connection(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """RFC 9112 6.3: the body runs to the close; it is not a cut."""
    with KeepAliveUpstream() as up:
        up.answer(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n{"a": 1}', True)
        proxy = make_proxy(mode="record", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/x", json={}, timeout=20)
    assert response.json() == {"a": 1}
    [stored] = recorded(cassettes)
    assert stored["outcome"] == "complete"
    assert stored["response"]["body"]["text"] == '{"a": 1}'  # type: ignore[index]


class ThreadedUpstream(LoopbackServer):
    """Each connection in a thread of its own: `/stall` gets a head and half a body, `/mute`
    nothing, anything else a short answer; `seen` counts the requests read."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0
        self._lock = threading.Lock()

    def reached(self, count: int) -> bool:
        return self.seen >= count

    def handle(self, conn: socket.socket) -> None:
        threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(20)
            try:
                while True:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        request += chunk
                    with self._lock:
                        self.seen += 1
                    if b" /stall " in request:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf")
                    elif b" /mute " in request:
                        pass
                    else:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        continue
                    while conn.recv(65536):  # until tapeproxy hangs up
                        pass
                    return
            except OSError:
                return


def test_clients_that_hang_up_at_any_point_leave_every_upstream_connection_free(
    make_proxy: MakeProxy,
) -> None:
    """More hang-ups than the pool has connections (100): a connection a hang-up kept would
    make the request after them wait for ever."""
    with ThreadedUpstream() as up:
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        port = int(proxy.url.rsplit(":", 1)[1])
        for path, count in [(b"/tool/mute", 50)] * 3 + [(b"/tool/stall", 50)] * 3:
            socks = [
                socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)
            ]
            before = up.seen
            for sock in socks:
                sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path)
            if path.endswith(b"stall"):
                for sock in socks:
                    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            wait_for(partial(up.reached, before + count))
            for sock in socks:
                sock.close()
        response = httpx.get(proxy.url + "/tool/fine", timeout=10)
    assert response.text == "ok"


def test_a_status_under_100_is_a_502_not_an_interim_answer_whose_body_joins_the_next(
    make_proxy: MakeProxy,
) -> None:
    """A parser may read `099` as a status; taken for a 1xx, its body would go out as the
    start of the answer after it."""
    with KeepAliveUpstream() as up:
        up.answer(b"HTTP/1.1 099 X\r\nContent-Length: 6\r\n\r\nforged" + answer(b"fresh"))
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        response = httpx.get(proxy.url + "/tool/a", timeout=10)
    assert response.status_code == 502, response.content
    assert "status" in response.json()["error"]["message"]


def test_a_101_to_a_request_that_asked_for_no_upgrade_is_a_502_that_says_so(
    make_proxy: MakeProxy,
) -> None:
    with KeepAliveUpstream() as up:
        up.answer(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        response = httpx.get(proxy.url + "/tool/a", timeout=10)
    assert response.status_code == 502
    assert "101 Switching Protocols" in response.json()["error"]["message"]
