"""A weather agent on the openai SDK: a tool-calling loop that runs the model's tool calls
until it answers. It knows nothing of tapeproxy: point OPENAI_BASE_URL at it.

    tapeproxy serve --cassette examples/python-agent          # replays the committed cassette
    OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1 OPENAI_API_KEY=sk-any \\
        python examples/agents/python_agent.py
"""

from __future__ import annotations

import json
from typing import Any

from openai import OpenAI

MODEL = "gpt-4o-mini"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Today's weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city: str) -> str:
    return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})


def run(question: str, client: OpenAI, max_steps: int = 5) -> str:
    """Ask, run every tool call the model makes, ask again, until it answers in text."""
    messages: list[Any] = [{"role": "user", "content": question}]
    for _ in range(max_steps):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        calls = [call for call in message.tool_calls if call.type == "function"]
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in calls
                ],
            }
        )
        for call in calls:
            result = get_weather(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError(f"no answer after {max_steps} steps")


if __name__ == "__main__":
    print(run("What is the weather in Paris today?", OpenAI(max_retries=0)))
