"""The control API under /__tapeproxy/: health, stats, misses, switching cassette and mode, and
the faults in force."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tapeproxy.doors.hosts import local_host
from tapeproxy.engine.core import Engine
from tapeproxy.errors import BadFault
from tapeproxy.modes import Mode
from tapeproxy.problems import one_line, problems
from tapeproxy.settings import Settings, is_loopback

CONTROL_PREFIX = "/__tapeproxy/"
ENDPOINTS = ("health", "stats", "misses", "cassette", "faults", "ui/")
HEALTH = CONTROL_PREFIX + "health"
Endpoint = Callable[[Request], Awaitable[JSONResponse]]


MAX_CONTROL_BODY = 64 * 1024  # {"cassette": NAME, "mode": MODE} is far smaller


async def capped_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None past `limit` bytes (nothing more is held)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class CassetteSwitch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cassette: str | None = None
    mode: Mode | None = None


class FaultsChange(BaseModel):
    """The body of `PUT /__tapeproxy/faults`: a key left out keeps what is in force."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    faults: list[str] | None = None
    seed: int | None = Field(None, ge=0, strict=True)  # as --fault-seed; JSON true is no seed


class NotJson(ValueError):
    """A control request's body that cannot be read as JSON."""


def _json_body(body: bytes) -> object:
    """A control request's body read as JSON (an empty one is `{}`); NotJson saying why not,
    a body nested too deeply for the reader included."""
    try:
        return json.loads(body or b"{}")
    except RecursionError:
        raise NotJson("it is nested too deeply") from None
    except ValueError as exc:  # (UnicodeDecodeError too)
        raise NotJson(one_line(exc)) from exc


def _problems(exc: ValueError) -> str:
    """What is wrong with a control request's body, in one line: not JSON, not an object, or
    each problem pydantic found, without its noise (tapeproxy.problems)."""
    if isinstance(exc, NotJson):
        return f"the body is not JSON: {exc}"
    if isinstance(exc, ValidationError):
        return "; ".join(
            "the body must be a JSON object" if e["type"] == "model_type" else found
            for e, found in zip(exc.errors(), problems(exc), strict=True)
        )
    return one_line(exc)


def _bad_request(message: str) -> JSONResponse:
    return _error(400, "bad_request", message)


def refusal(request: Request, settings: Settings) -> JSONResponse | None:
    """Why a control request that changes state may not, or None when it may: with an admin
    token it must carry `Authorization: Bearer TOKEN`; without one, only on loopback."""
    token = settings.admin_token
    if token is None:
        if is_loopback(settings.host):
            return None
        return _error(
            403,
            "forbidden",
            f"tapeproxy binds {settings.host}, not loopback, and has no admin token, so control "
            "requests that change state are off: start it with --admin-token TOKEN (or "
            "TAPEPROXY_ADMIN_TOKEN) and send `Authorization: Bearer TOKEN`",
        )
    if _bears(request, token):
        return None
    return _error(
        401,
        "unauthorized",
        "this control request needs `Authorization: Bearer TOKEN` with the server's --admin-token",
    )


