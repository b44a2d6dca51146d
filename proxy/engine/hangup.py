"""Work raced against a client that hangs up: stopped at once (or after a grace), so a slow
upstream is not kept waiting for an answer nobody will read. No web types: a door supplies
`gone`, an awaitable that returns when its client has left, and wraps it in a `Watch`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

from tapeproxy.errors import ClientGone, UpstreamCut

T = TypeVar("T")
Gone = Callable[[], Awaitable[None]]


def _no_grace() -> float:
    return 0.0


class Watch:
    """One request's client, watched by one task for the whole request (started by the first
    guarded piece of work, ended by `close`). Guarded work runs in the caller's own task, which
    is cancelled when the client hangs up, at once or after a grace, and its `finally` blocks
    close what it opened, as a shutdown's cancellation does. A task of its own for each piece
    of work and a watcher for each, raced with asyncio.wait, cost 18 us a piece. The grace is
    asked for once, when the hang-up is first seen during guarded work, and runs out once
    however many pieces of work follow (a live answer guards each of its reads): work after
    it ran out is stopped at its first wait."""

    # Set when work is first guarded: a request served from a cassette builds a Watch and
    # never uses it.
    _watcher: asyncio.Future[None] | None = None
    _owner: asyncio.Task[Any] | None = None  # the task running guarded work
    _grace: Callable[[], float] = staticmethod(_no_grace)
    _timer: asyncio.TimerHandle | None = None  # the grace, running
    _graced = False  # the grace was asked for: it runs (or ran) out once
    _stopped = False  # this watch cancelled the owner

    def __init__(self, gone: Gone) -> None:
        self._gone = gone

    async def unless_gone(self, work: Awaitable[T], grace: Callable[[], float] = _no_grace) -> T:
        """Await `work`; if the client hangs up first (and `grace()` seconds pass), cancel it
        and raise ClientGone."""
        whole, result = await self._guard(work, grace)
        if not whole:
            raise ClientGone("the client hung up before its answer was complete; request closed")
        return cast(T, result)

    async def run_unless_gone(
        self, work: Coroutine[Any, Any, None], grace: Callable[[], float] = _no_grace
    ) -> bool:
        """Run `work`, stopped when the client leaves (after `grace()` seconds). True when it
        ran to its end."""
        whole, _ = await self._guard(work, grace)
        return whole

    def close(self) -> None:
        """The request is over: stop watching its client."""
        if self._watcher is not None:
            self._watcher.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _guard(self, work: Awaitable[T], grace: Callable[[], float]) -> tuple[bool, T | None]:
        owner = asyncio.current_task()
        if owner is None:  # not in a task: nothing to cancel, so nothing is watched
            return True, await work
        watcher = self._watcher
        if watcher is None:
            watcher = self._watcher = asyncio.ensure_future(self._gone())
            watcher.add_done_callback(self._left)
        self._owner, self._grace, self._stopped = owner, grace, False
        if watcher.done():  # it left already: stopped at work's first wait, from the loop
            asyncio.get_running_loop().call_soon(self._left, watcher)
        try:
            result = await work
        except asyncio.CancelledError:
            if not self._stopped or owner.uncancel() > 0:
                raise  # a shutdown's (too)
            return False, None
        finally:
            self._owner = None
        if self._stopped:  # the work swallowed the cancellation and ended anyway
            owner.uncancel()
            return False, None
        return True, result

    def _left(self, watcher: asyncio.Future[None]) -> None:
        """The client hung up (run by the loop, never inside the owner's own step): the work
        under guard, if any, is stopped now or after its grace."""
        if watcher.cancelled():  # closed: the request is over
            return
        watcher.exception()  # retrieved: a watch that failed counts as a client gone
        if self._owner is None or self._timer is not None or self._stopped:
            return
        if not self._graced:
            self._graced = True
            wait = self._grace()
            if wait > 0:
                self._timer = asyncio.get_running_loop().call_later(wait, self._stop)
                return
        self._stop()

    def _stop(self) -> None:
        """Stop the work under guard; with none (the grace ran out between two pieces of
        work), the next is stopped by `_left`, which `_guard` calls for it."""
        self._timer = None
        if self._owner is not None and not self._stopped:
            self._stopped = True
            self._owner.cancel()


async def cut_on_shutdown(play: Coroutine[Any, Any, T]) -> T:
    """Await `play`; when the server cancels it on shutdown, end with a quiet cut instead of
    the CancelledError that uvicorn would log with a traceback. The client sees a cut."""
    try:
        return await play
    except asyncio.CancelledError:
        raise shutdown_cut() from None


def shutdown_cut() -> UpstreamCut:
    """What a shutdown's CancelledError becomes (see cut_on_shutdown; the replay path catches
    it in place, without a coroutine around each await)."""
    return UpstreamCut("tapeproxy shut down: the answer was cut here")
