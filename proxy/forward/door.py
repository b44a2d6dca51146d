"""The forward-proxy door (`run`, `serve --forward`): its state (the interception table, the
run CA, what it tunnelled or refused), and `Mapped`, which hands a decrypted request to the
reverse door's own ASGI front as `/<upstream>/<path>`: the same `Inbound`, the same engine.
Each connection's protocol is tapeproxy.forward.connection's."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapeproxy.engine.core import Engine
from tapeproxy.errors import ConfigError
from tapeproxy.forward.ca import RunCA
from tapeproxy.forward.hosts import Interception, tunnelling
from tapeproxy.forward.minting import Minting
from tapeproxy.forward.mints import MINTS
from tapeproxy.modes import Mode
from tapeproxy.providers.base import Provider
from tapeproxy.settings import Settings, is_loopback
from tapeproxy.store.protocol import CassetteStore

log = logging.getLogger("tapeproxy")


class ForwardDoor:
    """The forward proxy of one server: its interception table, its run CA, and what it
    tunnelled or refused (for the end-of-run summary). `protocol` is uvicorn's protocol class."""

    def __init__(
        self,
        settings: Settings,
        app: ASGIApp,
        hosts: Interception,
        engine: Engine,
        store: CassetteStore,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.engine = engine  # its mode and cassette in force, which a control PUT switches
        self.store = store
        self.ca = RunCA(hosts.patterns)
        self.ca_file: Path | None = None
        self.guarded = not is_loopback(settings.host)
        self.token = settings.admin_token
        self.connect_timeout = settings.connect_timeout
        self.refused: set[str] = set()
        self.tunnelled: set[str] = set()
        # A mint goes live where the run does (or the provider its tokens are for does).
        live = {m.name for m in MINTS.values() if hosts.tunnels or m.serves in settings.live}
        self.minting = Minting(frozenset(live), lambda: engine.upstream, settings.upstream)

    async def tunnels(self) -> bool:
        """Whether a host not intercepted is tunnelled in the mode in force now (a control
        PUT may have switched it since the start): not in a replay, which never reaches the
        network (`once` on a cassette that held recordings when its run began, or holds
        some now when none is under way: as the run that begins will find it)."""
        mode, cassette = self.engine.current.mode, self.engine.current.cassette
        if mode is not Mode.ONCE:
            return tunnelling(mode, False)
        # (the runs under way, looked at without counting as a request reaching one)
        run = next((r for r in self.engine.runs.all() if r.cassette == cassette), None)
        if run is not None:
            return tunnelling(mode, run.held)
        return tunnelling(mode, bool(await asyncio.to_thread(self.store.entries, cassette)))

    def refuse(self, target: str, why: str) -> None:
        """`target` (`host:port`) refused: logged once, listed in the summary."""
        shown = target if why == "not intercepted" else f"{target} ({why})"
        if shown not in self.refused:
            log.warning(
                "refused %s: %s, and a replay does not reach the network "
                "(let it through with --allow-host)",
                target,
                why,
            )
        self.refused.add(shown)


def open_door(
    settings: Settings,
    app: ASGIApp,
    providers: dict[str, Provider],
    store: CassetteStore,
    engine: Engine,
) -> ForwardDoor:
    """The forward door of a server: its CA made, its certificate written where clients
    are told to find it (`--ca-cert`, else the library's state folder); `engine` is the
    server's (its mode in force decides what a host not intercepted gets; its upstream client
    sends the mints that go live)."""
    replaying = settings.mode is Mode.ONCE and bool(store.entries(settings.cassette))
    hosts = Interception(
        providers, settings.intercept, settings.allow_host, settings.mode, replaying
    )
    door = ForwardDoor(settings, app, hosts, engine, store)
    door.ca_file = settings.ca_cert or default_ca_file(settings.cassettes)
    try:
        door.ca.write_certificate(door.ca_file)
    except OSError as exc:
        raise ConfigError(f"could not write the CA certificate to {door.ca_file}: {exc}") from exc
    if door.guarded and door.token is None:
        log.warning(
            "the forward proxy on %s answers every forward request 407: off loopback it needs "
            "Proxy-Authorization with the admin token; set --admin-token TOKEN",
            settings.host,
        )
    return door


def default_ca_file(library: str) -> Path:
    """`<library>/.tapeproxy/ca.pem` for a folder library; another one needs --ca-cert."""
    if "://" in library and not library.startswith("file://"):
        raise ConfigError(
            f"--forward with the library {library}: say where the CA certificate "
            "goes with --ca-cert FILE"
        )
    return Path(library.removeprefix("file://")) / ".tapeproxy" / "ca.pem"


class Mapped:
    """A forward request for an intercepted host, as the reverse door takes it:
    `/<upstream>/<path>`. A tunnel's host is its CONNECT's; a plain-HTTP connection's is each
    request's Host (not intercepted: 403)."""

    def __init__(
        self,
        app: ASGIApp,
        owner: str | None,
        hosts: Interception | None = None,
        minting: Minting | None = None,
    ) -> None:
        self.app = app
        self.owner = owner
        self.hosts = hosts
        self.minting = minting  # a mint's host: answered here, never by the engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        owner = self.owner
        if self.hosts is not None:
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1").rpartition(":")
            owner = self.hosts.owner(host[0] or host[2])
        if owner is None:
            body = b"tapeproxy: this connection carries intercepted hosts only\n"
            close = [(b"connection", b"close")]
            await send({"type": "http.response.start", "status": 403, "headers": close})
            await send({"type": "http.response.body", "body": body})
            return
        if owner in MINTS and self.minting is not None:
            await self.minting(owner, scope, receive, send)
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        scope = dict(scope, path=f"/{owner}{scope['path']}", raw_path=f"/{owner}".encode() + raw)
        await self.app(scope, receive, send if self.hosts is None else closing(send))


def closing(send: Send) -> Send:
    """`send` with `Connection: close` on the answer: a plain-HTTP connection carries one
    request, so the client's next, maybe for a host not intercepted, comes on a new one."""

    async def closed(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return closed
