"""A weather agent on the anthropic SDK: tool use until the model answers, the answer
streamed. It knows nothing of tapeproxy: point ANTHROPIC_BASE_URL at it.

    tapeproxy serve --cassette examples/anthropic-agent       # replays the committed cassette
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic ANTHROPIC_API_KEY=sk-any \\
        python examples/agents/anthropic_agent.py
"""

from __future__ import annotations

import json
from typing import Any

from anthropic import Anthropic

MODEL = "claude-sonnet-4-5"
TOOLS: list[Any] = [
    {
        "name": "get_weather",
        "description": "Today's weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def get_weather(city: str) -> str:
    return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})


def run(question: str, client: Anthropic, max_steps: int = 5) -> str:
    """Ask; while the model asks for tools, run them and send their results back."""
    messages: list[Any] = [{"role": "user", "content": question}]
    for _ in range(max_steps):
        with client.messages.stream(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=messages
        ) as stream:
            reply = stream.get_final_message()
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            return "".join(block.text for block in reply.content if block.type == "text")
        messages.append({"role": "assistant", "content": reply.content})
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": get_weather(**use.input),  # type: ignore[arg-type]
                    }
                    for use in uses
                ],
            }
        )
    raise RuntimeError(f"no answer after {max_steps} steps")


if __name__ == "__main__":
    print(run("What is the weather in Paris today?", Anthropic(max_retries=0)))
