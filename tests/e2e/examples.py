"""The example agents (examples/), each with its cassette under cassettes/examples/: how to
run one against an tapeproxy URL, what it prints, and how its cassette is recorded (against the
fake upstream, through the real server; `python examples/record_examples.py`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tapeproxy.cli.background import BackgroundServer
from tapeproxy.modes import Mode
from tapeproxy.providers import BUILTIN
from tapeproxy.settings import Settings
from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "examples" / "node"
WEATHER = 'echo: {"city": "Paris", "forecast": "sunny", "celsius": 21}'
WEATHER_JS = 'echo: {"city":"Paris","forecast":"sunny","celsius":21}'  # JSON.stringify


@dataclass(frozen=True)
class Example:
    name: str  # its cassette is examples/<name>
    command: tuple[str, ...]
    cwd: Path
    answer: str  # what it prints (its last line, for the curl script: the stream's end)
    needs: str | None = None  # a program it needs on PATH, or node_modules for Node

    @property
    def cassette(self) -> str:
        return f"examples/{self.name}"

    def missing(self) -> str | None:
        """Why it cannot run here, or None."""
        if self.needs and shutil.which(self.needs) is None:
            return f"needs {self.needs}"
        if self.needs == "node" and not (NODE_DIR / "node_modules" / "tsx").is_dir():
            return "needs `npm ci --prefix examples/node` (.ci/run does it)"
        return None

    def run(self, url: str, key: str = "sk-tapeproxy-example") -> str:
        """Run it against the tapeproxy at `url`: its standard output."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env.update(
            OPENAI_BASE_URL=f"{url}/openai/v1",
            ANTHROPIC_BASE_URL=f"{url}/anthropic",
            OPENAI_API_KEY=key,
            ANTHROPIC_API_KEY=key,
        )
        result = subprocess.run(
            self.command, cwd=self.cwd, env=env, capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise AssertionError(f"{self.name} exited {result.returncode}: {result.stderr}")
        return result.stdout


EXAMPLES = (
    Example("python-agent", (sys.executable, "examples/agents/python_agent.py"), ROOT, WEATHER),
    Example(
        "anthropic-agent", (sys.executable, "examples/agents/anthropic_agent.py"), ROOT, WEATHER
    ),
    Example("node-agent", ("node", "--import", "tsx", "agent.ts"), NODE_DIR, WEATHER_JS, "node"),
    Example(
        "vercel-agent",
        ("node", "--import", "tsx", "vercel_agent.ts"),
        NODE_DIR,
        WEATHER_JS,
        "node",
    ),
    Example("curl", ("sh", "examples/curl/chat.sh"), ROOT, "data: [DONE]", "curl"),
)


def record(example: Example, cassettes: Path, fake: FakeUpstream) -> str:
    """Record `example` anew into `cassettes`, through the real server: what it printed."""
    settings = Settings.model_validate(
        {
            "mode": Mode.RECORD,
            "port": 0,
            "cassettes": cassettes,
            "cassette": example.cassette,
            "upstream": {name: fake.url for name in BUILTIN},
        }
    )
    server = BackgroundServer(settings).start()
    try:
        return example.run(server.url, key="sk-tapeproxy-recording")
    finally:
        server.stop()
