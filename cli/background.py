"""tapeproxy in a background thread of this process, on the address its settings give (the
pytest plugin's server): started and stopped from the calling thread, the engine reached on
the server's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvicorn

from tapeproxy.app import Server
from tapeproxy.cli.server import ReadyServer, uvicorn_config
from tapeproxy.settings import Settings

T = TypeVar("T")
START_SECONDS = 20.0
CALL_SECONDS = 60.0  # ending a run waits up to 5 s for recordings; reading misses is instant
DRAIN_POLL_SECONDS = 0.002
uvicorn_log = logging.getLogger("uvicorn.error")  # where uvicorn says what a shutdown cut


class ThreadServer(ReadyServer):
    """uvicorn as the plugin runs it, stopped without uvicorn's fixed waits. uvicorn looks for
    a stop every 0.1 s, and its graceful shutdown then sleeps 0.1 s before it waits for the
    connections: ~0.15 s at the end of every pytest session and of every xdist worker, when
    every test's run is already ended. Here `stop_soon` wakes the loop at once, and the
    shutdown waits only while an answer is still being sent or its connection has not closed
    (up to the graceful timeout, then the requests are cancelled, as uvicorn does); then the
    app's own shutdown runs."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[str], None]) -> None:
        super().__init__(config, on_ready)
        self._stop = asyncio.Event()  # bound to the loop that first waits on it

    async def main_loop(self) -> None:
        if not await self.on_tick(0):  # the default headers, as uvicorn's loop sets them
            await self._stop.wait()

    def stop_soon(self) -> None:
        """Called on the server's loop: end `main_loop` now."""
        self.should_exit = True
        self._stop.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state, loop = self.server_state, asyncio.get_running_loop()
        grace = self.config.timeout_graceful_shutdown  # None: as long as it takes
        deadline = math.inf if grace is None else loop.time() + grace
        for server in self.servers:
            server.close()
        for connection in list(state.connections):
            connection.shutdown()  # an idle one closes now; a busy one once its answer is out
        # Until every answer has left its buffers and its connection is closed (uvicorn's
        # wait, polled more often: nothing signals a connection's end).
        while (state.connections or state.tasks) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(DRAIN_POLL_SECONDS)
        if state.tasks:
            uvicorn_log.error(
                "Cancel %s running task(s), timeout graceful shutdown exceeded", len(state.tasks)
            )
            for task in state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        await self.lifespan.shutdown()


class BackgroundServer:
    """tapeproxy on 127.0.0.1, port 0, in a background thread; engine calls go to its loop."""

    def __init__(self, settings: Settings) -> None:
        self.server = Server(settings)
        self.engine = self.server.engine
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        door = self.server.protocol
        config = uvicorn_config(self.server.app, settings, protocol=door)
        self._uvicorn = ThreadServer(config, self._on_ready)
        self._thread = threading.Thread(target=self._run, name="tapeproxy-pytest", daemon=True)

    def _on_ready(self, url: str) -> None:
        self._loop = asyncio.get_running_loop()
        self.url = url
        self._ready.set()

    def _run(self) -> None:
        # As uvicorn runs it (and `tapeproxy serve`): on its loop of choice, uvloop where it
        # is installed, which takes ~15 % less of the test's process per request than
        # asyncio's own loop. The loop is this thread's alone; no policy is set.
        with contextlib.suppress(SystemExit):  # uvicorn's way to say it could not listen
            self._uvicorn.run()
        self._ready.set()

    def start(self) -> BackgroundServer:
        self._thread.start()
        if not self._ready.wait(START_SECONDS) or not self.url:
            raise RuntimeError("tapeproxy did not start; see the log above")
        return self

    def call(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `work()` on the server's event loop, where the engine lives; its result."""
        if self._loop is None:
            raise RuntimeError("tapeproxy is not running")
        return asyncio.run_coroutine_threadsafe(work(), self._loop).result(CALL_SECONDS)

    def stop(self) -> None:
        # First: a server still starting finds it before its loop waits (uvicorn looks before
        # main_loop, and main_loop as it begins); one already waiting is woken.
        self._uvicorn.should_exit = True
        if self._loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed as we asked
                self._loop.call_soon_threadsafe(self._uvicorn.stop_soon)
        self._thread.join(CALL_SECONDS)
