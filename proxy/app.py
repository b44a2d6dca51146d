"""create_app(settings): the engine, the ASGI front and the control API, and a lifespan that owns
the upstream client (its aiohttp session, made in the running loop: as the server starts in a
mode that goes live, else at the first request that goes upstream). Wiring only."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tapeproxy.doors.control import (
    CONTROL_PREFIX,
    LocalOnly,
    OffLoopback,
    control_routes,
    scrubbed,
)
from tapeproxy.doors.front import Front
from tapeproxy.doors.sending import QuietCuts
from tapeproxy.doors.sockets import serve_socket
from tapeproxy.engine.core import Engine
from tapeproxy.engine.stats import Snapshot
from tapeproxy.errors import BadCassetteName, ConfigError
from tapeproxy.forward.connection import sniffing
from tapeproxy.forward.door import open_door
from tapeproxy.forward.mints import not_mints
from tapeproxy.logs import scrub_lines
from tapeproxy.modes import Mode
from tapeproxy.providers import provider_table
from tapeproxy.settings import Settings, is_loopback
from tapeproxy.sources import load_tool_settings
from tapeproxy.store import open_store
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.upstream.lazy import LazyUpstream
from tapeproxy.upstream.signing import Signing

log = logging.getLogger("tapeproxy")


class Server:
    """One tapeproxy server: its engine, its ASGI app, and the final snapshot of its counters
    once the app has shut down (for the end-of-run report). Its store is `store`, else the
    one `settings.cassettes` opens."""

    def __init__(self, settings: Settings, store: CassetteStore | None = None) -> None:
        store = open_store(settings.cassettes, settings.cache_size) if store is None else store
        providers = provider_table(not_mints(settings.upstream))
        self.engine = Engine(settings, providers, store)
        # Its log lines get the scrubbing its cassettes get: a request path may hold a key.
        scrub_lines(self.engine.scrubber.text)
        self.final: Snapshot | None = None
        self.app = self._app(settings)
        # `--forward`: uvicorn's protocol becomes the forward door's, which hands it every
        # request that is not a forward one (tapeproxy.forward.door).
        self.forward = (
            open_door(settings, self.app, providers, store, self.engine)
            if settings.forward
            else None
        )
        self.protocol = sniffing(self.forward) if self.forward is not None else None

    def _app(self, settings: Settings) -> ASGIApp:
        engine = self.engine

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            upstream = LazyUpstream(settings.connect_timeout, settings.read_timeout)
            engine.upstream = Signing(upstream, settings.resign)
            if settings.mode is not Mode.REPLAY:  # it will go live: made now, not then
                await upstream.make()
            try:
                yield
                self.final = await engine.close()
            finally:
                await upstream.close()

        async def gone(request: Request, exc: Exception) -> Response:
            """A client that hung up while sending a control request: no traceback."""
            engine.abandoned(request.url.path, request.method)
            return Response(status_code=400)  # nobody is left to read it

        _quiet_cuts()
        control = Starlette(
            routes=[*ui_routes(engine, settings), *control_routes(engine)],
            lifespan=lifespan,
            exception_handlers={
                BadCassetteName: partial(_bad_name, engine.scrubber.text),
                HTTPException: _http_error,
                ClientDisconnect: gone,
            },
        )
        if is_loopback(settings.host):  # open to this machine: not to a rebound host name
            guarded: ASGIApp = LocalOnly(control, settings.admin_token)
            return Doors(guarded, Front(engine), partial(serve_socket, engine))
        return Doors(control, Front(engine), partial(serve_socket, engine))


class Doors:
    """Splits by path: `/__tapeproxy/...` (and lifespan) to the control API, every other
    WebSocket upgrade to the session door, every other request to the front as its bytes
    came, with no router in between (every method is forwarded, and a path holding `%0a` is
    not refused by a route pattern)."""

    def __init__(self, control: ASGIApp, front: ASGIApp, sockets: ASGIApp) -> None:
        self.control = control
        self.front = front
        self.sockets = sockets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ours = scope["type"] == "lifespan" or scope["path"].startswith(CONTROL_PREFIX)
        if ours:
            await self.control(scope, receive, send)
        elif scope["type"] == "websocket":  # an upgrade on any route: a session
            await self.sockets(scope, receive, send)
        else:
            await self.front(scope, receive, send)


UI = CONTROL_PREFIX + "ui"


def ui_routes(engine: Engine, settings: Settings) -> list[BaseRoute]:
    """The cassette viewer at /__tapeproxy/ui/, with this server's misses, refreshed as its
    exchanges happen; guarded off loopback as the control API is. Built at its first request
    (`Later`): a server whose page no one opens never imports it."""

    def page() -> ASGIApp:
        from tapeproxy.tools.prices import load_prices
        from tapeproxy.viewer.app import Live, viewer_app

        try:
            prices = load_prices(load_tool_settings({}).prices)
        except ConfigError as exc:
            log.warning("the page at %s/ shows the shipped prices: %s", UI, exc.message)
            prices = load_prices()

        def stamp() -> int:
            c = engine.counters
            return c.upstream_calls + c.replayed + c.recorded + c.misses + c.errors

        live = Live(misses=lambda: list(engine.misses), stamp=stamp)
        # Its Host is checked with every control request's (LocalOnly), not here again.
        return viewer_app(engine.store, prices, live, local_only=False, scrub=engine.scrubber.text)

    async def slash(request: Request) -> Response:
        return RedirectResponse(UI + "/")

    return [Route(UI, slash), Mount(UI, app=OffLoopback(Later(page), settings))]


class Later:
    """An ASGI app made by `build` at its first request, in a worker thread (the import of
    the viewer and Jinja2, ~80 ms here, and the read of the prices): every pytest worker
    starts a server, and few servers' pages are ever opened."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._app: ASGIApp | None = None
        self._making = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            async with self._making:  # concurrent first requests build it once
                if self._app is None:
                    self._app = await asyncio.to_thread(self._build)
                app = self._app
        await app(scope, receive, send)


def create_app(settings: Settings) -> ASGIApp:
    """The ASGI app of a new server (see `Server` for its engine and final report)."""
    return Server(settings).app


async def _bad_name(scrub: Callable[[str], str], request: Request, exc: Exception) -> JSONResponse:
    message = exc.message if isinstance(exc, BadCassetteName) else str(exc)
    answer = JSONResponse({"error": {"type": "bad_cassette_name", "message": message}}, 400)
    return scrubbed(scrub, answer)  # the name it quotes may hold a key


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
    return JSONResponse({"error": {"type": "http_error", "message": detail}}, status)


def _quiet_cuts() -> None:
    for name in ("uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietCuts) for f in logger.filters):
            logger.addFilter(QuietCuts())
