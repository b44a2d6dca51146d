"""The hang-up watch: guarded work runs in the caller's task and is stopped when the client
leaves (at once, or after a grace); a shutdown's cancellation is never taken for a hang-up."""

from __future__ import annotations

import asyncio

import pytest

from tapeproxy.engine.hangup import Watch
from tapeproxy.errors import ClientGone


class Client:
    """A client that hangs up when told: `gone` returns then."""

    def __init__(self) -> None:
        self.left = asyncio.Event()

    async def gone(self) -> None:
        await self.left.wait()


class Work:
    """Work that waits `seconds`, noting whether it ended and whether its `finally` ran."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ended = self.closed = False

    async def __call__(self) -> str:
        try:
            await asyncio.sleep(self.seconds)
            self.ended = True
            return "answer"
        finally:
            self.closed = True

    async def pump(self) -> None:
        await self()


def test_work_that_ends_first_gives_its_result_and_leaves_no_cancellation_behind() -> None:
    async def scenario() -> str:
        client = Client()
        watch = Watch(client.gone)
        try:
            result = await watch.unless_gone(Work(0)())
            whole = await watch.run_unless_gone(Work(0.01).pump())
        finally:
            watch.close()
        client.left.set()  # after close: nothing is stopped any more
        await asyncio.sleep(0.01)
        assert whole
        return result

    assert asyncio.run(scenario()) == "answer"


def test_a_client_that_leaves_stops_the_work_and_the_task_goes_on() -> None:
    work = Work(10)

    async def scenario() -> None:
        client = Client()
        watch = Watch(client.gone)
        asyncio.get_running_loop().call_later(0.02, client.left.set)
        with pytest.raises(ClientGone):
            await watch.unless_gone(work())
        await asyncio.sleep(0.01)  # no cancellation left pending on this task
        watch.close()

    asyncio.run(scenario())
    assert work.closed and not work.ended


def test_after_the_client_left_the_next_work_is_stopped_at_its_first_wait() -> None:
    work = Work(10)

    async def scenario() -> bool:
        client = Client()
        watch = Watch(client.gone)
        assert await watch.run_unless_gone(Work(0).pump())
        client.left.set()
        await asyncio.sleep(0.01)
        try:
            return await watch.run_unless_gone(work.pump())
        finally:
            watch.close()

    assert asyncio.run(scenario()) is False
    assert work.closed and not work.ended


@pytest.mark.parametrize(("seconds", "whole"), [(0.05, True), (10, False)])
def test_a_grace_lets_the_work_finish_or_stops_it_when_it_runs_out(
    seconds: float, whole: bool
) -> None:
    work = Work(seconds)

    async def scenario() -> bool:
        client = Client()
        watch = Watch(client.gone, grace=lambda: 0.3)
        asyncio.get_running_loop().call_later(0.01, client.left.set)
        try:
            return await watch.run_unless_gone(work.pump())
        finally:
            watch.close()

    assert asyncio.run(scenario()) is whole
    assert work.ended is whole and work.closed


def test_a_shutdown_is_never_taken_for_a_client_that_left() -> None:
    work = Work(10)

    async def guarded(client: Client) -> bool:
        watch = Watch(client.gone)
        try:
            return await watch.run_unless_gone(work.pump())
        finally:
            watch.close()

    async def scenario() -> None:
        client = Client()
        task = asyncio.ensure_future(guarded(client))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert work.closed and not work.ended


def test_a_shutdown_that_comes_just_after_the_client_left_is_not_swallowed() -> None:
    work = Work(10)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        left = asyncio.Event()

        async def gone() -> None:
            await left.wait()
            # The shutdown's cancel lands after the watch stopped the work for the hang-up,
            # before the work has seen either.
            loop.call_soon(lambda: loop.call_soon(task.cancel))

        async def guarded() -> bool:
            watch = Watch(gone)
            try:
                return await watch.run_unless_gone(work.pump())
            finally:
                watch.close()

        task = asyncio.ensure_future(guarded())
        await asyncio.sleep(0.02)
        left.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert work.closed and not work.ended


def test_a_grace_runs_out_once_over_many_pieces_of_work() -> None:
    """A live answer guards each read: the grace that began at the hang-up is not granted
    afresh to every read after it, and work begun after it ran out stops at once."""
    ran: list[int] = []

    async def scenario() -> None:
        client = Client()
        watch = Watch(client.gone, grace=lambda: 0.3)
        client.left.set()
        started = asyncio.get_running_loop().time()
        try:
            with pytest.raises(ClientGone):
                for n in range(100):  # 100 pieces of 0.05 s each, a grace of 0.3 s in all
                    await watch.unless_gone(asyncio.sleep(0.05))
                    ran.append(n)
            assert asyncio.get_running_loop().time() - started < 0.6
            await asyncio.sleep(0.01)  # between two pieces: the grace has run out already
            with pytest.raises(ClientGone):
                await watch.unless_gone(asyncio.sleep(10))
        finally:
            watch.close()

    asyncio.run(scenario())
    assert 3 <= len(ran) <= 6, ran
