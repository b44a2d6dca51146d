"""The MCP example agent (examples/agents/mcp_agent.py) and its tool server
(examples/agents/mcp_tools.py), each in a process of its own: how to run them against an
tapeproxy URL, and how their one cassette (cassettes/examples/mcp-agent) is recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tapeproxy.cli.background import BackgroundServer
from tapeproxy.modes import Mode
from tapeproxy.providers import BUILTIN
from tapeproxy.settings import Settings
from tests.e2e.examples import WEATHER
from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "agents" / "mcp_agent.py"
TOOLS = ROOT / "examples" / "agents" / "mcp_tools.py"
CASSETTE = "examples/mcp-agent"
ANSWER = WEATHER  # the fake model echoes the tool's result


@contextmanager
def tool_server() -> Iterator[str]:
    """The example's MCP server on a free loopback port: its base URL (it serves /mcp)."""
    process = subprocess.Popen(
        [sys.executable, str(TOOLS), "0"], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.startswith("MCP tools on "), ready
        yield ready.split(" on ")[-1].strip().removesuffix("/mcp")
    finally:
        process.terminate()
        process.wait(timeout=30)


def run_agent(url: str, *question: str, key: str = "sk-tapeproxy-example") -> str:
    """The agent against the tapeproxy at `url` (its model at /openai, its tools at /tools):
    what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MCP_"))}
    env.update(OPENAI_BASE_URL=f"{url}/openai/v1", OPENAI_API_KEY=key, MCP_URL=f"{url}/tools/mcp")
    result = subprocess.run(
        [sys.executable, str(AGENT), *question],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise AssertionError(f"the MCP agent exited {result.returncode}: {result.stderr}")
    return result.stdout


def record(cassettes: Path, fake: FakeUpstream) -> str:
    """Record the agent anew into `cassettes`: the fake model, the real tool server."""
    with tool_server() as tools:
        settings = Settings.model_validate(
            {
                "mode": Mode.RECORD,
                "port": 0,
                "cassettes": cassettes,
                "cassette": CASSETTE,
                "upstream": {**{name: fake.url for name in BUILTIN}, "tools": tools},
            }
        )
        server = BackgroundServer(settings).start()
        try:
            return run_agent(server.url, key="sk-tapeproxy-recording")
        finally:
            server.stop()
