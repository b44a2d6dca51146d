"""Plain HTTP through the forward proxy (an absolute-form request): a connection carries one
request, so a client that keeps it alive and names another host next never reaches the
first host with it; the proxy's own credential never goes on to the host."""

from __future__ import annotations

import base64
import socket

from tests.conftest import MakeProxy
from tests.e2e.test_forward_security import TOKEN
from tests.fakes.raw import KeepAliveUpstream

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def ask(sock: socket.socket, url: str, extra: str = "") -> bytes:
    """One absolute-form GET on `sock`; what came back before it closed or 5 s passed."""
    host = url.split("/")[2]
    sock.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
    answer = b""
    sock.settimeout(5)
    try:
        while not answer.endswith(b"\r\n\r\nok"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    except TimeoutError:
        pass
    return answer


def test_a_kept_alive_connection_never_carries_a_second_host_to_the_first(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(forward=True, mode="record")
    port = int(proxy.url.rsplit(":", 1)[1])
    with KeepAliveUpstream() as first, KeepAliveUpstream() as second:
        for up in (first, second):
            up.answer(OK)
            up.answer(OK)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert ask(sock, first.url + "/one").startswith(b"HTTP/1.1 200 ")
            ask(sock, second.url + "/two")  # (the first host keeps its connection open)
    assert len(first.requests) == 1, first.requests
    assert first.requests[0].startswith(b"GET /one HTTP/1.1\r\n")  # (origin-form, as to a host)
    assert b"connection: close" in first.requests[0].lower()


def test_the_proxy_credential_is_not_sent_on_to_the_host(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(forward=True, mode="record", host="0.0.0.0", admin_token=TOKEN)
    port = int(proxy.url.rsplit(":", 1)[1])
    basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
    with KeepAliveUpstream() as up:
        up.answer(OK)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            extra = f"Proxy-Authorization: Basic {basic}\r\nProxy-Connection: keep-alive\r\n"
            assert ask(sock, up.url + "/x", extra).startswith(b"HTTP/1.1 200 ")
    sent = up.requests[0].lower()
    assert b"proxy-authorization" not in sent and basic.encode().lower() not in sent
    assert b"proxy-connection" not in sent


def test_a_body_that_comes_in_pieces_goes_on_whole(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(forward=True, mode="record")
    port = int(proxy.url.rsplit(":", 1)[1])
    with KeepAliveUpstream() as up:
        up.answer(OK)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            host = up.url.removeprefix("http://")
            sock.sendall(f"POST {up.url}/p HTTP/1.1\r\nHost: {host}\r\n".encode())
            sock.sendall(b"Content-Length: 10\r\n\r\n01234")
            sock.sendall(b"56789")
            answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200 ")
    head, _, body = up.requests[0].partition(b"\r\n\r\n")
    assert b"content-length: 10" in head.lower() and body == b"0123456789"


def test_a_request_back_to_a_listener_on_another_loopback_address_is_refused(
    make_proxy: MakeProxy,
) -> None:
    # (from 127.0.0.2, a connection leaves from 127.0.0.1: no longer this proxy's own, it
    # looped through it, each turn a new connection, until no descriptor was left)
    proxy = make_proxy(forward=True, mode="record", host="127.0.0.2")
    own = proxy.url.removeprefix("http://")
    with socket.create_connection(("127.0.0.2", int(own.rsplit(":", 1)[1])), timeout=10) as sock:
        answer = ask(sock, f"http://{own}/x")
    assert answer.startswith(b"HTTP/1.1 502 ") and b"this proxy" in answer


def test_a_length_beside_chunked_framing_is_not_passed_on(make_proxy: MakeProxy) -> None:
    # (the host might read by the length, and the rest of the chunked body as a request)
    proxy = make_proxy(forward=True, mode="record")
    port = int(proxy.url.rsplit(":", 1)[1])
    with KeepAliveUpstream() as up:
        up.answer(OK)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            host = up.url.removeprefix("http://")
            head = f"POST {up.url}/p HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\n"
            chunked = b"Transfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n0\r\n\r\n"
            sock.sendall(head.encode() + chunked)
            ask(sock, up.url + "/next")  # (to wait for it: this fake reads no chunked body)
    sent = up.requests[0].lower()
    assert b"transfer-encoding: chunked" in sent and b"content-length" not in sent
