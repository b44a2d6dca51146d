"""Work raced against a client that hangs up: stopped at once (or after a grace), so a slow
upstream is not kept waiting for an answer nobody will read. No web types: a door supplies
`gone`, an awaitable that returns when its client has left."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from llmtape.errors import ClientGone, UpstreamCut

T = TypeVar("T")
Gone = Callable[[], Awaitable[None]]


async def _stop(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def race(
    task: asyncio.Future[Any], gone: Gone, grace: Callable[[], float] = lambda: 0.0
) -> bool:
    """Wait for `task`; if the client leaves first, let it go on for `grace()` seconds, then
    stop it (its `finally` closes the upstream), as a shutdown does at once. True when `task`
    ran to its end, False when the client left first and it was stopped."""
    watch = asyncio.ensure_future(gone())
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


async def unless_gone(work: Awaitable[T], gone: Gone) -> T:
    """Await `work`; if the client hangs up first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    if not await race(task, gone):
        raise ClientGone("the client hung up before the upstream answered; request closed")
    return task.result()


async def run_unless_gone(
    work: Coroutine[Any, Any, None], gone: Gone, grace: Callable[[], float] = lambda: 0.0
) -> bool:
    """Run `work`, stopped when the client leaves (after `grace()` seconds). True when it ran
    to its end."""
    task = asyncio.ensure_future(work)
    if not await race(task, gone, grace):
        return False
    task.result()
    return True


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
    return UpstreamCut("llmtape shut down: the answer was cut here")
