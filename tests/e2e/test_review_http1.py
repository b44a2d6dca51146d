"""An adversarial review of tapeproxy's own HTTP/1.1 client (tapeproxy.http1) through the real
server: answers a broken or hostile upstream may send, and what must never follow from them."""

from __future__ import annotations

import json
import socket
import threading
from functools import partial
from pathlib import Path

import httpx

from tests.conftest import MakeProxy
from tests.fakes.raw import KeepAliveUpstream, LoopbackServer
from tests.support import wait_for


def answer(body: bytes, *headers: bytes) -> bytes:
    head = b"".join(h + b"\r\n" for h in headers)
    return b"HTTP/1.1 200 OK\r\n%bContent-Length: %d\r\n\r\n%b" % (head, len(body), body)


def recorded(cassettes: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(cassettes.rglob("*.json"))]


def test_an_answer_head_past_its_cap_is_a_502_not_passed_on(make_proxy: MakeProxy) -> None:
    with KeepAliveUpstream() as up:
        up.answer(answer(b"{}", b"X-Big: " + b"a" * (1024 * 1024)))
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/x", json={}, timeout=20)
    assert response.status_code == 502, response.headers.get("x-big", "")[:20]
    assert "head" in response.json()["error"]["message"]


def test_a_transfer_encoding_that_does_not_end_in_chunked_ends_with_the_connection(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """RFC 9112 6.3, as llhttp reads it: the body runs to the close; it is not a cut."""
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
    """llhttp reads `099` as a status; taken for a 1xx, its body went out as the start of
    the answer after it."""
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