def _bears(request: Request, token: str) -> bool:
    """Whether the request carries `Authorization: Bearer TOKEN`."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    sent = given.strip().encode("latin-1", "replace")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent, token.encode())


class OffLoopback:
    """Guards the page a server shows at /__tapeproxy/ui/ (it shows what cassettes hold):
    open on a loopback server without an admin token; otherwise under the rules of the
    control requests that change state (`refusal`), GETs included."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(Request(scope), self.settings)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class LocalOnly:
    """The control API (and page) of a loopback server: open to the processes of this
    machine, so taken only from a request whose Host names it (see doors/hosts.py), or that
    carries the admin token when there is one; the health check answers anyone."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] != HEALTH
            and not local_host(scope)
            and not (self.token and _bears(Request(scope), self.token))
        ):
            fix = "send `Authorization: Bearer TOKEN`" if self.token else "give it --admin-token"
            refused = _error(
                403,
                "forbidden",
                "this loopback tapeproxy takes control requests only at 127.0.0.1 or localhost "
                f"(the Host header); to take them under another name, {fix}",
            )
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)


def current(engine: Engine) -> JSONResponse:
    return JSONResponse({"cassette": engine.current.cassette, "mode": engine.current.mode.value})


async def _guarded_body(engine: Engine, request: Request) -> bytes | JSONResponse:
    """A control PUT's body, or the answer that refuses it: not allowed from where it came
    (see `refusal`), or past MAX_CONTROL_BODY (413)."""
    refused = refusal(request, engine.settings)
    if refused is not None:
        return refused
    body = await capped_body(request, MAX_CONTROL_BODY)
    if body is None:
        return _error(
            413,
            "request_too_large",
            f"a control request body is at most {MAX_CONTROL_BODY:,} bytes",
        )
    return body


async def switch(engine: Engine, request: Request) -> JSONResponse:
    """PUT /__tapeproxy/cassette: a new current cassette or mode, and a new run."""
    body = await _guarded_body(engine, request)
    if isinstance(body, JSONResponse):
        return body
    try:
        change = CassetteSwitch.model_validate(_json_body(body))
    except ValueError as exc:  # NotJson, and pydantic's ValidationError
        return _bad_request(
            f'PUT /__tapeproxy/cassette takes {{"cassette": NAME, "mode": MODE}} with MODE one '
            f"of {', '.join(m.value for m in Mode)}: {_problems(exc)}"
        )
    await engine.switch(change.cassette, change.mode)
    return current(engine)


def faults_now(engine: Engine) -> JSONResponse:
    schedule = engine.faults.schedule
    return JSONResponse({"faults": schedule.texts(), "seed": schedule.seed})


async def put_faults(engine: Engine, request: Request) -> JSONResponse:
    """PUT /__tapeproxy/faults: the faults in force and the seed that draws them (either
    left out is kept), and a new run of them."""
    body = await _guarded_body(engine, request)
    if isinstance(body, JSONResponse):
        return body
    try:
        change = FaultsChange.model_validate(_json_body(body))
        engine.set_faults(change.faults, change.seed)
    except BadFault as exc:
        return _error(400, exc.error_type, exc.message)
    except ValueError as exc:  # NotJson, and pydantic's ValidationError
        return _bad_request(
            f'PUT /__tapeproxy/faults takes {{"faults": [SPEC, ...], "seed": N}} (either may be '
            f"left out; [] clears the faults; N a whole number >= 0): "
            f"{_problems(exc)}"
        )
    return faults_now(engine)


def scrubbed(scrub: Callable[[str], str], answer: JSONResponse) -> JSONResponse:
    """An error answer scrubbed as a cassette is: its message may quote what a request sent
    (a path, a cassette name, a fault spec). A key's letters need no escaping in JSON, nor
    has the marker any, so the scrubbed body is JSON still."""
    if answer.status_code < 400:
        return answer
    text = bytes(answer.body).decode("utf-8")
    shown = scrub(text)
    if shown == text:
        return answer
    return JSONResponse(json.loads(shown), status_code=answer.status_code)


def control_routes(engine: Engine) -> list[BaseRoute]:
    """The endpoints, bound to one engine; their error answers scrubbed (`scrubbed`)."""

    async def health(request: Request) -> JSONResponse:
        now = engine.current
        return JSONResponse({"status": "ok", "cassette": now.cassette, "mode": now.mode.value})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse((await engine.snapshot()).to_dict())

    async def misses(request: Request) -> JSONResponse:
        return JSONResponse({"misses": list(engine.misses)})

    async def get_cassette(request: Request) -> JSONResponse:
        return current(engine)

    async def put_cassette(request: Request) -> JSONResponse:
        return await switch(engine, request)

    async def get_faults(request: Request) -> JSONResponse:
        return faults_now(engine)

    async def set_faults(request: Request) -> JSONResponse:
        return await put_faults(engine, request)

    async def unknown(request: Request) -> JSONResponse:
        listed = ", ".join(CONTROL_PREFIX + name for name in ENDPOINTS)
        return _error(
            404, "unknown_endpoint", f"no control endpoint {request.url.path!r}; there are {listed}"
        )

    def shown(endpoint: Endpoint) -> Endpoint:
        async def answer(request: Request) -> JSONResponse:
            return scrubbed(engine.scrubber.text, await endpoint(request))

        return answer

    return [
        Route(HEALTH, health, methods=["GET"]),
        Route("/__tapeproxy/stats", stats, methods=["GET"]),
        Route("/__tapeproxy/misses", misses, methods=["GET"]),
        Route("/__tapeproxy/cassette", get_cassette, methods=["GET"]),
        Route("/__tapeproxy/cassette", shown(put_cassette), methods=["PUT"]),
        Route("/__tapeproxy/faults", get_faults, methods=["GET"]),
        Route("/__tapeproxy/faults", shown(set_faults), methods=["PUT"]),
        Route("/__tapeproxy/{rest:path}", shown(unknown)),
    ]
