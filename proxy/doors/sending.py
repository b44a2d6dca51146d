"""Pure-ASGI sending of the engine's answers: a live answer as the engine hands its chunks on,
a recorded one replayed, an error as JSON. Each stops at once when the client goes away."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from functools import partial
from typing import Any

from starlette.types import Receive, Scope, Send

from tapeproxy.engine.hangup import Watch, cut_on_shutdown, shutdown_cut
from tapeproxy.engine.inbound import Live, Serve
from tapeproxy.errors import ClientGone, Dropped, UpstreamCut

# The ASGI extension through which tapeproxy's own uvicorn protocol (doors.head_limits) lets
# the app close a connection with nothing sent: {"drop": a callable that aborts it}.
DROP_EXTENSION = "tapeproxy.drop"


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client hangs up (the request body has been read whole)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def send_json(send: Send, status: int, body: dict[str, Any] | list[Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def send_live(live: Live, send: Send) -> None:
    """A live answer on the wire: its head at once (when `held`, with its first chunk), each
    chunk as the engine hands it on, the last one with the end of the body. A cut (the
    upstream's, or a shutdown's) drops the connection after the head; a client that left is
    sent nothing more. Recording is the engine's business, inside `live.chunks`."""
    chunks = live.chunks
    start = {"type": "http.response.start", "status": live.status, "headers": live.headers}
    started = not live.held
    try:
        if started:
            await send(start)
        async for chunk in chunks:
            if not started:
                started = True
                await send(start)
            await send({"type": "http.response.body", "body": chunk, "more_body": not chunks.last})
    except ClientGone:
        return  # nobody is left to send to
    except (UpstreamCut, asyncio.CancelledError) as exc:
        # The head first: the answer ends as a cut (the connection dropped mid-body), not as
        # a 500 the server makes up, which an SDK retries as a server error. A drop (a
        # fault) sends nothing: the door closes the connection (see `drop`).
        if not started and not isinstance(exc, Dropped):
            await send(start)
        if isinstance(exc, asyncio.CancelledError):
            raise shutdown_cut() from None
        raise
    finally:
        await chunks.aclose()


async def drop(scope: Scope, receive: Receive, why: Dropped) -> None:
    """Close the connection with nothing sent, through the server's DROP_EXTENSION, and wait
    until the server has seen it closed (so it answers no 500 of its own). On a server
    without it, `why` is raised: the client gets that server's error instead."""
    extension = scope.get("extensions", {}).get(DROP_EXTENSION)
    if extension is None:
        raise why
    extension["drop"]()
    await until_disconnect(receive)


async def send_replay(serve: Serve, receive: Receive, send: Send) -> None:
    """A recorded answer: the body whole, or the frames one by one. With a timing factor each
    frame leaves at its recorded offset times the factor, counted from the start, so small
    delays in sending do not add up over a long stream; a recorded cut comes when it came."""
    replay, factor = serve.replay, serve.timing
    if factor is None and not replay.cut:
        # The common case, an answer sent at once (a stream's frames too, in one write: the
        # same bytes, without a wait in between to keep): no task to watch for the client.
        try:
            await send(
                {"type": "http.response.start", "status": replay.status, "headers": replay.headers}
            )
            await send({"type": "http.response.body", "body": replay.whole})
        except asyncio.CancelledError:
            raise shutdown_cut() from None
        return

    async def until(started: float, ms: int) -> None:
        if factor:
            wait = started + ms * factor / 1000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)

    async def play() -> None:
        await send(
            {"type": "http.response.start", "status": replay.status, "headers": replay.headers}
        )
        started = time.monotonic()
        for ms, data in replay.frames:
            await until(started, ms)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if replay.cut:
            await until(started, replay.end_ms or 0)
            raise UpstreamCut("replaying a recorded upstream cut: the connection is dropped here")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    watch = Watch(partial(until_disconnect, receive))
    try:
        await cut_on_shutdown(watch.run_unless_gone(play()))
    finally:
        watch.close()


class QuietCuts(logging.Filter):
    """Drops the server's traceback for a stream we cut on purpose (live or replayed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], UpstreamCut))
