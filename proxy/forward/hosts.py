"""Which hosts the forward proxy decrypts and which upstream owns each; which it tunnels,
refuses, or lets a CONNECT reach (pure, but for the generic upstreams `--intercept` adds)."""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import MutableMapping
from fnmatch import fnmatchcase
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

from tapeproxy.forward.mints import MINTS
from tapeproxy.modes import Mode
from tapeproxy.providers import generic
from tapeproxy.providers.base import Provider

TLS_PORT = 443
# A host name as DNS has it: a `#`, `?` or `@` in what a client names would make its
# upstream's URL (https://evil.test#.example.com) reach another host.
HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
# Hosts a `--intercept '*.example.com'` may turn into upstreams of their own (each a few KB,
# held for the run): an agent talks to a handful; a crawl stops being decrypted past this.
ADDED_LIMIT = 1024

log = logging.getLogger("tapeproxy")


def dns_host(url: str) -> str | None:
    """The host of `url` when it is a DNS name a certificate can carry (not an IP address,
    not localhost, which a child reaches directly: NO_PROXY covers loopback)."""
    host = a_label((urlsplit(url).hostname or "").lower().rstrip("."))
    if not host or host == "localhost" or host.endswith(".localhost") or _address(host):
        return None
    return host if HOST_NAME.fullmatch(host) else None


def a_label(host: str) -> str:
    """`host` as DNS and certificates carry it (`bücher.example` -> `xn--bcher-kva.example`);
    unchanged when it cannot be encoded (then no DNS name: never intercepted)."""
    try:
        return host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        return host


def matches(pattern: str, host: str) -> bool:
    """`*.example.com` matches every name below example.com; a `*` inside a label (a
    provider row's `bedrock-runtime.*.amazonaws.com`) any run of name characters in that one
    label; any other pattern only itself."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    if "*" not in pattern:
        return host == pattern
    labels, names = pattern.split("."), host.split(".")
    return len(labels) == len(names) and all(
        fnmatchcase(name, label) for label, name in zip(labels, names, strict=True)
    )


def check_pattern(pattern: str, addresses: bool = False) -> str:
    """A host pattern as `--intercept` takes it (and `--allow-host`, which `addresses` lets
    name an IP address too), lower-cased; else ValueError."""
    name = pattern.strip().lower().rstrip(".").strip("[]")
    if addresses and _address(name):
        return name
    bare = name[2:] if name.startswith("*.") else name
    if not HOST_NAME.fullmatch(bare) or "." not in bare:
        raise ValueError(
            f"host pattern {pattern!r}: give a DNS name (api.example.com, an international "
            "one as xn--...) or *.example.com"
        )
    if dns_host(f"https://{bare}") is None:
        raise ValueError(
            f"host pattern {pattern!r}: an IP address or localhost is never intercepted"
        )
    return name


class Interception:
    """The intercepted hosts and their owners, the ports a CONNECT may reach, and what
    becomes of every other host. Built from the provider table (each provider's `hosts`, and
    its URL's host), `--intercept` and `--allow-host`."""

    def __init__(
        self,
        providers: MutableMapping[str, Provider],
        intercept: tuple[str, ...],
        allow: tuple[str, ...],
        mode: Mode,
        replaying: bool,
    ) -> None:
        self.providers = (
            providers  # the engine's own table: an intercepted host's upstream joins it
        )
        self.owners: list[tuple[str, str | None]] = []  # (pattern, upstream; None: its own)
        self.ports = {TLS_PORT}
        for provider in providers.values():
            for pattern in provider.hosts:
                self.owners.append((pattern, provider.name))
            host = dns_host(provider.base_url)
            if host is not None:
                self.owners.append((host, provider.name))
            port = urlsplit(provider.base_url).port
            if port is not None:
                self.ports.add(port)
        self.owners += [(mint.host, mint.name) for mint in MINTS.values()]  # never recorded
        self.owners += [(pattern, None) for pattern in intercept]
        self.allow = allow
        self.added = 0  # upstreams made for hosts only `--intercept` names
        self.tunnels = tunnelling(mode, replaying)  # (at the start: the door follows the mode)

    @property
    def patterns(self) -> list[str]:
        """Every intercepted host pattern: what the run's CA may vouch for."""
        return [pattern for pattern, _ in self.owners]

    def owner(self, host: str) -> str | None:
        """The upstream that answers an intercepted `host`, or None when it is not intercepted.
        A host only `--intercept` names gets an upstream of its own, named by the host."""
        host = host.lower().rstrip(".")
        if HOST_NAME.fullmatch(host) is None:
            return None
        for pattern, name in self.owners:
            if matches(pattern, host):
                if name is not None:
                    return name
                return host if self._added(host) else None
        return None

    def _added(self, host: str) -> bool:
        """Whether `host` has its own upstream (made now, unless ADDED_LIMIT were reached)."""
        if host in self.providers:
            return True
        if self.added >= ADDED_LIMIT:
            if self.added == ADDED_LIMIT:  # said once
                log.warning(
                    "--intercept matched more than %d hosts: the others, %s first, are not "
                    "intercepted",
                    ADDED_LIMIT,
                    host,
                )
                self.added += 1
            return False
        self.added += 1
        self.providers[host] = generic(host, f"https://{host}")
        return True

    def may_tunnel(self, host: str, tunnels: bool | None = None) -> bool:
        """Whether a host that is not intercepted is tunnelled (else refused); `tunnels`:
        whether the mode in force tunnels (None: the mode at the start)."""
        tunnels = self.tunnels if tunnels is None else tunnels
        return tunnels or any(matches(p, host.lower().rstrip(".")) for p in self.allow)


def tunnelling(mode: Mode, replaying: bool) -> bool:
    """Whether `mode` tunnels a host not intercepted (`replaying`: a `once` cassette that held
    recordings). What a replay cannot do: reach the network; everything else may."""
    return mode in (Mode.RECORD, Mode.AUTO, Mode.PASSTHROUGH) or (
        mode is Mode.ONCE and not replaying
    )


def _address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


# `--intercept` and `--allow-host` as Settings holds them: checked, lower-cased.
HostPatterns = Annotated[
    tuple[str, ...], AfterValidator(lambda value: tuple(check_pattern(p) for p in value))
]
AllowedHosts = Annotated[
    tuple[str, ...], AfterValidator(lambda value: tuple(check_pattern(p, True) for p in value))
]
