"""The client's connection through the real server: the request line as it goes upstream,
pipelined requests, 100-continue, a HEAD answer and the keep-alive timer with joined writes
(doors/head_limits.py Coalescing), and each frame of a live or timed replay leaving when it
comes."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tapeproxy.cli.server import KEEP_ALIVE_SECONDS
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import ProxyServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/base#frag", "http://127.0.0.1:9/a\tb"])
def test_an_upstream_url_that_would_break_the_request_line_is_refused_at_start(
    url: str, tmp_path: Path
) -> None:
    """The request line takes the upstream URL's path as it is (d9adc8b): a `#frag` went out
    as `GET /base#frag/item` (RFC 9112 origin-form holds no fragment; urlsplit had dropped
    it, and the client's path with it), a tab raw. Such a URL is refused, with the reason."""
    done = subprocess.run(
        [sys.executable, "-m", "tapeproxy", "serve", "--port", "0", "--upstream", f"tools={url}"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "a URL holds no space and no #fragment" in done.stderr


# The joined writes (doors/head_limits.py Coalescing): a write is held to the next one or the
# end of the loop's pass. What must still hold: frames leave when they come, nothing held is
# reordered, lost or kept back.
EMBED = json.dumps({"model": "m", "input": "x"}).encode()
EMBED_REQUEST = (
    b"POST /openai/v1/embeddings HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(EMBED), EMBED)
)
STREAM = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _connect(proxy: ProxyServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1])), timeout=10)


def _replayer(make_proxy: MakeProxy) -> ProxyServer:
    recorder = make_proxy(mode="record")
    assert httpx.post(recorder.url + "/openai/v1/embeddings", content=EMBED).status_code == 200
    recorder.stop()
    return make_proxy(mode="replay", repeat="repeat-last")


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """`count` whole answers with a Content-Length, read off the socket in order."""
    data, out = b"", list[bytes]()
    while len(out) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end != -1:
            head = data[:head_end].lower()
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(data) >= head_end + 4 + length:
                out.append(data[: head_end + 4 + length])
                data = data[head_end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(out)} answers"
        data += chunk
    assert data == b"", "nothing after the answers"
    return out


def test_pipelined_requests_get_their_answers_in_order_each_once(make_proxy: MakeProxy) -> None:
    player = _replayer(make_proxy)
    health = b"GET /__tapeproxy/health HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(player) as sock:
        sock.sendall(EMBED_REQUEST + health + EMBED_REQUEST + health)
        answers = _answers(sock, 4)
        sock.sendall(health)  # the connection is still good for more
        [last] = _answers(sock, 1)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 4
    assert answers[0] == answers[2] and b'"status"' in answers[1] and answers[1:2] == [last]


def test_expect_100_continue_is_answered_before_the_body_is_sent(make_proxy: MakeProxy) -> None:
    """uvicorn writes `100 Continue` itself, then waits for the body: held, it must still go at
    the end of the pass, or the client waits for it until its own timeout."""
    player = _replayer(make_proxy)
    head, _, body = EMBED_REQUEST.partition(b"\r\n\r\n")
    with _connect(player) as sock:
        sock.sendall(head + b"\r\nexpect: 100-continue\r\n\r\n")
        sock.settimeout(1)
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.settimeout(10)
        sock.sendall(body)
        [answer] = _answers(sock, 1)
    assert answer.startswith(b"HTTP/1.1 200 OK")


def test_a_head_answer_and_a_keep_alive_timeout_send_what_is_held(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="passthrough")
    with _connect(proxy) as sock:
        sock.sendall(b"HEAD /__tapeproxy/health HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(1)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 ") and first.endswith(b"\r\n\r\n"), first
        sock.settimeout(KEEP_ALIVE_SECONDS + 5)
        assert sock.recv(65536) == b""  # closed by uvicorn's keep-alive timer, nothing more


def _frame_times(proxy: ProxyServer, timing: str | None) -> list[float]:
    """When each SSE event of a streamed chat reached the client, from the request's send."""
    headers = {"x-tapeproxy-timing": timing} if timing else {}
    started = time.monotonic()
    times: list[float] = []
    with httpx.stream(
        "POST", proxy.url + "/openai/v1/chat/completions", json=STREAM, headers=headers
    ) as response:
        pending = b""
        for chunk in response.iter_raw():
            pending += chunk
            while b"\n\n" in pending:
                _, _, pending = pending.partition(b"\n\n")
                times.append(time.monotonic() - started)
    return times


def test_each_frame_of_a_live_or_timed_replay_leaves_when_it_comes(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    """A frame is held at most to the end of the loop's pass: the gaps the client sees are
    the upstream's (live), and the recorded ones times the factor (replay)."""
    fake.frame_delay = 0.15
    recorder = make_proxy(mode="record")
    live = _frame_times(recorder, None)
    recorder.stop()
    assert len(live) >= 4
    gaps = [b - a for a, b in itertools.pairwise(live[:-1])]
    assert all(0.1 < gap < 0.25 for gap in gaps), gaps
    [path] = sorted(cassettes.rglob("*.json"))
    recorded = [f["ms"] / 1000 for f in json.loads(path.read_text())["response"]["frames"]]
    player = make_proxy(mode="replay", repeat="repeat-last")
    timed = _frame_times(player, "1")
    # From the first frame on: a fresh server's first answer may start late (the cassette is
    # read then), and what is tested is that the frames then keep their recorded offsets.
    late = [
        (got - timed[0]) - (want - recorded[0]) for got, want in zip(timed, recorded, strict=False)
    ]
    assert all(-0.01 < d < 0.08 for d in late), late
