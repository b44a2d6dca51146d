"""A live answer on its way to its door: the `Relay` hands the upstream's chunks on one by one
and records them as they pass (tee, spool, commit before the last chunk, abort), watching the
client meanwhile. A door only iterates it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from tapeproxy.engine.hangup import Watch
from tapeproxy.engine.recorder import Recording
from tapeproxy.errors import AnswerRefused, ClientGone, UpstreamCut
from tapeproxy.upstream.protocol import UpstreamResponse

_UNWATCHED = nullcontext()  # a relay whose door reports no hang-up
log = logging.getLogger("tapeproxy")


class Relay:
    """The chunks of one live answer, for its door to iterate. Each upstream chunk is handed
    on as it arrives and fed to the recording on its way; the chunk that ends the answer is
    held back until the recording is committed, so an exchange is on disk before the client
    sees the end of the body (`last` is True then). An upstream cut is committed as a cut and
    raised on. A client that leaves before the upstream finished aborts the recording and
    ClientGone is raised, unless it had the stream's final frame (an LLM stream's last event,
    the JSON-RPC response an MCP client waited for): then the upstream is read to its end for
    up to `grace` seconds (the read timeout; --max-record still bounds what is kept) and the
    exchange kept when it ends whole. Closed early
    (`aclose`), or cancelled (a shutdown: a door reports a client that left through
    `Inbound.gone`), it records nothing half-done. The upstream is closed whatever happens."""

    last = False  # the chunk just handed over ends the answer

    def __init__(
        self,
        answer: UpstreamResponse,
        recording: Recording,
        watch: Watch | None = None,
        grace: float = 0.0,
    ) -> None:
        self._answer = answer
        self._grace = grace
        self._recording = recording
        self._watch = watch
        # Each read, spill and commit is guarded on its own: a hang-up stops the relay only
        # where it waits on the upstream or the disk, never in its door's code.
        self._guard: AbstractContextManager[None] = _UNWATCHED if watch is None else watch
        if watch is not None:
            watch.grace = self._after_final_frame
        self._done = False  # the recording ended, or its commit is under way
        self._chunks = self._relay()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks  # `async for` steps the generator itself: no call between

    def __anext__(self) -> Awaitable[bytes]:
        return self._chunks.__anext__()

    async def aclose(self) -> None:
        """Stop early: nothing half-done is recorded, and the upstream is closed (also for a
        relay that was never iterated)."""
        await self._chunks.aclose()
        self._stop(None)
        self._close()

    def abandon(self, why: str) -> None:
        """Stop on purpose short of the answer's end (a fault cuts it): nothing is recorded,
        and `why` is the exchange's log line; the client did not leave. An answer whose
        upstream already ended has had its line."""
        if not self._done:
            self._done = True
            self._recording.abort(why, client_left=False)

    async def _relay(self) -> AsyncGenerator[bytes, None]:
        answer, recording, guard = self._answer, self._recording, self._guard
        if self._watch is not None:
            self._watch.follow()
        pieces = answer.chunks()
        held = b""  # the chunk that ends the answer: handed on once the exchange is written
        try:
            try:
                while True:
                    try:
                        with guard:
                            chunk = await pieces.__anext__()
                    except StopAsyncIteration:
                        break
                    if recording.feed(chunk):  # a large answer: to its scratch file, off the loop
                        with guard:
                            await recording.spill()
                    if self._watch is not None and recording.over() and self._watch.left():
                        raise ClientGone("read on after the client left: past --max-record")
                    if answer.ended:
                        held = chunk
                    else:
                        yield chunk
            except AnswerRefused as exc:
                self._done = True
                recording.refuse(f"cut, not recorded: {exc.message}")
                raise
            except UpstreamCut:
                await self._commit(cut=True)
                raise
            await self._commit(cut=False)
            self.last = True
            yield held
        except BaseException as exc:  # the client gone, a shutdown, a door that stopped early
            self._stop(exc)
            raise
        finally:
            self._close()

    async def _commit(self, cut: bool) -> None:
        """The upstream is done, whole or cut: the recording ends, whatever the client does
        now (one that hangs up once it had all it wanted of a 204 or a HEAD must not stop the
        exchange from being written). With nothing to write, no task and no suspension."""
        self._done = True
        self._answer.close()
        commit = self._recording.commit(cut)
        if not self._recording.writes:
            await commit
            return
        with self._guard:
            await _outliving(commit)

    def _after_final_frame(self) -> float:
        # Sends to a client that left are no-ops in uvicorn: the upstream is read on. An
        # answer already past --max-record has nothing left to keep: no reason to read on.
        recording = self._recording
        return self._grace if recording.final_seen() and not recording.over() else 0.0

    def _stop(self, exc: BaseException | None) -> None:
        """Abort the recording, unless it ended already. A cancelled task is a shutdown's (the
        watch's own cancellations end as ClientGone)."""
        if self._done:
            return
        self._done = True
        task = asyncio.current_task()
        cancelled = isinstance(exc, asyncio.CancelledError) or (
            not isinstance(exc, ClientGone) and task is not None and task.cancelling() > 0
        )
        if cancelled:
            self._recording.abort("cut by shutdown, nothing recorded", client_left=False)
        else:
            self._recording.abort("client went away, nothing recorded")

    def _close(self) -> None:
        self._answer.close()
        if self._watch is not None:
            self._watch.close()


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
