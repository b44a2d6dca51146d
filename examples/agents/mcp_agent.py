"""A weather agent on the openai SDK whose tools live on an MCP server: it lists the server's
tools, hands them to the model, and runs each tool call the model makes on the server (the
official `mcp` SDK client, Streamable HTTP) until the model answers. It knows nothing of
tapeproxy: point OPENAI_BASE_URL and MCP_URL at it, and both go into one cassette.

    python examples/agents/mcp_tools.py 8000 &                  # the tool server
    tapeproxy serve --mode record --cassette examples/mcp-agent \\
        --upstream tools=http://127.0.0.1:8000
    OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1 OPENAI_API_KEY=sk-... \\
        MCP_URL=http://127.0.0.1:8787/tools/mcp python examples/agents/mcp_agent.py
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError
from openai import AsyncOpenAI

MODEL = "gpt-4o-mini"
QUESTION = "What is the weather in Paris today?"


def function_tools(listed: Any) -> list[Any]:
    """The MCP server's tools as the model's function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.input_schema,
            },
        }
        for tool in listed.tools
    ]


async def call_tool(tools: Client, name: str, arguments: str) -> str:
    """What the tool returned, as text for the model; an error too (the model may recover)."""
    try:
        result = await tools.call_tool(name, json.loads(arguments))
    except MCPError as exc:
        return f"tool error {exc.code}: {exc.message}"
    return "\n".join(part.text for part in result.content if part.type == "text")


async def run(question: str, model: AsyncOpenAI, tools_url: str, max_steps: int = 5) -> str:
    """Ask, run every tool call the model makes on the MCP server, ask again, until it answers."""
    async with Client(tools_url) as tools:
        offered = function_tools(await tools.list_tools())
        messages: list[Any] = [{"role": "user", "content": question}]
        for _ in range(max_steps):
            reply = await model.chat.completions.create(
                model=MODEL, messages=messages, tools=offered
            )
            message = reply.choices[0].message
            calls = [call for call in message.tool_calls or [] if call.type == "function"]
            if not calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in calls:
                content = await call_tool(tools, call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    raise RuntimeError(f"no answer after {max_steps} steps")


if __name__ == "__main__":
    question = sys.argv[1] if len(sys.argv) > 1 else QUESTION
    url = os.environ.get("MCP_URL", "http://127.0.0.1:8787/tools/mcp")
    print(asyncio.run(run(question, AsyncOpenAI(max_retries=0), url)))
