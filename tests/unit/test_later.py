"""`Later`: the server's page, built at its first request, once however many come at once."""

from __future__ import annotations

import asyncio
import threading

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message

from tapeproxy.app import Later


def test_concurrent_first_requests_build_the_page_once_off_the_event_loop() -> None:
    built: list[str] = []

    def build() -> ASGIApp:
        built.append(threading.current_thread().name)
        return PlainTextResponse("the page")

    async def main() -> list[bytes]:
        later = Later(build)
        loop_thread = threading.current_thread().name

        async def ask() -> bytes:
            sent: list[Message] = []

            async def receive() -> Message:
                return {"type": "http.request", "body": b""}

            async def send(message: Message) -> None:
                sent.append(message)

            scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
            await later(scope, receive, send)
            return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

        assert not built, "nothing is built before a request asks for it"
        bodies = await asyncio.gather(*(ask() for _ in range(5)))
        assert built and built[0] != loop_thread, "built in a worker thread"
        return bodies

    assert asyncio.run(main()) == [b"the page"] * 5
    assert len(built) == 1
