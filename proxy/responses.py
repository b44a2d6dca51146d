"""Pure-ASGI streaming responses: the live tee (upstream -> client, and the recorder) and the
replay of a recorded exchange. Both stop at once when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from llmtape.errors import ClientGone, UpstreamCut
from llmtape.pipeline import Recorder, Replay
from llmtape.upstream import UpstreamResponse
from starlette.types import Receive, Scope, Send

RawHeaders = list[tuple[bytes, bytes]]
T = TypeVar("T")


def raw_headers(headers: Sequence[tuple[str, str]]) -> RawHeaders:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


# How long a recording goes on reading the upstream after its client left, when the client
# had the stream's final frame: the end-of-body marker is usually a few ms behind it.
GRACE_AFTER_FINAL_FRAME = 2.0


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _stop(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _race(
    task: asyncio.Future[Any], receive: Receive, grace: Callable[[], float] = lambda: 0.0
) -> bool:
    """Wait for `task`; if the client disconnects first, let it go on for `grace()` seconds,
    then stop it (its `finally` closes the upstream), as a shutdown does at once. True when
    `task` ran to its end, False when the client left first and it was stopped."""
    watch = asyncio.ensure_future(_until_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done and (wait := grace()) > 0:
            done, _ = await asyncio.wait({task}, timeout=wait)
    except BaseException:
        await _stop(task)
        raise
    finally:
        watch.cancel()
    if task in done:
        return True
    await _stop(task)
    return False


async def unless_client_leaves(work: Awaitable[T], receive: Receive) -> T:
    """Await `work` (the request has been read whole); if the client hangs up first, cancel
    it, so a slow upstream is not kept waiting for an answer nobody will read."""
    task = asyncio.ensure_future(work)
    if not await _race(task, receive):
        raise ClientGone("the client hung up before the upstream answered; request closed")
    return task.result()


async def run_until_disconnect(
    work: Coroutine[Any, Any, None], receive: Receive, grace: Callable[[], float] = lambda: 0.0
) -> bool:
    """Run `work`, stopped when the client leaves (after `grace()` seconds). True when it ran
    to its end."""
    task = asyncio.ensure_future(work)
    if not await _race(task, receive, grace):
        return False
    task.result()
    return True


async def cut_on_shutdown(play: Coroutine[Any, Any, T]) -> T:
    """Await `play`; when the server cancels it on shutdown, end with a quiet cut instead of
    the CancelledError that uvicorn would log with a traceback. The client sees a cut."""
    try:
        return await play
    except asyncio.CancelledError:
        raise UpstreamCut("llmtape shut down: the answer was cut here") from None


class LiveResponse:
    """Sends each upstream chunk on as it arrives, feeds the recorder, then calls `on_end(cut)`
    before the final empty chunk, so an exchange is on disk when the client sees the end.
    A client that leaves before the upstream finished gets `on_abort()` instead, and nothing
    is recorded, unless it had the stream's final frame: then the upstream is read to its end
    for up to GRACE_AFTER_FINAL_FRAME and the exchange kept. A shutdown that cancels the
    stream gets `on_shutdown()` and records nothing."""

    def __init__(
        self,
        response: UpstreamResponse,
        headers: RawHeaders,
        recorder: Recorder | None,
        on_end: Callable[[bool], Awaitable[None]],
        on_abort: Callable[[], None],
        on_shutdown: Callable[[], None],
    ) -> None:
        self._response = response
        self._headers = headers
        self._recorder = recorder
        self._on_end = on_end
        self._on_abort = on_abort
        self._on_shutdown = on_shutdown
        self._upstream_done = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await cut_on_shutdown(self._run(receive, send))

    async def _run(self, receive: Receive, send: Send) -> None:
        # Exactly one of on_end (called by the pump), on_shutdown and on_abort runs.
        try:
            finished = await run_until_disconnect(self._pump(send), receive, self._grace)
        except asyncio.CancelledError:
            if not self._upstream_done:
                self._on_shutdown()
            raise
        except Exception:
            if not self._upstream_done:
                self._on_abort()
            raise
        if not finished and not self._upstream_done:
            self._on_abort()

    def _grace(self) -> float:
        """Sends to a client that left are no-ops in uvicorn, so the pump can read on."""
        final = self._recorder is not None and self._recorder.final_seen()
        return GRACE_AFTER_FINAL_FRAME if final else 0.0

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
    delays in sending do not add up over a long stream; a recorded cut comes when it came."""

    def __init__(self, replay: Replay, factor: float | None) -> None:
        self._replay = replay
        self._factor = factor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await cut_on_shutdown(run_until_disconnect(self._play(send), receive))

    async def _play(self, send: Send) -> None:
        replay = self._replay
        await send(
            {"type": "http.response.start", "status": replay.status, "headers": replay.headers}
        )
        started = time.monotonic()
        for ms, data in replay.frames:
            await self._until(started, ms)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if replay.cut:
            await self._until(started, replay.end_ms or 0)
            raise UpstreamCut("replaying a recorded upstream cut: the connection is dropped here")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _until(self, started: float, ms: int) -> None:
        if self._factor:
            wait = started + ms * self._factor / 1000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)


class QuietCuts(logging.Filter):
    """Drops the server's traceback for a stream we cut on purpose (live or replayed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], UpstreamCut))
