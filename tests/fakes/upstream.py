"""A real HTTP server impersonating LLM providers, for tests of tapeproxy.

:class:`FakeUpstream` runs an aiohttp server on ``127.0.0.1`` (ephemeral port)
in a background thread with its own event loop, so synchronous tests and the
official sync SDK clients can talk to it::

    with FakeUpstream() as fake:
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test-fake")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
        assert fake.count("/v1/chat/completions") == 1

Built-in routes (answers are byte-identical for identical requests; ids come
from a hash of the request body, timestamps are constants):

- ``POST /v1/chat/completions``, ``POST /v1/responses``, ``POST /v1/embeddings``,
  ``GET /v1/models`` (OpenAI, see ``openai_wire``); ``POST /v1/images/generations``
  (OpenAI's images, streamed or not, see ``images_wire``)
- ``POST /v1/messages`` (Anthropic, see ``anthropic_wire``)
- ``POST /v1beta/models/{model}:generateContent`` / ``:streamGenerateContent``
  (Gemini, see ``gemini_wire``)
- ``POST /api/chat``, ``POST /api/generate`` (Ollama, see ``ollama_wire``)
- anything else: a generic "tool API" echoing path, method, query and JSON body.

Every response carries a volatile ``x-request-id: req_<n>`` and ``date`` header, and each
``x-echo-*`` header of its request, echoed back as it came.
Knobs: :meth:`FakeUpstream.script` (canned replies), ``frame_delay``,
``cut_after``, ``end_delay``, ``stream_error_after`` and ``gzip`` (see the class docstring).
"""

from __future__ import annotations

import asyncio
import gzip as gzip_lib
import hashlib
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from . import anthropic_wire, bedrock_wire, gemini_wire, images_wire, ollama_wire, openai_wire
from .sigv4 import SigV4Check
from .wire import JsonOut, Out, StreamOut, WireRequest, dumps

Route = Callable[[WireRequest], Out]

ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/chat/completions"): openai_wire.chat_completions,
    ("POST", "/v1/responses"): openai_wire.responses,
    ("POST", "/v1/embeddings"): openai_wire.embeddings,
    ("GET", "/v1/models"): openai_wire.models,
    ("POST", "/v1/images/generations"): images_wire.generate,
    ("POST", "/v1/messages"): anthropic_wire.messages,
    ("POST", "/api/chat"): ollama_wire.chat,
    ("POST", "/api/generate"): ollama_wire.generate,
}
GEMINI_PATH = re.compile(
    r"^/v1(?:beta)?/models/(?P<model>[^:]+):(?P<action>generateContent|streamGenerateContent)$"
)
# Azure OpenAI: a deployment's path, or the v1 path, both OpenAI's chat.
AZURE_CHAT = re.compile(r"^/openai/(?:deployments/[^/]+|v1)/chat/completions$")
# Vertex AI: Gemini and Anthropic models under a project and region.
VERTEX_PATH = re.compile(
    r"^/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/(?P<publisher>google|anthropic)"
    r"/models/(?P<model>[^:]+):(?P<action>[A-Za-z]+)$"
)
_STOP_TIMEOUT = 10.0


@dataclass
class Hit:
    """One request the fake received (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it came (the fake's own clock)

    def json(self) -> Any:
        """The body parsed as JSON (``None`` for an empty body)."""
        return json.loads(self.body) if self.body else None


@dataclass
class Reply:
    """A scripted answer that overrides the built-in behaviour for one request.

    ``body``: dict/list -> JSON (gzip-compressed in gzip mode); str/bytes -> sent as is;
    ``None`` -> empty. ``headers`` override the defaults (case-insensitively). ``chunked``
    sends the body with ``Transfer-Encoding: chunked`` instead of a ``Content-Length``.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


