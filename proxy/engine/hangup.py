"""Work raced against a client that hangs up: stopped at once (or after a grace), so a slow
upstream is not kept waiting for an answer nobody will read. No web types: a door supplies
`gone`, an awaitable that returns when its client has left, and wraps it in a `Watch`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from tapeproxy.errors import ClientGone, UpstreamCut

T = TypeVar("T")
Gone = Callable[[], Awaitable[None]]


def _no_grace() -> float:
    return 0.0


class Watch:
    """One request's client, watched by one task for the whole request (started by the first
    guarded piece of work, ended by `close`). Guarded work runs in the request's own task (the
    one that first guards work, or that `follow`s), which is cancelled when the client hangs
    up, at once or after a grace, and its `finally` blocks close what it opened, as a
    shutdown's cancellation does. A task of its own for each piece of work and a watcher for
    each, raced with asyncio.wait, cost 18 us a piece. The grace is asked for once, when the
    hang-up is first seen during guarded work, and runs out once however many pieces of work
    follow (a live answer guards each of its reads): work after it ran out is stopped at its
    first wait."""

    # Set when work is first guarded: a request served from a cassette builds a Watch and
    # never uses it.
    _watcher: asyncio.Future[None] | None = None
    _owner: asyncio.Task[Any] | None = None  # the request's task
    _guarding = False  # the owner is in guarded work
    _timer: asyncio.TimerHandle | None = None  # the grace, running
    _graced = False  # the grace was asked for: it runs (or ran) out once
    _stopped = False  # this watch cancelled the owner

    def __init__(self, gone: Gone, grace: Callable[[], float] = _no_grace) -> None:
        self._gone = gone
        self.grace = grace  # seconds the work goes on after the hang-up, asked at the hang-up

    async def unless_gone(self, work: Awaitable[T]) -> T:
        """Await `work`; if the client hangs up first (and the grace passes), cancel it and
        raise ClientGone."""
        with self:
            return await work

    async def run_unless_gone(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run `work`, stopped when the client leaves (after the grace). True when it ran to
        its end."""
        try:
            await self.unless_gone(work)
        except ClientGone:
            return False
        return True

    def follow(self) -> None:
        """Guard work in the caller's task from now on: a door may iterate an answer in
        another task than the one that asked the engine for it."""
        if self._watcher is not None:
            self._owner = asyncio.current_task()

    def left(self) -> bool:
        """Whether the client was seen to hang up (its work may be in its grace)."""
        watcher = self._watcher
        return watcher is not None and watcher.done() and not watcher.cancelled()

    def close(self) -> None:
        """The request is over: stop watching its client."""
        if self._watcher is not None:
            self._watcher.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __enter__(self) -> None:
        """Guard what the caller's task awaits in the `with` block (which must not yield, in
        a generator): a block without coroutines of its own, for work guarded chunk by chunk."""
        watcher = self._watcher
        if watcher is None:  # the first guarded work (asking for the task costs 0.4 us)
            self._owner = asyncio.current_task()
            if self._owner is None:  # not in a task: nothing to cancel, so nothing is watched
                return
            watcher = self._watcher = asyncio.ensure_future(self._gone())
            watcher.add_done_callback(self._left)
        self._guarding, self._stopped = True, False
        if watcher.done():  # it left already: stopped at work's first wait, from the loop
            asyncio.get_running_loop().call_soon(self._left, watcher)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        """The work stopped by this watch ends in ClientGone (also when it swallowed the
        cancellation and ended anyway); a shutdown's cancellation, even one that came with
        ours, goes on as it is."""
        self._guarding = False
        if not self._stopped or self._owner is None:
            return
        if kind is not None and not issubclass(kind, asyncio.CancelledError):
            return
        if self._owner.uncancel() > 0 and kind is not None:
            return  # a shutdown's (too)
        raise ClientGone("the client hung up before its answer was complete; request closed")

    def _left(self, watcher: asyncio.Future[None]) -> None:
        """The client hung up (run by the loop, never inside the owner's own step): the work
        under guard, if any, is stopped now or after its grace."""
        if watcher.cancelled():  # closed: the request is over
            return
        watcher.exception()  # retrieved: a watch that failed counts as a client gone
        if not self._guarding or self._timer is not None or self._stopped:
            return
        if not self._graced:
            self._graced = True
            wait = self.grace()
            if wait > 0:
                self._timer = asyncio.get_running_loop().call_later(wait, self._stop)
                return
        self._stop()

    def _stop(self) -> None:
        """Stop the work under guard; with none (the grace ran out between two pieces of
        work), the next is stopped by `_left`, which guarding it calls for it."""
        self._timer = None
        if self._guarding and self._owner is not None and not self._stopped:
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
