"""Pure-ASGI streaming responses: the live tee (upstream -> client, and the recorder) and the
replay of a recorded exchange. Both stop at once when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from starlette.types import Receive, Scope, Send

from proxy.errors import UpstreamCut
from proxy.pipeline import Recorder, Replay
from proxy.upstream import UpstreamResponse

RawHeaders = list[tuple[bytes, bytes]]


def raw_headers(headers: Sequence[tuple[str, str]]) -> RawHeaders:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def run_until_disconnect(work: Coroutine[Any, Any, None], receive: Receive) -> bool:
    """Run `work`; if the client disconnects first, cancel it (its `finally` closes upstream).
    True when `work` ran to its end, False when the client left first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        watch.cancel()
        raise
    watch.cancel()
    if task in done:
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


class LiveResponse:
    """Sends each upstream chunk on as it arrives, feeds the recorder, then calls `on_end(cut)`
    before the final empty chunk, so an exchange is on disk when the client sees the end.
    A client that leaves before the upstream finished gets `on_abort()` instead, and nothing
    is recorded."""

    def __init__(
        self,
        response: UpstreamResponse,
        headers: RawHeaders,
        recorder: Recorder | None,
        on_end: Callable[[bool], Awaitable[None]],
        on_abort: Callable[[], None],
    ) -> None:
        self._response = response
        self._headers = headers
        self._recorder = recorder
        self._on_end = on_end
        self._on_abort = on_abort

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._upstream_done = False
        if not await run_until_disconnect(self._pump(send), receive) and not self._upstream_done:
            self._on_abort()

    async def _pump(self, send: Send) -> None:
        status = self._response.status
        await send({"type": "http.response.start", "status": status, "headers": self._headers})
        try:
            async for chunk in self._response.chunks():
                if self._recorder is not None:
                    self._recorder.add(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamCut:
            self._upstream_done = True
            await asyncio.shield(self._on_end(True))
            raise
        finally:
            self._response.close()
        # The whole answer is in: a client that hangs up now (it had all it wanted of a 204
        # or a HEAD) must not stop the exchange from being written.
        self._upstream_done = True
        await asyncio.shield(self._on_end(False))
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class ReplayResponse:
    """A recorded answer: the body whole, or the frames one by one. With a timing factor each
    frame leaves at its recorded offset times the factor, counted from the start, so small
    delays in sending do not add up over a long stream."""

    def __init__(self, replay: Replay, factor: float | None) -> None:
        self._replay = replay
        self._factor = factor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await run_until_disconnect(self._play(send), receive)

    async def _play(self, send: Send) -> None:
        replay = self._replay
        await send({"type": "http.response.start", "status": replay.status,
                    "headers": replay.headers})
        started = time.monotonic()
        for ms, data in replay.frames:
            if self._factor:
                wait = started + ms * self._factor / 1000 - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if replay.cut:
            raise UpstreamCut("replaying a recorded upstream cut: the connection is dropped here")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class QuietCuts(logging.Filter):
    """Drops the server's traceback for a stream we cut on purpose (live or replayed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], UpstreamCut))