class FakeUpstream:
    """The fake provider server. Attributes may be changed at any time from any thread.

    - ``frame_delay``: seconds slept between two stream frames.
    - ``cut_after``: if set, streams stop after that many frames and the connection
      is closed without the chunked terminator (the client sees a truncated body).
    - ``end_delay``: seconds slept after the last frame of a stream before its end (the
      chunked terminator, or the cut of ``cut_after``), as a server that does some work
      after its final frame, or stalls before it drops, would.
    - ``stream_error_after``: if set, streams send that many frames, then the
      provider's in-band error frame (Anthropic ``event: error`` overloaded_error,
      OpenAI chat ``data: {"error": ...}``, Responses ``event: error``, Gemini
      ``{"error": ...}``, Ollama ``{"error": ...}`` line) and end cleanly.
    - ``frames_sent``: ``time.monotonic()`` after each frame of the latest stream
      was written and drained.
    - ``gzip``: non-stream JSON answers are gzip-compressed (``Content-Encoding: gzip``).
    """

    def __init__(self, *, frame_delay: float = 0.0, gzip: bool = False) -> None:
        self.frame_delay = frame_delay
        self.gzip = gzip
        self.cut_after: int | None = None
        self.end_delay = 0.0
        self.stream_error_after: int | None = None
        # Bedrock paths need a valid SigV4 signature for this fake's own host, as AWS's do.
        self.sigv4: SigV4Check | None = None
        self.frames_sent: list[float] = []
        self.hits: list[Hit] = []
        self.url = ""
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Reply]] = {}
        self._request_ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._startup_error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeUpstream:
        """Start the server thread; returns once the server is listening."""
        if self._thread is not None:
            raise RuntimeError("FakeUpstream is already running")
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._run, args=(loop, ready), name="fake-upstream", daemon=True
        )
        self._loop, self._thread, self._startup_error = loop, thread, None
        thread.start()
        ready.wait()
        if self._startup_error is not None:
            thread.join()
            self._loop = self._thread = None
            raise RuntimeError("FakeUpstream failed to start") from self._startup_error
        return self

    def stop(self) -> None:
        """Stop the server and its thread; safe to call more than once."""
        thread, loop, runner = self._thread, self._loop, self._runner
        self._thread = self._loop = self._runner = None
        if thread is None or loop is None:
            return
        try:
            if runner is not None:
                asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(_STOP_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_STOP_TIMEOUT)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen())
        except Exception as exc:  # reported to start() in the calling thread
            self._startup_error = exc
        finally:
            ready.set()
        if self._startup_error is None:
            loop.run_forever()
        # Handlers still streaming when the fake stopped: cancelled and awaited here, else
        # they are collected later, in some other test, as "Task was destroyed but it is
        # pending" (which tests that watch asyncio's log would take for tapeproxy's).
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    async def _listen(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.25)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        self._runner, self.url = runner, f"http://127.0.0.1:{port}"
        if self.sigv4 is not None:
            self.sigv4.host = f"127.0.0.1:{port}"

    # ------------------------------------------------------------------ test API

    def count(self, path: str | None = None) -> int:
        """Number of requests received, optionally only those for ``path``."""
        with self._lock:
            return sum(1 for hit in self.hits if path is None or hit.path == path)

    def script(self, path: str, *replies: Reply) -> None:
        """Queue replies for ``path``; each request to it consumes one before built-ins apply."""
        with self._lock:
            self._scripts.setdefault(path, deque()).extend(replies)

    # ------------------------------------------------------------------ serving

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {name.lower(): value for name, value in request.headers.items()}
        hit = Hit(request.method, request.path, dict(request.query), headers, body)
        with self._lock:
            self.hits.append(hit)
            out_headers = CIMultiDict({"x-request-id": f"req_{next(self._request_ids)}"})
            out_headers.update({k: v for k, v in headers.items() if k.startswith("x-echo-")})
            queue = self._scripts.get(hit.path)
            scripted = queue.popleft() if queue else None
        if scripted is not None:
            return self._scripted(scripted, out_headers)
        refused = self._unsigned(request, hit)
        if refused is not None:
            return refused
        out = self.answer(hit)
        if isinstance(out, StreamOut):
            return await self._stream(request, out, out_headers)
        out_headers["content-type"] = out.content_type
        return self._body(out.status, out.encode(), out_headers, compressible=True)

    def answer(self, hit: Hit) -> Out:
        """The built-in answer to a request (a subclass may change it: tests.fakes.drifting)."""
        return _dispatch(hit)

    def _unsigned(self, request: web.Request, hit: Hit) -> web.Response | None:
        """AWS's 403 for a Bedrock request not signed for this host with the known keys."""
        if self.sigv4 is None or not bedrock_wire.PATH.match(hit.path):
            return None
        problem = self.sigv4.problem(hit.method, request.raw_path, hit.headers, hit.body)
        if problem is None:
            return None
        kind = "InvalidSignatureException" if "signature" in problem else "UnrecognizedClient"
        headers = {
            "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/",
            "content-type": "application/json",
        }
        return web.Response(status=403, body=dumps({"message": problem}), headers=headers)

    def _body(
        self, status: int, data: bytes, headers: CIMultiDict[str], *, compressible: bool
    ) -> web.Response:
        if self.gzip and compressible:
            data = gzip_lib.compress(data, mtime=0)  # mtime=0 keeps the bytes deterministic
            headers["content-encoding"] = "gzip"
        return web.Response(status=status, body=data, headers=headers)

    def _scripted(self, reply: Reply, headers: CIMultiDict[str]) -> web.Response:
        body = reply.body
        if isinstance(body, (dict, list)):
            data, content_type = dumps(body), "application/json"
        elif isinstance(body, str):
            data, content_type = body.encode(), "text/plain; charset=utf-8"
        elif isinstance(body, (bytes, bytearray)):
            data, content_type = bytes(body), "application/octet-stream"
        else:
            data, content_type = b"", "application/octet-stream"
        headers["content-type"] = content_type
        headers.update(reply.headers)
        response = self._body(
            reply.status, data, headers, compressible=isinstance(body, (dict, list))
        )
        if reply.chunked:
            response.enable_chunked_encoding()
        return response

    async def _stream(
        self, request: web.Request, out: StreamOut, headers: CIMultiDict[str]
    ) -> web.StreamResponse:
        """Write ``out``'s frames one by one, honouring the stream knobs (the only frame loop)."""
        frames, cut = self._plan(out), self.cut_after
        if cut is not None:
            frames = frames[:cut]
        headers.update({"content-type": out.content_type, "cache-control": "no-cache"})
        response = web.StreamResponse(headers=headers)
        sent: list[float] = []
        self.frames_sent = sent
        try:
            await response.prepare(request)
            request.writer.send_headers()
            for index, frame in enumerate(frames):
                if index and self.frame_delay > 0:
                    await asyncio.sleep(self.frame_delay)
                await response.write(frame)
                await request.writer.drain()
                sent.append(time.monotonic())
            if self.end_delay > 0:
                await asyncio.sleep(self.end_delay)
            if cut is not None and request.transport is not None:
                request.transport.close()  # no chunked terminator: a truncated body
            else:
                await response.write_eof()
        except ConnectionError:
            pass  # the client went away; there is no one left to answer
        return response

    def _plan(self, out: StreamOut) -> list[bytes]:
        error_after = self.stream_error_after
        if error_after is None or error_after >= len(out.frames):
            return list(out.frames)
        return [*out.frames[:error_after], out.error(error_after)]


