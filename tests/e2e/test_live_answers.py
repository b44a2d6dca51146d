"""Live answers through the real server: the relay (chunks recorded as they pass), a client
that hangs up, the end of an answer, and the request head's cap and deadline; upstreams
scripted byte by byte, raw client sockets, many clients at once, a slow writer thread."""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tapeproxy.doors import head_limits
from tests.conftest import MakeProxy
from tests.fakes.socket_upstream import SocketUpstream
from tests.fakes.upstream import FakeUpstream
from tests.support import ProxyServer, files_under, wait_for

# After its client left at the final frame, the upstream is read on for the read timeout:
# these tests set it to this.
GRACE_AFTER_FINAL_FRAME = 2.0

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**CHAT, "stream": True}
CHAT_BYTES = json.dumps(CHAT).encode()
PLAIN = json.dumps({"id": "x", "choices": [{"message": {"content": "hello " * 50}}]}).encode()


def connect(proxy: ProxyServer) -> socket.socket:
    host, port = proxy.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def post_bytes(path: str = "/openai/v1/chat/completions", body: bytes = CHAT_BYTES) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def read_until(sock: socket.socket, marker: bytes, data: bytes = b"") -> bytes:
    while marker not in data:
        more = sock.recv(65536)
        assert more, f"closed before {marker!r}: {data[-200:]!r}"
        data += more
    return data


def scripted(*steps: bytes | float) -> SocketUpstream:
    """An upstream that sends each bytes step as it is and sleeps each float step."""

    def answer(conn: socket.socket) -> None:
        for step in steps:
            if isinstance(step, float):
                time.sleep(step)
            else:
                conn.sendall(step)

    return SocketUpstream(answer)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


# The fake closes each connection after one answer, and says so: else the proxy's pool may
# send the next request down a socket that is closing (a reset, seen as unreachable).
OK_JSON = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
PACKED = gzip.compress(PLAIN, mtime=0)

