"""The control API under /__llmtape/: health, stats, misses, and switching cassette and mode."""

from __future__ import annotations

import json
from typing import Any

from llmtape.handler import Proxy
from llmtape.settings import Mode
from llmtape.store.names import check_cassette_name, derived_name
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class CassetteSwitch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cassette: str | None = None
    mode: Mode | None = None


def _proxy(request: Request) -> Proxy:
    proxy: Proxy = request.app.state.proxy
    return proxy


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": "bad_request", "message": message}}, status_code=400)


async def stats_body(proxy: Proxy) -> dict[str, Any]:
    """Counts since start; the runs under way; the ended runs that recorded or left recordings
    unused; and `unused_total`, over every run, which --fail-on-unused checks at shutdown."""
    stats = proxy.state.stats
    runs = await proxy.runs.summaries()
    return {
        "upstream_calls": stats.upstream_calls,
        "replayed": stats.replayed,
        "recorded": stats.recorded,
        "misses": stats.misses,
        "errors": stats.errors,
        "aborted": stats.aborted,
        "cassette": proxy.state.cassette,
        "mode": proxy.state.mode.value,
        "runs": runs,
        "ended_runs": list(proxy.runs.ended),
        "unused_total": proxy.runs.ended_unused + sum(run["unused_count"] for run in runs),
    }


async def health(request: Request) -> JSONResponse:
    state = _proxy(request).state
    return JSONResponse({"status": "ok", "cassette": state.cassette, "mode": state.mode.value})


async def stats(request: Request) -> JSONResponse:
    return JSONResponse(await stats_body(_proxy(request)))


async def misses(request: Request) -> JSONResponse:
    return JSONResponse({"misses": list(_proxy(request).misses)})


async def get_cassette(request: Request) -> JSONResponse:
    state = _proxy(request).state
    return JSONResponse({"cassette": state.cassette, "mode": state.mode.value})


async def put_cassette(request: Request) -> JSONResponse:
    proxy = _proxy(request)
    try:
        change = CassetteSwitch.model_validate(json.loads(await request.body() or b"{}"))
    except (ValueError, ValidationError) as exc:
        return _bad_request(
            f'PUT /__llmtape/cassette takes {{"cassette": NAME, "mode": MODE}} with MODE one '
            f"of {', '.join(m.value for m in Mode)}: {exc}"
        )
    before = proxy.state.cassette
    if change.cassette is not None:
        proxy.state.cassette = check_cassette_name(change.cassette)
    new_mode = change.mode is not None and change.mode is not proxy.state.mode
    if change.mode is not None:
        proxy.state.mode = change.mode
    # Each PUT ends the run of the cassette it leaves and starts a new one of the cassette it
    # names: replay positions and used/unused accounting start afresh. A new mode starts a
    # new run of every cassette (those picked by header too), since a run does not carry from
    # one mode into another; otherwise other clients' header-picked runs are left alone.
    if new_mode:
        await proxy.runs.restart_all()
    else:
        names = {before, proxy.state.cassette}
        await proxy.runs.restart(*names, *(derived_name(name) for name in names))
    return await get_cassette(request)


ROUTES = [
    Route("/__llmtape/health", health, methods=["GET"]),
    Route("/__llmtape/stats", stats, methods=["GET"]),
    Route("/__llmtape/misses", misses, methods=["GET"]),
    Route("/__llmtape/cassette", get_cassette, methods=["GET"]),
    Route("/__llmtape/cassette", put_cassette, methods=["PUT"]),
]
