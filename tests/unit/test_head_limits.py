"""What llmtape.cli.head_limits relies on inside uvicorn: if an upgrade moves any of it, these
fail here, by name, rather than the cap or the deadline silently going away."""

from __future__ import annotations

import asyncio
import inspect
import logging

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from llmtape.app import create_app
from llmtape.cli.head_limits import HeadLimitedProtocol
from llmtape.cli.server import uvicorn_config
from llmtape.settings import Settings


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
    for name in ("on_headers_complete", "on_message_complete"):
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
        assert cycle.keep_alive is True and cycle.response_complete is False
    finally:
        loop.close()
