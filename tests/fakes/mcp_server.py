"""A real MCP server built with the `mcp` SDK (Streamable HTTP), on an ephemeral loopback
port in a thread: two tools, and a count of the tool calls that reached it."""

from __future__ import annotations

import socket
import threading
from types import TracebackType

import uvicorn
from mcp.server import MCPServer


class _Server(uvicorn.Server):
    """uvicorn's server, telling when it has started (or failed to)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


class ToolServer:
    """`with ToolServer() as tools:` serves MCP at `tools.url` + "/mcp" until the block ends."""

    def __init__(self, variant: str | None = None) -> None:
        """`variant`: the server as its API drifted (`tool-removed`: no get_weather;
        `schema-changed`: add takes a text `b`), for `tapeproxy drift`."""
        self.calls: list[str] = []  # the tools called, in order
        mcp = MCPServer("weather-tools")

        if variant == "schema-changed":

            @mcp.tool(name="add")
            def add_text(a: int, b: str) -> int:
                """Add two numbers."""
                self.calls.append("add")
                return a + int(b)

        else:

            @mcp.tool()
            def add(a: int, b: int) -> int:
                """Add two numbers."""
                self.calls.append("add")
                return a + b

        if variant != "tool-removed":

            @mcp.tool()
            def get_weather(city: str) -> str:
                """Today's weather in a city."""
                self.calls.append("get_weather")
                return f'{{"city": "{city}", "forecast": "sunny", "celsius": 21}}'

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(mcp.streamable_http_app(), log_level="warning", lifespan="on")
        self._server = _Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> ToolServer:
        self._thread.start()
        if not self._server.ready.wait(timeout=20) or not self._server.started:
            raise RuntimeError("the MCP server did not start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> ToolServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
