"""A loopback upstream that writes the raw HTTP answers a test scripts byte by byte
(compressed how, and when), and the answers of the inflate tests."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import zlib
from collections.abc import Callable

from tests.fakes.raw import LoopbackServer

Answer = Callable[[socket.socket], None]


class SocketUpstream(LoopbackServer):
    """A loopback upstream that reads each request whole and lets `answer` write the raw
    HTTP answer, so a test says exactly which bytes, compressed how, and when."""

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.answer = answer

    def handle(self, conn: socket.socket) -> None:
        threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and (chunk := conn.recv(65536)):
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")[1:]
                    if line.startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length and (chunk := conn.recv(65536)):
                body += chunk
            with contextlib.suppress(OSError):  # the proxy cut the answer
                self.answer(conn)


def whole(body: bytes, encoding: str | None) -> Answer:
    """An answer with a Content-Length, `body` sent as it is, marked with `encoding`."""

    def answer(conn: socket.socket) -> None:
        marked = f"content-encoding: {encoding}\r\n" if encoding else ""
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"{marked}content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )

    return answer


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


PLAIN = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok " * 2000},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2000, "total_tokens": 2001},
    },
    indent=2,
).encode()


def event(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


EVENTS = [
    event({"role": "assistant", "content": ""}),
    *(event({"content": word}) for word in ("Hello", " there", "!")),
    event({}, "stop"),
]


def sse(event: dict[str, object] | None) -> bytes:
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: %s\n\n" % (json.dumps({**body, **event}).encode() if event else b"[DONE]")


def gzip_stream(gate: threading.Event, opened: list[bool]) -> Answer:
    """An SSE answer in gzip, each event flushed in its own chunk (as a provider's gzip stream
    is): the first one, then nothing until the client has it (the gate), then the rest."""

    def answer(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        for n, event in enumerate([*EVENTS, None]):
            conn.sendall(chunk(packer.compress(sse(event)) + packer.flush(zlib.Z_SYNC_FLUSH)))
            if n == 1:
                opened.append(gate.wait(10))
        conn.sendall(chunk(packer.flush()) + b"0\r\n\r\n")

    return answer
