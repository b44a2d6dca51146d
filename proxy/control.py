"""The control API under /__llmtape/: health, stats, misses, and switching cassette and mode."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from llmtape.engine import Engine
from llmtape.settings import Mode


class CassetteSwitch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cassette: str | None = None
    mode: Mode | None = None


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": "bad_request", "message": message}}, status_code=400)


def control_routes(engine: Engine) -> list[BaseRoute]:
    """The endpoints, bound to one engine."""

    def current() -> JSONResponse:
        return JSONResponse(
            {"cassette": engine.current.cassette, "mode": engine.current.mode.value}
        )

    async def health(request: Request) -> JSONResponse:
        now = engine.current
        return JSONResponse({"status": "ok", "cassette": now.cassette, "mode": now.mode.value})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse((await engine.snapshot()).to_dict())

    async def misses(request: Request) -> JSONResponse:
        return JSONResponse({"misses": list(engine.misses)})

    async def get_cassette(request: Request) -> JSONResponse:
        return current()

    async def put_cassette(request: Request) -> JSONResponse:
        try:
            change = CassetteSwitch.model_validate(json.loads(await request.body() or b"{}"))
        except (ValueError, ValidationError) as exc:
            return _bad_request(
                f'PUT /__llmtape/cassette takes {{"cassette": NAME, "mode": MODE}} with MODE one '
                f"of {', '.join(m.value for m in Mode)}: {exc}"
            )
        await engine.switch(change.cassette, change.mode)
        return current()

    return [
        Route("/__llmtape/health", health, methods=["GET"]),
        Route("/__llmtape/stats", stats, methods=["GET"]),
        Route("/__llmtape/misses", misses, methods=["GET"]),
        Route("/__llmtape/cassette", get_cassette, methods=["GET"]),
        Route("/__llmtape/cassette", put_cassette, methods=["PUT"]),
    ]
