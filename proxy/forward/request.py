"""A forward request's head, read by h11: a CONNECT's `host:port`, an absolute-form URL's
host and port; its Proxy-Authorization checked against the admin token."""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

# A CONNECT's host: a DNS name or an IP address (v6 without its brackets), nothing else.
NAME = re.compile(r"[A-Za-z0-9_.:-]+")


class BadRequest(Exception):
    """A forward request that cannot be read: its one-line reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ProxyRequest:
    method: str
    host: str
    port: int
    headers: list[tuple[bytes, bytes]]
    rest: bytes  # what came after a CONNECT's head, before it was answered


def parse_head(head: bytes) -> ProxyRequest:
    """The request whose whole head starts `head`; BadRequest when h11 cannot read it or its
    target is not a CONNECT's `host:port` or an absolute `http://` URL."""
    connection = h11.Connection(h11.SERVER)
    end = head.index(b"\r\n\r\n") + 4
    connection.receive_data(head[:end])
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError as exc:
        raise BadRequest(f"malformed request: {exc}") from None
    if not isinstance(event, h11.Request):
        raise BadRequest("malformed request: no complete request line and headers")
    method, target = event.method.decode("ascii"), event.target.decode("latin-1")
    headers = [(k.lower(), v) for k, v in event.headers]
    if method == "CONNECT":
        host, port = authority(target)
        return ProxyRequest(method, host, port, headers, head[end:])
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise BadRequest(f"malformed request target {target[:200]!r}: expected http://HOST/PATH")
    return ProxyRequest(method, parts.hostname.lower(), parts.port or 80, headers, b"")


def authority(target: str) -> tuple[str, int]:
    """A CONNECT's `host:port` (`[::1]:443` too); BadRequest for anything else."""
    host, sep, port = target.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not NAME.fullmatch(host):
        raise BadRequest(f"malformed CONNECT target {target[:200]!r}: expected HOST:PORT")
    return host.lower().rstrip("."), int(port)


def proxy_auth_ok(headers: list[tuple[bytes, bytes]], token: str | None) -> bool:
    """Whether the request carries the admin token: `Basic` (any user, the token as the
    password, as `http://user:TOKEN@host:port` sends it) or `Bearer TOKEN`."""
    if token is None:
        return False
    value = next((v for k, v in headers if k == b"proxy-authorization"), b"")
    scheme, _, credential = value.decode("latin-1").strip().partition(" ")
    if scheme.lower() == "bearer":
        given = credential.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(credential.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    else:
        return False
    return hmac.compare_digest(given.encode(), token.encode())
