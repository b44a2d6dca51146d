"""A request's head (request line and headers) on the real server: 431 past the cap without
reading the rest, 408 or a plain close past the deadline; bodies, keep-alive and pipelining
count nothing against it."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
import weakref
from pathlib import Path

import pytest

from tapeproxy.doors import head_limits
from tapeproxy.doors.head_limits import HEAD_LIMIT
from tests.conftest import MakeProxy
from tests.support import ProxyServer
from tests.support.serve import Serve

HEALTH = b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\n"


def connect(proxy: ProxyServer) -> socket.socket:
    host, port = proxy.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def head(size: int, start: bytes = HEALTH) -> bytes:
    """A head of exactly `size` bytes: `start`, one padding header, the blank line."""
    filler = size - len(start) - len(b"x-pad: \r\n\r\n")
    return start + b"x-pad: " + b"a" * filler + b"\r\n\r\n"


# What a read brought past the answer asked for: pipelined answers can arrive in one read.
_UNREAD: weakref.WeakKeyDictionary[socket.socket, bytes] = weakref.WeakKeyDictionary()


def read_answer(sock: socket.socket) -> tuple[int, bytes, bytes]:
    """One answer read off `sock`: status, head, body (by content-length)."""
    data = _UNREAD.pop(sock, b"")
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"closed after {data!r}"
        data += more
    top, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in top.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        more = sock.recv(65536)
        assert more, f"closed inside the body {body!r}"
        body += more
    body, rest = body[:length], body[length:]
    if rest:
        _UNREAD[sock] = rest
    return int(top.split()[1]), top.lower(), body


def closed(sock: socket.socket) -> bool:
    if _UNREAD.get(sock):
        return False  # more came after the last answer read
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def flood(sock: socket.socket, start: bytes) -> tuple[int, bytes]:
    """`start`, then up to 8 MB of `a`, 64 KiB at a time, until the server answers or closes:
    the bytes of `a` sent by then, and the first bytes read."""
    sock.sendall(start)
    sock.setblocking(False)
    sent, answer, chunk = 0, b"", b"a" * 65536
    while sent < 8 * 1024 * 1024:
        with contextlib.suppress(BlockingIOError, ConnectionError):  # full, or closed
            sent += sock.send(chunk)
        if select.select([sock], [], [], 0.05)[0]:
            with contextlib.suppress(ConnectionResetError):
                answer = sock.recv(65536)
            break
    sock.settimeout(10)
    return sent, answer


def test_a_head_over_the_cap_is_a_431_before_the_rest_is_sent(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay")
    with connect(proxy) as sock:
        sent, answer = flood(sock, HEALTH + b"x-big: ")
        while not answer.endswith(b"}"):
            answer += sock.recv(65536)
        assert closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
    assert b"connection: close" in answer.lower()
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["type"] == "headers_too_large" and "64 KiB" in error["message"]
    assert sent < 4 * 1024 * 1024, f"answered after {sent:,} bytes of header, not at the cap"


def test_trailers_over_the_cap_close_the_connection(make_proxy: MakeProxy) -> None:
    """httptools holds a chunked body's trailers whole too: they count as a head does."""
    proxy = make_proxy(mode="replay")
    post = b"POST /openai/v1/embeddings HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    with connect(proxy) as sock:
        sent, answer = flood(sock, post + b'20\r\n{"model": "m", "input": "hello"}\r\n0\r\nx-big: ')
        assert answer == b"" and closed(sock), "no answer fits in the middle of this request"
    assert sent < 4 * 1024 * 1024, f"closed after {sent:,} bytes of trailer, not at the cap"


