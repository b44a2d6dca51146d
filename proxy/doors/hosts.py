"""Whether a request's Host names this machine. A server on a loopback address is open to
every process of this machine: its control API and page answer only requests that name it
(or carry its admin token). A web page elsewhere that points its own host name at 127.0.0.1
(DNS rebinding) reaches the port with that name as the Host, and must not switch the
cassette, set faults, or read the misses and the page. The proxy's own routes answer any
Host, as a local server does: a container reaches a loopback tapeproxy as
`host.docker.internal`."""

from __future__ import annotations

import ipaddress

from starlette.types import Scope


def local_host(scope: Scope) -> bool:
    """Whether the request's Host names this machine: localhost, or a loopback address."""
    host = next((v for k, v in scope.get("headers", []) if k == b"host"), b"")
    name = host.decode("latin-1").strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    name = name.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