# name -> (the upstream's steps, what the client must get)
WHOLE: dict[str, tuple[tuple[bytes | float, ...], bytes]] = {
    "length": ((OK_JSON + b"content-length: %d\r\n\r\n" % len(PLAIN) + PLAIN,), PLAIN),
    "length-in-pieces": (
        (OK_JSON + b"content-length: %d\r\n\r\n" % len(PLAIN), PLAIN[:10], 0.05, PLAIN[10:]),
        PLAIN,
    ),
    "chunked": (
        (
            OK_JSON + b"transfer-encoding: chunked\r\n\r\n",
            chunk(PLAIN[:7]),
            0.05,
            chunk(PLAIN[7:]),
            0.05,
            b"0\r\n\r\n",
        ),
        PLAIN,
    ),
    "chunked-end-with-last-data": (
        (OK_JSON + b"transfer-encoding: chunked\r\n\r\n", chunk(PLAIN) + b"0\r\n\r\n"),
        PLAIN,
    ),
    "until-close": ((OK_JSON + b"\r\n", PLAIN[:5], 0.05, PLAIN[5:]), PLAIN),
    "empty": ((OK_JSON + b"content-length: 0\r\n\r\n",), b""),
    "empty-chunked": ((OK_JSON + b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n",), b""),
    "gzip-length": (
        (OK_JSON + b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(PACKED) + PACKED,),
        PLAIN,
    ),
    "gzip-chunked": (
        (
            OK_JSON + b"content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n",
            chunk(PACKED[:20]),
            0.05,
            chunk(PACKED[20:]) + b"0\r\n\r\n",
        ),
        PLAIN,
    ),
}

CUT: dict[str, tuple[bytes | float, ...]] = {
    "chunked-without-its-last-chunk": (
        OK_JSON + b"transfer-encoding: chunked\r\n\r\n",
        chunk(PLAIN[:7]),
        0.05,
        chunk(PLAIN[7:]),
    ),
    "length-short": (OK_JSON + b"content-length: %d\r\n\r\n" % len(PLAIN), PLAIN[:-3]),
    "gzip-length-short": (
        OK_JSON + b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(PACKED),
        PACKED[:-5],
    ),
    "sse-without-its-last-chunk": (
        SSE_HEAD,
        chunk(b'data: {"a": 1}\n\n'),
        chunk(b"data: [DONE]\n\n"),
    ),
}


@pytest.mark.parametrize("mode", ["passthrough", "record"])
@pytest.mark.parametrize("case", WHOLE)
def test_whole_answers_arrive_whole_in_every_framing(
    make_proxy: MakeProxy, cassettes: Path, mode: str, case: str
) -> None:
    steps, expected = WHOLE[case]
    with scripted(*steps) as upstream:
        proxy = make_proxy(mode=mode, upstream={"openai": upstream.url})
        for _ in range(2):  # and a second time on the same pooled client
            response = httpx.post(proxy.url + "/openai/v1/chat/completions", json=CHAT)
            assert response.status_code == 200
            assert response.content == expected
        stats = proxy.stats
        proxy.stop()
    assert (stats["errors"], stats["aborted"]) == (0, 0), stats
    assert len(files_under(cassettes)) == (2 if mode == "record" else 0)


@pytest.mark.parametrize("mode", ["passthrough", "record"])
@pytest.mark.parametrize("case", CUT)
def test_an_upstream_that_stops_short_is_a_cut_for_the_client_and_counted(
    make_proxy: MakeProxy, cassettes: Path, mode: str, case: str
) -> None:
    with scripted(*CUT[case]) as upstream:
        proxy = make_proxy(mode=mode, upstream={"openai": upstream.url})
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(proxy.url + "/openai/v1/chat/completions", json=CHAT)
        wait_for(lambda: proxy.stats["errors"] == 1)
        assert proxy.stats["aborted"] == 0
        proxy.stop()
    assert files_under(cassettes) == {}


@pytest.mark.parametrize("mode", ["passthrough", "record"])
@pytest.mark.parametrize(
    ("method", "status", "extra"),
    [
        ("HEAD", 200, b"content-length: 1234\r\n"),
        ("POST", 204, b""),
        ("POST", 304, b"content-length: 99\r\n"),
    ],
)
def test_bodiless_answers_leave_the_keep_alive_connection_clean(
    make_proxy: MakeProxy, mode: str, method: str, status: int, extra: bytes
) -> None:
    reason = {200: b"OK", 204: b"No Content", 304: b"Not Modified"}[status]
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n" % (status, reason) + extra
    with scripted(head + b"connection: close\r\n\r\n") as upstream:
        proxy = make_proxy(mode=mode, upstream={"openai": upstream.url})
        with connect(proxy) as sock:
            request = post_bytes().replace(b"POST", method.encode(), 1)
            sock.sendall(request)
            answer = read_until(sock, b"\r\n\r\n")
            top, _, rest = answer.partition(b"\r\n\r\n")
            assert top.startswith(b"HTTP/1.1 %d" % status), top
            if method == "HEAD":
                assert b"content-length: 1234" in top.lower()
            assert b"transfer-encoding" not in top.lower() or status == 200, top
            # The same socket serves a health check next: no stray body bytes came first.
            sock.sendall(b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\n\r\n")
            after = read_until(sock, b"}", rest)
            assert after.startswith(b"HTTP/1.1 200"), after[:80]
        stats = proxy.stats
    assert (stats["errors"], stats["aborted"]) == (0, 0), stats


def stream_request() -> bytes:
    return post_bytes(body=json.dumps({**STREAM, "model": "gpt-4o-mini"}).encode())


@contextlib.contextmanager
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """uvicorn's and asyncio's logs into caplog too (where a leaked task would show)."""
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "asyncio")]
    for logger in loggers:
        logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="tapeproxy"):
            yield
    finally:
        for logger in loggers:
            logger.removeHandler(caplog.handler)


