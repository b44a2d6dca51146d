"""A forward proxy on 127.0.0.1, as a corporate network has one: `CONNECT host:port` tunnels
(HTTPS_PROXY) and absolute-form requests (HTTP_PROXY), each connection in a thread. Host
names in `hosts` are reached at the address they map to: names nothing else resolves, so a
request that reaches their upstream went through this proxy. With `credentials`, a request
without that `Proxy-Authorization` is answered 407."""

from __future__ import annotations

import base64
import select
import socket
import threading
from dataclasses import dataclass

from tests.fakes.raw import LoopbackServer, read_request


@dataclass(frozen=True)
class Seen:
    """One request the proxy read: its method and target, and its Proxy-Authorization."""

    method: str
    target: str
    authorization: str | None


class ForwardProxy(LoopbackServer):
    def __init__(self, hosts: dict[str, str], credentials: str | None = None) -> None:
        super().__init__()
        self.hosts = hosts
        self.seen: list[Seen] = []
        self.wanted = None
        if credentials is not None:
            self.wanted = "Basic " + base64.b64encode(credentials.encode()).decode()

    def handle(self, conn: socket.socket) -> None:
        threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            pending = b""
            try:
                while True:
                    head, body, pending = read_request(conn, pending)
                    if head is None:
                        return
                    if not self._one(conn, head, body):
                        return
            except OSError:
                return

    def _one(self, conn: socket.socket, head: bytes, body: bytes) -> bool:
        """Answers one request; False when the connection is done with (a tunnel ended)."""
        line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = line.split(" ", 2)
        fields = [field.partition(":") for field in lines]
        auth = next((v.strip() for k, _, v in fields if k.lower() == "proxy-authorization"), None)
        self.seen.append(Seen(method, target, auth))
        if self.wanted is not None and auth != self.wanted:
            conn.sendall(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n\r\n'
            )
            return True
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            with socket.create_connection((self.hosts.get(host, host), int(port)), 10) as up:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                _pipe(conn, up)
            return False
        # Absolute form: `GET http://host:port/path HTTP/1.1`, sent on in origin form, one
        # request per upstream connection (asked to close), its answer read to the close.
        rest = target.split("://", 1)[1]
        authority, slash, path = rest.partition("/")
        host, _, port = authority.rpartition(":")
        kept = [
            f"{k}:{v}"
            for k, _, v in fields
            if k.lower() not in ("proxy-authorization", "proxy-connection", "connection")
        ]
        out = "\r\n".join([f"{method} {slash}{path} HTTP/1.1", *kept, "Connection: close"])
        with socket.create_connection((self.hosts.get(host, host), int(port or 80)), 10) as up:
            up.sendall(out.encode("latin-1") + b"\r\n\r\n" + body)
            while chunk := up.recv(65536):
                conn.sendall(chunk)
        return False  # the answer's framing was the upstream's: close, as it did


def _pipe(one: socket.socket, other: socket.socket) -> None:
    """Bytes both ways until either side closes."""
    peers = {one: other, other: one}
    while True:
        ready, _, _ = select.select(list(peers), [], [], 10)
        if not ready:
            return
        for sock in ready:
            data = sock.recv(65536)
            if not data:
                return
            peers[sock].sendall(data)
