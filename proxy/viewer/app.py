"""The viewer as an ASGI app: read-only pages rendered on the server by Jinja2 with autoescape
(whatever a cassette holds reaches the browser as text), its CSS and JavaScript served from
the package, and `Content-Security-Policy: default-src 'self'` on every answer (an SVG
picture's is stricter: no script, sandboxed). `tapeproxy view` serves it alone; a running
server mounts it at /__tapeproxy/ui/ with its misses."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapeproxy.doors.hosts import local_host
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.driftreport import last as last_drift
from tapeproxy.tools.prices import PriceTable
from tapeproxy.viewer import pages
from tapeproxy.viewer.conversation import IMAGE_TYPES, SVG, Image
from tapeproxy.viewer.parts import BadPart

CSP = b"content-security-policy"
POLICY = [
    (CSP, b"default-src 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
# An SVG picture can hold script, which runs where it is opened as a document (the
# thumbnail's link): it is served under this policy instead of the pages', which would let
# it load a same-origin script. No script, nothing loaded but inline styles and data: images,
# and a sandbox (an origin of its own). As an <img> (the thumbnail) it runs none anyway.
SVG_POLICY = (
    "default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox"
)
PIECE = 1 << 20  # bytes of a whole text sent at a time
READERS = 2  # exchange pages (and their downloads, images) built at once
HEAVY = ("/exchange", "/text", "/image")  # the routes that read an exchange file whole


class Policy:
    """Adds the security headers to every answer of the app it wraps (pure ASGI). With
    `local_only` (a page on a loopback address, open without a token), a request whose Host
    is not this machine's is refused: a web page elsewhere that points its own host name at
    127.0.0.1 (DNS rebinding) must not read the cassettes."""

    def __init__(self, app: ASGIApp, local_only: bool = False) -> None:
        self.app = app
        self.local_only = local_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                own = any(name.lower() == CSP for name, _ in headers)  # stricter: an SVG's
                message["headers"] = [*headers, *(h for h in POLICY if not own or h[0] != CSP)]
            await send(message)

        if self.local_only and scope["type"] == "http" and not local_host(scope):
            refused = Response("this page answers only at 127.0.0.1 or localhost", 403)
            await refused(scope, receive, sending)
            return
        await self.app(scope, receive, sending)


@dataclass(frozen=True)
class Live:
    """What a running server gives its page: its misses (newest first) and a number that
    changes whenever an exchange happens, which the page polls to refresh itself."""

    misses: Callable[[], list[dict[str, Any]]]
    stamp: Callable[[], int]


def viewer_app(
    store: CassetteStore,
    prices: PriceTable,
    live: Live | None = None,
    local_only: bool = True,
    scrub: Callable[[str], str] = str,
) -> ASGIApp:
    """The viewer over `store`; with `live`, the misses page and the polling of a server.
    `local_only`: answer only requests for localhost or a loopback address (`Policy`).
    `scrub` (a `Scrubber.text`) is run over every text a page shows: a cassette an older
    tapeproxy wrote may hold a key."""
    templates = Environment(
        loader=PackageLoader("tapeproxy", "viewer/templates"),
        autoescape=select_autoescape(default=True),
        finalize=partial(_shown, scrub),
    )

    def render(request: Request, page: str, status: int = 200, **values: Any) -> HTMLResponse:
        text = templates.get_template(page).render(live=live is not None, **values)
        # A name in no encoding (a folder's, as the system gives it) is shown escaped: it
        # cannot be UTF-8, and the page must still answer.
        return HTMLResponse(text.encode("utf-8", "backslashreplace"), status_code=status)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:  # sync: starlette runs it in a thread
            try:
                return handler(request)
            except TapeproxyError as exc:  # a bad part or start: 400; nothing there: 404
                status = 400 if isinstance(exc, BadPart) else 404
                return render(request, "error.html", status, message=exc.message, bad=status == 400)

        return endpoint

    routes = _routes(store, prices, live, render, scrub)
    static = StaticFiles(directory=Path(__file__).parent / "static")
    readers = asyncio.Semaphore(READERS)
    app = Starlette(
        routes=[
            *(
                Route(
                    path, _one_of(readers, guarded(handler)) if path in HEAVY else guarded(handler)
                )
                for path, handler in routes
            ),
            Mount("/static", app=static),
        ]
    )
    return Policy(app, local_only)


def _routes(
    store: CassetteStore,
    prices: PriceTable,
    live: Live | None,
    render: Callable[..., HTMLResponse],
    scrub: Callable[[str], str],
) -> list[tuple[str, Callable[[Request], Response]]]:
    def library(request: Request) -> Response:
        shelf = pages.library(store, prices, max(_number(request.query_params.get("start")), 0))
        where, drift = store.where(), last_drift(store)
        return render(request, "library.html", shelf=shelf, where=where, drift=drift)

    def cassette(request: Request) -> Response:
        name, start = _given(request, "name"), _number(request.query_params.get("start"))
        page = pages.cassette(store, name, prices, max(start, 0))
        return render(request, "cassette.html", name=name, paged=page, rows=page.lines)

    def diff(request: Request) -> Response:
        a, b = _given(request, "a"), _given(request, "b")
        return render(request, "diff.html", a=a, b=b, result=pages.difference(store, a, b, prices))

    def misses(request: Request) -> Response:
        found = live.misses() if live is not None else None
        return render(request, "misses.html", misses=found)

    def stamp(request: Request) -> Response:
        return JSONResponse({"stamp": live.stamp() if live is not None else 0})

    return [
        ("/", library),
        ("/cassette", cassette),
        *_exchange_routes(store, prices, render, scrub),
        ("/diff", diff),
        ("/misses", misses),
        ("/stamp", stamp),
    ]


def _exchange_routes(
    store: CassetteStore,
    prices: PriceTable,
    render: Callable[..., HTMLResponse],
    scrub: Callable[[str], str],
) -> list[tuple[str, Callable[[Request], Response]]]:
    """One exchange's page (in parts), the whole of one of its texts, one of its images
    (HEAVY: at most READERS of them at once, `_one_of`)."""

    def exchange(request: Request) -> Response:
        name, file = _given(request, "cassette"), _given(request, "file")
        start = request.query_params.get("start")
        view = pages.exchange(store, name, file, prices, start, scrub)
        return render(request, "exchange.html", view=view)

    def text(request: Request) -> Response:
        name, file = _given(request, "cassette"), _given(request, "file")
        part = request.query_params.get("part")
        return download(scrub(pages.whole(store, name, file, part)), f"{file[:12]}-{part}.txt")

    def image(request: Request) -> Response:
        name, file = _given(request, "cassette"), _given(request, "file")
        return _picture(pages.image(store, name, file, _number(request.query_params.get("n"))))

    return [("/exchange", exchange), ("/text", text), ("/image", image)]


def _one_of(
    readers: asyncio.Semaphore, handler: Callable[[Request], Response]
) -> Callable[[Request], Awaitable[Response]]:
    """`handler` in a thread once one of READERS is free: each reads its exchange file whole
    (a 60 MB stream takes about 1 GB for seconds), so a reader clicking on fast holds no more
    than that. Waited for on the loop, not in a thread: starlette has 40, and 40 clicks waiting
    in them held every other page. A reader gone before its turn costs no build."""

    async def held(request: Request) -> Response:
        async with readers:
            if await request.is_disconnected():
                return Response(status_code=499)  # no one to read it
            return await run_in_threadpool(handler, request)

    return held


def _picture(found: Image | None) -> Response:
    """An inline image as its own answer; 404 for none, a type not shown, or bad base64."""
    if found is None or found.media_type not in (*IMAGE_TYPES, SVG):
        return Response(status_code=404)
    try:
        data = base64.b64decode(found.data, validate=True)
    except (binascii.Error, ValueError):
        return Response(status_code=404)
    policy = {"content-security-policy": SVG_POLICY} if found.media_type == SVG else None
    return Response(data, media_type=found.media_type, headers=policy)


def download(text: str, filename: str) -> Response:
    """A part's whole text as a plain-text download, sent a piece at a time (from one
    encoding of it: no copy per piece), never as an HTML page."""
    data = memoryview(text.encode("utf-8", "surrogatepass"))

    def pieces() -> Iterator[bytes]:
        for at in range(0, len(data), PIECE):
            yield bytes(data[at : at + PIECE])

    headers = {
        "content-length": str(len(data)),
        "content-disposition": f'attachment; filename="{filename}"',
    }
    return StreamingResponse(pieces(), media_type="text/plain; charset=utf-8", headers=headers)


def _shown(scrub: Callable[[str], str], value: Any) -> Any:
    """What one `{{ ... }}` of a page shows, scrubbed. Text already escaped (`Markup`) stays
    escaped: the marker has nothing to escape, nor has any key format's alphabet."""
    if not isinstance(value, str):
        return value
    shown = scrub(value)
    if shown == value:
        return value
    return Markup(shown) if isinstance(value, Markup) else shown


def _given(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise ConfigError(f"this page needs the query parameter {name!r}")
    return value


def _number(value: str | None) -> int:
    """A page's number in the query; -1 for none or no number. ASCII digits only (`²` is a
    digit to str.isdigit, not to int), and at most 18 (int refuses over 4,300): past the end."""
    if value is None or not (value.isascii() and value.isdigit()):
        return -1
    return int(value) if len(value) <= 18 else 10**18