def noisy(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Errors, tracebacks and asyncio's complaints, but not those of the tests' fake
    upstreams: an aiohttp *server* (web_protocol) is only ever a fake, tapeproxy runs on
    uvicorn, and a fake torn down in an earlier test may be collected during this one."""
    return [
        r.getMessage()
        for r in caplog.records
        if (r.exc_info or r.name == "asyncio" or r.levelno >= logging.ERROR)
        and "aiohttp/web_protocol.py" not in r.getMessage()
    ]


def streaming(proxy: ProxyServer, clients: int, until: bytes) -> list[socket.socket]:
    """`clients` sockets, each asking for a stream at once and each read up to `until`."""
    socks = [connect(proxy) for _ in range(clients)]
    for sock in socks:
        sock.sendall(stream_request())
    for sock in socks:
        read_until(sock, until)
    return socks


def test_many_clients_leaving_mid_stream_at_once_each_abort_once(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.frame_delay = 0.2
    clients = 16
    with server_log(caplog):
        proxy = make_proxy(mode="record")
        socks = streaming(proxy, clients, b"data:")
        for sock in socks:  # all together, with a reset, as a killed client does
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            sock.close()
        wait_for(lambda: proxy.stats["aborted"] == clients)
        time.sleep(0.5)
        stats = proxy.stats
        proxy.stop()
    assert (stats["aborted"], stats["recorded"], stats["errors"]) == (clients, 0, 0), stats
    assert files_under(cassettes) == {}
    assert noisy(caplog) == []
    lines = [r.getMessage() for r in caplog.records if "key=" in r.getMessage()]
    assert len(lines) == clients and all("nothing recorded" in line for line in lines), lines


@pytest.mark.parametrize("case", ["length", "chunked-end-with-last-data", "until-close"])
def test_clients_that_close_as_soon_as_the_answer_ended_are_not_aborts(
    make_proxy: MakeProxy, case: str
) -> None:
    """Passthrough sends the last chunk with the end of the body: a client that closes the
    moment it has it must not be taken for one that left mid-answer."""
    steps, _ = WHOLE[case]
    with scripted(*steps) as upstream:
        proxy = make_proxy(mode="passthrough", upstream={"openai": upstream.url})
        for _ in range(20):
            with connect(proxy) as sock:
                sock.sendall(post_bytes())
                data = read_until(sock, b"\r\n0\r\n\r\n")
                assert data.startswith(b"HTTP/1.1 200") and data.count(b"hello") == 50
        time.sleep(0.3)
        stats = proxy.stats
    assert (stats["aborted"], stats["errors"], stats["upstream_calls"]) == (0, 0, 20), stats


def slow_writes(proxy: ProxyServer, seconds: float) -> list[float]:
    """Each recording's trip to a writer thread takes `seconds` more (a slow disk); the times
    the writes ended."""
    keeper: Any = proxy.app.front.engine.keeper  # type: ignore[attr-defined]
    write: Callable[..., Any] = keeper._write
    ended: list[float] = []

    def slow(*args: Any) -> Any:
        time.sleep(seconds)
        try:
            return write(*args)
        finally:
            ended.append(time.monotonic())

    keeper._write = slow
    return ended


def test_a_grace_that_runs_out_during_the_commit_still_keeps_it_once(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The client closed at its final frame; the upstream ended at once; the write took longer
    than the grace: the cancellation lands in the shielded commit, which completes."""
    with server_log(caplog):
        proxy = make_proxy(mode="record", read_timeout=GRACE_AFTER_FINAL_FRAME)
        ended = slow_writes(proxy, GRACE_AFTER_FINAL_FRAME + 1)
        with connect(proxy) as sock:
            sock.sendall(stream_request())
            read_until(sock, b"[DONE]")
        wait_for(lambda: bool(ended), timeout=GRACE_AFTER_FINAL_FRAME + 5)
        wait_for(lambda: proxy.stats["recorded"] == 1)
        stats = proxy.stats
        proxy.stop()
    assert (stats["aborted"], stats["errors"]) == (0, 0), stats
    assert len(files_under(cassettes)) == 1
    lines = [r.getMessage() for r in caplog.records if "key=" in r.getMessage()]
    assert len(lines) == 1 and "nothing recorded" not in lines[0], lines
    assert noisy(caplog) == []


def test_a_commit_failing_after_its_request_ended_is_logged_not_left_unretrieved(
    make_proxy: MakeProxy, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """The grace ran out during a (slow) commit, so the request's task is gone when the
    commit fails: the failure is one logged error, not asyncio's "never retrieved"."""
    # Paced, so the stream is not all in when its head comes: a whole answer's head and
    # frames would wait for the commit (responses.send_live), and the client would see none.
    fake.frame_delay = 0.01
    with server_log(caplog):
        proxy = make_proxy(mode="record", read_timeout=GRACE_AFTER_FINAL_FRAME)
        keeper: Any = proxy.app.front.engine.keeper  # type: ignore[attr-defined]

        def failing(*args: Any) -> Any:
            time.sleep(GRACE_AFTER_FINAL_FRAME + 1)
            raise RuntimeError("a bug of tapeproxy's own, say")

        keeper._write = failing
        with connect(proxy) as sock:
            sock.sendall(stream_request())
            # The last chunk ([DONE]) waits for the commit: the client leaves before it,
            # once the upstream sent it (the grace then runs out during the commit).
            read_until(sock, b'"finish_reason":"stop"')
            time.sleep(0.2)
        wait_for(
            lambda: any("after its request ended" in r.getMessage() for r in caplog.records),
            timeout=GRACE_AFTER_FINAL_FRAME + 5,
        )
        proxy.stop()
        gc.collect()  # where asyncio reports a task's exception nobody retrieved
    assert not [r for r in caplog.records if r.name == "asyncio"], noisy(caplog)


def test_a_shutdown_during_the_commit_keeps_the_exchange_and_logs_it_once(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with server_log(caplog):
        proxy = make_proxy(mode="record", shutdown_timeout=0.5)
        ended = slow_writes(proxy, 2.0)
        with connect(proxy) as sock:
            sock.sendall(stream_request())
            read_until(sock, b"[DONE]")
            proxy.stop()  # uvicorn cancels the request after 1 s; the write takes 2
            sock.settimeout(5)
            with contextlib.suppress(OSError):
                while sock.recv(65536):
                    pass
    assert ended, "the write ended before the server did"
    assert len(files_under(cassettes)) == 1
    lines = [r.getMessage() for r in caplog.records if "key=" in r.getMessage()]
    assert len(lines) == 1 and "nothing recorded" not in lines[0], lines
    assert noisy(caplog) == []


def exchanges(cassettes: Path) -> list[Path]:
    return [p for p in cassettes.rglob("*.json") if ".tapeproxy" not in p.parts]


def test_an_exchange_is_on_disk_before_the_client_sees_the_end(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    for n in range(1, 6):
        with connect(proxy) as sock:
            sock.sendall(post_bytes(body=json.dumps({**STREAM, "n": n}).encode()))
            read_until(sock, b"\r\n0\r\n\r\n")
            assert len(exchanges(cassettes)) == 2 * n - 1
        with connect(proxy) as sock:
            sock.sendall(post_bytes(body=json.dumps({**CHAT, "n": n}).encode()))
            read_until(sock, b"\r\n0\r\n\r\n")
            assert len(exchanges(cassettes)) == 2 * n


# The head: a cap and a deadline that never refuse an ordinary request.


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(head_limits, "HEAD_SECONDS", 0.5)
    return 0.5


def answers(sock: socket.socket, count: int, data: bytes = b"") -> list[int]:
    """The statuses of `count` answers read off `sock` (content-length or chunked)."""
    statuses: list[int] = []
    while len(statuses) < count:
        data = read_until(sock, b"\r\n\r\n", data)
        top, _, data = data.partition(b"\r\n\r\n")
        statuses.append(int(top.split()[1]))
        lower = top.lower()
        if b"transfer-encoding: chunked" in lower:
            data = read_until(sock, b"0\r\n\r\n", data)
            data = data.partition(b"0\r\n\r\n")[2]
        else:
            length = int(lower.partition(b"content-length:")[2].split(b"\r\n")[0])
            while len(data) < length:
                more = sock.recv(65536)
                assert more
                data += more
            data = data[length:]
    return statuses


PIPELINE = (
    post_bytes(body=json.dumps({**CHAT, "text": "a\r\n\r\nGET / HTTP/1.1\r\n\r\n"}).encode())
    + b"POST /openai/v1/embeddings HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"5;ext=1\r\n"
    + CHAT_BYTES[:5]
    + b"\r\n"
    + b"%x\r\n" % (len(CHAT_BYTES) - 5)
    + CHAT_BYTES[5:]
    + b"\r\n0\r\nx-trailer: yes\r\n\r\n"
    + b"GET /__tapeproxy/health HTTP/1.0\r\n\r\n"
)


def test_a_pipeline_split_at_every_byte_is_answered_whole(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay")
    for at in range(0, len(PIPELINE), 3):
        with connect(proxy) as sock:
            sock.sendall(PIPELINE[:at])
            time.sleep(0.002)
            sock.sendall(PIPELINE[at:])
            assert answers(sock, 3) == [422, 422, 200], at


def test_a_slow_upload_and_a_long_answer_outlast_the_head_deadline(
    make_proxy: MakeProxy, fake: FakeUpstream, short_deadline: float
) -> None:
    fake.frame_delay = 0.3  # a stream of a few frames: well past 0.5 s
    proxy = make_proxy(mode="record")
    body = json.dumps({**STREAM, "model": "gpt-4o-mini"}).encode()
    with connect(proxy) as sock:
        sock.sendall(post_bytes(body=body)[: -len(body)])
        for at in range(0, len(body), len(body) // 4 + 1):  # the body over 1.2 s
            time.sleep(0.3)
            sock.sendall(body[at : at + len(body) // 4 + 1])
        data = read_until(sock, b"\r\n0\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 200") and b"[DONE]" in data
        # Expect: 100-continue, the body only once told to go on, after the deadline.
        head = post_bytes(body=body)[: -len(body)].replace(
            b"host: x\r\n", b"host: x\r\nexpect: 100-continue\r\n"
        )
        sock.sendall(head)
        time.sleep(0.8)
        sock.sendall(body)
        data = read_until(sock, b"\r\n0\r\n\r\n")
        assert b"HTTP/1.1 200" in data and b"[DONE]" in data, data[:200]


def test_an_upgrade_request_with_a_large_body_is_not_taken_for_a_large_head(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(mode="replay")
    body = json.dumps({**CHAT, "pad": "x" * 200_000}).encode()
    request = post_bytes(body=body).replace(
        b"host: x\r\n", b"host: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n"
    )
    with connect(proxy) as sock:
        sock.sendall(request)
        ready = select.select([sock], [], [], 5)[0]
        assert ready, "no answer"
        answer = sock.recv(65536)
    assert not answer.startswith(b"HTTP/1.1 431"), answer[:200]


def test_a_pipelined_head_held_back_by_the_server_does_not_cut_a_long_answer(
    make_proxy: MakeProxy, fake: FakeUpstream, short_deadline: float
) -> None:
    """A client pipelines health checks behind a stream. uvicorn stops reading when a request
    is queued behind one in progress, so the rest of the next head waits in the socket buffer
    through no fault of the client: its deadline must not run out and cut the stream."""
    fake.frame_delay = 0.3
    proxy = make_proxy(mode="record")
    health = b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\n\r\n"
    with connect(proxy) as sock:
        sock.sendall(stream_request())
        started = read_until(sock, b"data:")  # the stream is under way, its watch waiting
        sock.sendall(health + health[:10])  # one queued (reading paused), one begun
        time.sleep(0.1)
        sock.sendall(health[10:])
        assert answers(sock, 3, started) == [200, 200, 200]


def test_many_clients_leaving_at_their_final_frame_at_once_are_all_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.end_delay = 0.3  # the end-of-body marker comes after every client has left
    clients = 12
    with server_log(caplog):
        proxy = make_proxy(mode="record")
        socks = streaming(proxy, clients, b"[DONE]")
        for sock in socks:
            sock.close()
        wait_for(lambda: proxy.stats["recorded"] == clients)
        time.sleep(0.3)
        stats = proxy.stats
        proxy.stop()
    assert (stats["aborted"], stats["errors"]) == (0, 0), stats
    assert len(exchanges(cassettes)) == clients
    assert noisy(caplog) == []


def test_a_shutdown_with_many_streams_open_cuts_each_once_quietly(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.frame_delay = 0.5
    clients = 8
    with server_log(caplog):
        proxy = make_proxy(mode="record", shutdown_timeout=0.5)
        socks = streaming(proxy, clients, b"data:")
        proxy.stop()
        for sock in socks:
            data = b""
            with contextlib.suppress(OSError):
                while more := sock.recv(65536):
                    data += more
            assert b"\r\n0\r\n\r\n" not in data, "a cut stream must not end cleanly"
            sock.close()
    lines = [r.getMessage() for r in caplog.records if "key=" in r.getMessage()]
    assert len(lines) == clients and all("nothing recorded" in line for line in lines), lines
    assert noisy(caplog) == []
    assert exchanges(cassettes) == []


def test_a_client_gone_before_the_upstream_answered_is_one_abort_and_no_error(
    make_proxy: MakeProxy,
    hanging_upstream: tuple[str, threading.Event],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, hung_up = hanging_upstream
    with server_log(caplog):
        proxy = make_proxy(mode="record", upstream={"openai": url})
        with connect(proxy) as sock:
            sock.sendall(post_bytes())
            time.sleep(0.3)
        assert hung_up.wait(5), "the upstream call was closed"
        wait_for(lambda: proxy.stats["aborted"] == 1)
        time.sleep(0.2)
        stats = proxy.stats
        proxy.stop()
    assert (stats["aborted"], stats["errors"], stats["recorded"]) == (1, 0, 0), stats
    assert noisy(caplog) == []
