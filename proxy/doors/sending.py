"""Pure-ASGI sending of the engine's answers: a live answer teed through its recording, a
recorded one replayed, an error as JSON. Each stops at once when the client goes away."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

from starlette.types import Receive, Send

from tapeproxy.engine.hangup import Watch, cut_on_shutdown, shutdown_cut
from tapeproxy.engine.inbound import Live, Serve
from tapeproxy.errors import AnswerRefused, UpstreamCut

# How long a recording goes on reading the upstream after its client left, when the client
# had the stream's final frame: the end-of-body marker is usually a few ms behind it.
GRACE_AFTER_FINAL_FRAME = 2.0

log = logging.getLogger("tapeproxy")


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client hangs up (the request body has been read whole)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def send_live(live: Live, receive: Receive, send: Send) -> None:
    """Each upstream chunk goes on as it arrives and into the recording, which is committed
    before the final empty chunk, so an exchange is on disk when the client sees the end. A
    client that leaves before the upstream finished aborts it, unless it had the stream's final
    frame: then the upstream is read to its end for up to GRACE_AFTER_FINAL_FRAME and the
    exchange kept. A shutdown that cancels the stream aborts it too."""
    recording, answer = live.recording, live.answer
    watch = live.watch if live.watch is not None else Watch(partial(until_disconnect, receive))
    finished = ended = False
    last = b""  # held back until the exchange is written

    def grace() -> float:  # sends to a client that left are no-ops in uvicorn: read on
        return GRACE_AFTER_FINAL_FRAME if recording.final_seen() else 0.0

    start = {"type": "http.response.start", "status": answer.status, "headers": live.headers}
    # An answer that is all in already (nearly every one that is not a stream) and recorded
    # goes out whole once it is written: its head and body in two writes back to back, not
    # the head now and the body a write to disk later (one wake-up of the client less).
    held = recording.writes and answer.whole

    async def head() -> None:
        """The held head, once: before the first chunk that goes on alone, before a cut's
        commit, after the commit, or when cancelled (a shutdown, a client gone) while it is
        held. Then the answer ends as a cut (the connection dropped mid-body), as any other
        answer a shutdown cuts, not as a 500 the server makes up, which an SDK retries as a
        server error (the answer is still written: its commit runs on)."""
        nonlocal held
        if held:
            held = False
            await send(start)

    async def pump() -> None:
        nonlocal finished, ended, last
        try:
            if not held:
                await send(start)
            async for chunk in answer.chunks():
                if recording.feed(chunk):  # a large answer: to its scratch file, off the loop
                    await recording.spill()
                # The last chunk carries the end of the body: one write to the client socket
                # less (an answer that came in one piece, mostly). When it is recorded, that
                # is once the exchange is written.
                if answer.ended and recording.writes:
                    last = chunk
                    continue
                await head()
                ended = answer.ended
                await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
        except AnswerRefused as exc:
            finished = True
            recording.refuse(f"cut, not recorded: {exc.message}")
            raise
        except UpstreamCut:
            finished = True
            await head()
            await _outliving(recording.commit(cut=True))
            raise
        except asyncio.CancelledError:
            await head()
            raise
        finally:
            answer.close()
        # The whole answer is in: a client that hangs up now (it had all it wanted of a 204
        # or a HEAD) must not stop the exchange from being written. Nothing to write (no
        # suspension, nothing to shield): no task.
        finished = True
        commit = recording.commit(cut=False)
        try:
            await (_outliving(commit) if recording.writes else commit)
        except asyncio.CancelledError:
            await head()
            raise
        await head()
        if not ended:
            await send({"type": "http.response.body", "body": last, "more_body": False})

    try:
        whole = await cut_on_shutdown(watch.run_unless_gone(pump(), grace))
    except UpstreamCut as exc:
        if not finished:
            recording.abort("cut by shutdown, nothing recorded", client_left=False)
        raise exc
    except Exception:
        if not finished:
            recording.abort("client went away, nothing recorded")
        raise
    finally:
        watch.close()
        answer.close()  # closed by pump already, unless it never ran: its connection back
    if not whole and not finished:
        recording.abort("client went away, nothing recorded")


async def _outliving(commit: Coroutine[Any, Any, None]) -> None:
    """Await a commit that a hang-up or a shutdown must not stop: it runs on in its own
    task. Should it fail after its request is gone, the failure is logged, not left for
    asyncio to report as never retrieved."""
    request = asyncio.current_task()
    task = asyncio.ensure_future(commit)

    def retrieved(done: asyncio.Future[None]) -> None:
        if done.cancelled():
            return
        failure = done.exception()  # retrieved, whoever awaits it
        if failure is not None and (request is None or request.done()):
            log.error("writing a recording failed after its request ended", exc_info=failure)

    task.add_done_callback(retrieved)
    await asyncio.shield(task)


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
