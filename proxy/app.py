"""create_app(settings): the routes, and a lifespan that owns the aiohttp session. Wiring only."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from llmtape.control import ROUTES, stats_body
from llmtape.errors import BadCassetteName
from llmtape.handler import Proxy
from llmtape.providers import Rulebook, provider_table
from llmtape.responses import QuietCuts
from llmtape.settings import Settings
from llmtape.state import Runs, ServerState
from llmtape.store.fs import FileStore
from llmtape.upstream import AiohttpUpstream
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

log = logging.getLogger("llmtape")


def create_app(settings: Settings) -> Starlette:
    providers = provider_table(settings.upstream)
    store = FileStore(settings.cassettes)
    proxy = Proxy(
        settings=settings,
        providers=providers,
        rules=Rulebook.build(providers, settings.ignore),
        store=store,
        state=ServerState(cassette=settings.cassette, mode=settings.mode),
        runs=Runs(store, strict_order=settings.strict_order, live=frozenset(settings.live)),
    )
    _quiet_cuts()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=100, enable_cleanup_closed=True)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=True) as session:
            proxy.upstream = AiohttpUpstream(
                session, settings.connect_timeout, settings.read_timeout
            )
            yield
            proxy.upstream = None
            await proxy.runs.restart_all()
            app.state.final_stats = await stats_body(proxy)

    app = Starlette(
        # No method list: every method an upstream may take (QUERY, PROPFIND...) is forwarded.
        routes=[*ROUTES, Route("/{path:path}", proxy)],
        lifespan=lifespan,
        exception_handlers={
            BadCassetteName: _bad_name,
            HTTPException: _http_error,
            ClientDisconnect: _gone,
        },
    )
    app.state.proxy = proxy
    return app


async def _bad_name(request: Request, exc: Exception) -> JSONResponse:
    message = exc.message if isinstance(exc, BadCassetteName) else str(exc)
    return JSONResponse({"error": {"type": "bad_cassette_name", "message": message}}, 400)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
    return JSONResponse({"error": {"type": "http_error", "message": detail}}, status)


async def _gone(request: Request, exc: Exception) -> Response:
    """A client that hung up while sending its request: one line, not a traceback."""
    request.app.state.proxy.state.stats.aborted += 1
    log.info(
        "%s %s: the client hung up before its request was whole; nothing sent upstream",
        request.method,
        request.url.path,
    )
    return Response(status_code=400)  # nobody is left to read it


def _quiet_cuts() -> None:
    for name in ("uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietCuts) for f in logger.filters):
            logger.addFilter(QuietCuts())
