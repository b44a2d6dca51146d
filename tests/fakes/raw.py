"""A raw-socket upstream for what a well-behaved HTTP server will not send: bodies cut
short, repeated or non-latin-1 headers. Each connection gets the next scripted answer."""

from __future__ import annotations

import socket
import ssl
import threading
from collections import deque
from types import TracebackType
from typing import Self


class LoopbackServer:
    """A listening socket on 127.0.0.1, served by a thread while the `with` block lasts;
    `handle` gets each connection."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                continue
            self.handle(conn)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()


class RawUpstream(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.answers: deque[bytes] = deque()
        self.requests: list[bytes] = []

    def answer(self, *raw: bytes) -> None:
        """Queue whole responses (status line, headers, body) to send as they are."""
        self.answers.extend(raw)

    def handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                request += chunk
            self.requests.append(request)
            if self.answers:
                conn.sendall(self.answers.popleft())


class KeepAliveUpstream(LoopbackServer):
    """Answers many requests on one connection, each with the next scripted answer; an answer
    scripted as `(raw, True)` closes the connection after it. `connections` counts them, and
    `requests` holds each request's bytes (head and body) as they came."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__()
        if tls is not None:
            self.url = self.url.replace("http://", "https://")
        self._tls = tls
        self.answers: deque[tuple[bytes, bool]] = deque()
        self.requests: list[bytes] = []
        self.connections = 0

    def answer(self, raw: bytes, close: bool = False) -> None:
        self.answers.append((raw, close))

    def handle(self, conn: socket.socket) -> None:
        self.connections += 1
        if self._tls is not None:
            try:
                conn = self._tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()
                return
        with conn:
            conn.settimeout(5)
            pending = b""
            while self.answers:
                try:
                    head, body, pending = read_request(conn, pending)
                    request = None if head is None else head + b"\r\n\r\n" + body
                except OSError:
                    return
                if request is None:
                    return
                self.requests.append(request)
                raw, close = self.answers.popleft()
                conn.sendall(raw)
                if close:
                    return


def read_request(conn: socket.socket, pending: bytes) -> tuple[bytes | None, bytes, bytes]:
    """One request's head and body (of its Content-Length), and the bytes after them; a
    head of None when the connection closed first."""
    while b"\r\n\r\n" not in pending:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b"", b""
        pending += chunk
    head, _, rest = pending.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b"", b""
        rest += chunk
    return head, rest[:length], rest[length:]