def test_a_head_at_the_cap_is_served_and_one_byte_more_is_refused(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay")
    with connect(proxy) as sock:
        sock.sendall(head(HEAD_LIMIT))
        assert read_answer(sock)[0] == 200
    with connect(proxy) as sock:
        sock.sendall(head(HEAD_LIMIT + 1))
        assert read_answer(sock)[0] == 431
        assert closed(sock)


def test_a_large_body_after_a_small_head_counts_nothing(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay")
    body = json.dumps({"model": "m", "input": "x" * (6 * 1024 * 1024)}).encode()
    start = b"POST /openai/v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    post = start + f"content-length: {len(body)}\r\n\r\n".encode()
    with connect(proxy) as sock:
        for _ in range(2):  # head and body in one write: the server's reads hold both
            sock.sendall(post + body)
            status, _, answer = read_answer(sock)
            assert status == 422 and b"cassette_miss" in answer, "the body read whole, a miss"
        sock.sendall(start + b"transfer-encoding: chunked\r\n\r\n")
        for at in range(0, len(body), 1_000_000):  # chunked, 1 MB at a time: the same body
            piece = body[at : at + 1_000_000]
            sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
        status, _, answer = read_answer(sock)
        assert status == 422 and b"cassette_miss" in answer
        sock.sendall(head(HEAD_LIMIT - 100))
        assert read_answer(sock)[0] == 200, "the same connection, a new head's count"


def test_each_keep_alive_request_has_its_own_count(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay")
    near = head(HEAD_LIMIT - 1000)
    with connect(proxy) as sock:
        for _ in range(3):  # one at a time, 190 KiB of heads in all
            sock.sendall(near)
            assert read_answer(sock)[0] == 200
        sock.sendall(near * 3)  # pipelined: a read holds the end of one head, the next's start
        assert [read_answer(sock)[0] for _ in range(3)] == [200, 200, 200]
        sock.sendall(head(HEAD_LIMIT + 10))
        assert read_answer(sock)[0] == 431
        assert closed(sock)


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(head_limits, "HEAD_SECONDS", 1.0)
    return 1.0


def test_a_silent_socket_is_closed_unanswered_at_the_deadline(
    make_proxy: MakeProxy, short_deadline: float
) -> None:
    proxy = make_proxy(mode="replay")
    with connect(proxy) as sock:
        began = time.monotonic()
        assert sock.recv(65536) == b"", "closed, with no answer to a request never made"
        waited = time.monotonic() - began
    assert 0.8 <= waited <= 4, f"closed after {waited:.1f} s, not about 1 s"


def test_a_head_sent_byte_by_byte_past_the_deadline_is_a_408(
    make_proxy: MakeProxy, short_deadline: float
) -> None:
    proxy = make_proxy(mode="replay")
    with connect(proxy) as sock:
        sock.sendall(HEALTH + b"\r\n")
        assert read_answer(sock)[0] == 200, "an answer, then the same socket trickles"
        began = time.monotonic()
        for byte in b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\nx-slow: 1":
            sock.sendall(bytes([byte]))
            if select.select([sock], [], [], 0.1)[0]:
                break
        status, top, body = read_answer(sock)
        waited = time.monotonic() - began
        assert status == 408 and b"connection: close" in top
        assert json.loads(body)["error"]["type"] == "request_timeout"
        assert closed(sock)
    assert 0.8 <= waited <= 4, f"refused after {waited:.1f} s, not about 1 s"


def test_a_slow_head_within_the_deadline_is_served(
    make_proxy: MakeProxy, short_deadline: float
) -> None:
    proxy = make_proxy(mode="replay")
    with connect(proxy) as sock:
        for _ in range(3):  # each head takes 0.6 s; 1.8 s on one connection in all
            for piece in (HEALTH[:10], HEALTH[10:], b"\r\n"):
                sock.sendall(piece)
                time.sleep(0.3 if piece != b"\r\n" else 0)
            assert read_answer(sock)[0] == 200


def test_the_real_command_refuses_a_big_head_and_says_so_in_its_log(tmp_path: Path) -> None:
    """`tapeproxy serve` as users run it (uvloop, not the tests' asyncio loop)."""
    server = Serve(["--mode", "replay"], tmp_path)
    try:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head(HEAD_LIMIT - 10) * 2)
            assert [read_answer(sock)[0] for _ in range(2)] == [200, 200]
            sent, answer = flood(sock, HEALTH + b"x-big: ")
            assert answer.startswith(b"HTTP/1.1 431 ") and sent < 4 * 1024 * 1024
    finally:
        status, err = server.stop()
    assert status == 0 and "refused a request whose headers passed 65536 bytes (431)" in err