def _dispatch(hit: Hit) -> Out:
    parsed = _parse_json(hit.body)
    request = WireRequest(
        body=parsed if isinstance(parsed, dict) else {},
        seed=hashlib.sha256(hit.body).hexdigest(),
        headers=hit.headers,
        query=hit.query,
    )
    route = ROUTES.get((hit.method, hit.path))
    if route is not None:
        return route(request)
    match = GEMINI_PATH.match(hit.path)
    if match is not None and hit.method == "POST":
        return gemini_wire.generate_content(replace(request, params=match.groupdict()))
    if AZURE_CHAT.match(hit.path) and hit.method == "POST":
        return openai_wire.chat_completions(request)
    match = bedrock_wire.PATH.match(hit.path)
    if match is not None and hit.method == "POST":
        return bedrock_wire.dispatch(replace(request, params=match.groupdict()))
    match = VERTEX_PATH.match(hit.path)
    if match is not None and hit.method == "POST":
        return _vertex(replace(request, params=match.groupdict()))
    return _generic(hit, parsed)


def _vertex(request: WireRequest) -> Out:
    """Gemini's two actions, or Anthropic's rawPredict and streamRawPredict (the Anthropic
    SDK puts `stream` in the body; `anthropic_version` rides in the body, not a header)."""
    if request.params["publisher"] == "google":
        return gemini_wire.generate_content(request)
    headers = {**request.headers, "x-api-key": "vertex", "anthropic-version": "vertex"}
    body = {**request.body, "model": request.params["model"]}
    return anthropic_wire.messages(replace(request, body=body, headers=headers))


def _generic(hit: Hit, parsed: Any) -> JsonOut:
    """The "generic tool API": echo what was asked, deterministically."""
    return JsonOut({"path": hit.path, "method": hit.method, "query": hit.query, "echo": parsed})
