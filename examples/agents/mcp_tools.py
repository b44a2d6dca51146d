"""The weather tool of examples/agents/mcp_agent.py as an MCP server: the official `mcp` SDK's
MCPServer, serving Streamable HTTP at /mcp on 127.0.0.1. It prints one line with its URL.

    python examples/agents/mcp_tools.py [PORT]      # 0 (the default): any free port
"""

from __future__ import annotations

import json
import socket
import sys

import uvicorn
from mcp.server import MCPServer

tools = MCPServer("weather")


@tools.tool()
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})


def main(port: int) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    print(f"MCP tools on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(tools.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
