"""What tapeproxy.doors.head_limits relies on inside uvicorn: if an upgrade moves any of it, these
fail here, by name, rather than the cap or the deadline silently going away."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from typing import Any

import httptools
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from tapeproxy.app import create_app
from tapeproxy.cli.server import uvicorn_config
from tapeproxy.doors.head_limits import HEAD_LIMIT, HeadLimitedProtocol
from tapeproxy.settings import Settings


def test_the_server_runs_on_the_limited_protocol() -> None:
    settings = Settings.model_validate({"port": 0})
    config = uvicorn_config(create_app(settings), settings)
    config.load()
    assert config.http_protocol_class is HeadLimitedProtocol
    assert issubclass(HeadLimitedProtocol, HttpToolsProtocol)


def test_uvicorn_still_has_the_methods_overridden_and_feeds_the_parser_in_data_received() -> None:
    own = vars(HttpToolsProtocol)
    for name in ("connection_made", "connection_lost", "data_received", "on_message_begin"):
        assert callable(own.get(name)), f"uvicorn's HttpToolsProtocol has no {name} any more"
    for name in ("on_headers_complete", "on_body"):
        assert callable(own.get(name)), f"uvicorn's HttpToolsProtocol has no {name} any more"
    source = inspect.getsource(HttpToolsProtocol.data_received)
    assert "self.parser.feed_data(data)" in source, "data_received no longer feeds its bytes"
    assert "httptools.HttpRequestParser(self)" in inspect.getsource(HttpToolsProtocol.__init__)


def test_uvicorn_still_keeps_the_attributes_read() -> None:
    loop = asyncio.new_event_loop()
    try:
        settings = Settings.model_validate({"port": 0})
        config = uvicorn_config(create_app(settings), settings)
        protocol = HeadLimitedProtocol(config, ServerState(), {}, _loop=loop)
        assert protocol.loop is loop and protocol.cycle is None
        assert "self.flow = FlowControl(transport)" in inspect.getsource(
            HttpToolsProtocol.connection_made
        )
        assert FlowControl(Socket()).read_paused is False
        assert hasattr(protocol, "transport") and isinstance(
            protocol.parser, httptools.HttpRequestParser
        )
        cycle = RequestResponseCycle(
            scope={},
            transport=None,
            flow=None,
            logger=logging.getLogger("test"),
            access_logger=logging.getLogger("test"),
            access_log=False,
            default_headers=[],
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=lambda: None,
        )
        assert cycle.response_complete is False
    finally:
        loop.close()


def test_uvicorn_still_hands_the_scope_on_message_begin_made_to_the_app() -> None:
    """The drop extension is put into `self.scope` after uvicorn's on_message_begin: that
    dict must still be the one on_headers_complete gives the request's cycle."""
    begin = inspect.getsource(HttpToolsProtocol.on_message_begin)
    assert "self.scope = {" in begin
    complete = inspect.getsource(HttpToolsProtocol.on_headers_complete)
    assert "scope=self.scope" in complete
    assert "self.scope, self.receive, self.send" in inspect.getsource(RequestResponseCycle.run_asgi)


class Socket(asyncio.Transport):
    """The protocol's side of a socket: what it wrote, and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written, self.closed = b"", False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 1), "peername": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body, answers its length."""
    size, more = 0, True
    while more:
        message = await receive()
        size, more = size + len(message.get("body", b"")), message.get("more_body", False)
    body = str(size).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def served(reads: list[bytes]) -> Socket:
    """`reads` fed to a HeadLimitedProtocol one by one, the app given its turns."""

    async def feed() -> Socket:
        config = uvicorn.Config(
            echo_length, http=HeadLimitedProtocol, lifespan="off", access_log=False
        )
        protocol = HeadLimitedProtocol(config, ServerState(), {})
        socket = Socket()
        protocol.connection_made(socket)
        for data in reads:
            protocol.data_received(data)
            for _ in range(5):
                await asyncio.sleep(0)
        protocol.connection_lost(None)
        return socket

    return asyncio.run(feed())


@given(
    size=st.integers(HEAD_LIMIT - 3, HEAD_LIMIT + 3) | st.integers(100, 2 * HEAD_LIMIT),
    body=st.integers(0, 300_000),
    cuts=st.lists(st.integers(1, 2 * HEAD_LIMIT + 300_000), max_size=6),
)
def test_the_verdict_hangs_on_the_heads_size_alone_however_reads_split_it(
    size: int, body: int, cuts: list[int]
) -> None:
    start = b"POST /x HTTP/1.1\r\ncontent-length: %d\r\n" % body
    stream = start + b"x-pad: " + b"a" * (size - len(start) - 11) + b"\r\n\r\n" + b"b" * body
    assert stream.index(b"\r\n\r\n") + 4 == size
    edges = [0, *sorted({cut for cut in cuts if cut < len(stream)}), len(stream)]
    socket = served([stream[a:b] for a, b in itertools.pairwise(edges)])
    if size > HEAD_LIMIT:
        assert socket.written.startswith(b"HTTP/1.1 431 ") and socket.closed
    else:
        assert socket.written.startswith(b"HTTP/1.1 200 ") and socket.written.endswith(b"%d" % body)
