"""A client reading a chat stream while the server is stopped: how its stream ended."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import httpx
import pytest

USER: Any = [{"role": "user", "content": "What is the weather in Paris today?"}]


class Stoppable(Protocol):
    """A server in this process: the test harness's, or the pytest plugin's."""

    url: str

    def stop(self) -> None: ...


def stream_through_shutdown(
    proxy: Stoppable, caplog: pytest.LogCaptureFixture, timing: str = "none"
) -> list[str | None]:
    """Stop the server while a client reads a chat stream; how the client's stream ended.
    The server's own log (uvicorn's) is captured too, where a traceback would show."""
    first = threading.Event()
    ends: list[str | None] = []

    def client() -> None:
        body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
        try:
            with httpx.stream(
                "POST",
                proxy.url + "/openai/v1/chat/completions",
                json=body,
                headers={"x-tapeproxy-timing": timing},
                timeout=30,
            ) as response:
                for _ in response.iter_raw():
                    first.set()
            ends.append(None)
        except httpx.RemoteProtocolError as exc:
            ends.append(type(exc).__name__)

    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="tapeproxy"):
            thread = threading.Thread(target=client)
            thread.start()
            assert first.wait(10)
            proxy.stop()
            thread.join(10)
    finally:
        server_log.removeHandler(caplog.handler)
    return ends
