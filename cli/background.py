"""tapeproxy in a background thread of this process, on the address its settings give (the
pytest plugin's server): started and stopped from the calling thread, the engine reached on
the server's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tapeproxy.app import Server
from tapeproxy.cli.server import ReadyServer, uvicorn_config
from tapeproxy.settings import Settings

T = TypeVar("T")
START_SECONDS = 20.0
CALL_SECONDS = 60.0  # ending a run waits up to 5 s for recordings; reading misses is instant


class BackgroundServer:
    """tapeproxy on 127.0.0.1, port 0, in a background thread; engine calls go to its loop."""

    def __init__(self, settings: Settings) -> None:
        self.server = Server(settings)
        self.engine = self.server.engine
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._uvicorn = ReadyServer(uvicorn_config(self.server.app, settings), self._on_ready)
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
        self._uvicorn.should_exit = True
        self._thread.join(CALL_SECONDS)
