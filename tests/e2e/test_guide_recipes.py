"""The guide's recipes are the code that works: each snippet is read out of its page under
docs/ (or README.md: the fenced block after its `<!-- recipe: NAME -->` comment) and run as a
user would, offline, with no API key in the environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, closed_port, copy_committed
from tests.support.serve import Serve

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
NODE_DIR = ROOT / "examples" / "node"
RECIPE_URL = "http://127.0.0.1:8787"
ANSWER = "echo: What is the capital of France?"

pytest_plugins = ["pytester"]


def recipe(name: str) -> str:
    """The fenced code block right after `<!-- recipe: name -->`, in the one page that has it."""
    pattern = re.compile(rf"<!-- recipe: {re.escape(name)} -->\n```\w*\n(.*?)\n```", re.DOTALL)
    found = [
        (page, match.group(1))
        for page in PAGES
        for match in pattern.finditer(page.read_text(encoding="utf-8"))
    ]
    where = ", ".join(str(page.relative_to(ROOT)) for page, _ in found)
    assert len(found) == 1, f"recipe {name!r}: want it in one page, found in [{where}]"
    return found[0][1] + "\n"


@pytest.fixture
def example_server(tmp_path: Path) -> Iterator[Serve]:
    """`tapeproxy serve --cassette example`, as the recipe says, with no upstream to reach (on a
    copy: no test runs on the repository's own cassettes/)."""
    dead = f"http://127.0.0.1:{closed_port()}"
    copy_committed("example", tmp_path)
    server = Serve(
        [
            "--cassette",
            "example",
            "--cassettes",
            str(tmp_path),
            "--upstream",
            f"openai={dead}",
        ],
        cwd=ROOT,
    )
    yield server
    server.stop()


def client_env() -> dict[str, str]:
    """The environment a newcomer runs a recipe in: no OPENAI_API_KEY, no base URL, no
    TAPEPROXY_* (the snippet must work as written)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TAPEPROXY_"))}


@pytest.mark.parametrize("name", ["python", "quickstart"])
def test_the_python_recipe_replays_the_example_cassette_with_no_key_set(
    example_server: Serve, name: str
) -> None:
    code = recipe(name)
    assert RECIPE_URL in code
    result = subprocess.run(
        [sys.executable, "-c", code.replace(RECIPE_URL, example_server.url)],
        capture_output=True,
        text=True,
        env=client_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ANSWER + "\n"


@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir(),
    reason="needs node and `npm ci --prefix examples/node` (.ci/run does it)",
)
def test_the_node_recipe_replays_the_same_cassette_with_no_key_set(example_server: Serve) -> None:
    code = recipe("node")
    assert RECIPE_URL in code
    result = subprocess.run(  # --eval resolves `openai` from the working directory
        ["node", "--input-type=module", "--eval", code.replace(RECIPE_URL, example_server.url)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        env=client_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ANSWER + "\n"


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_the_curl_recipe_replays_the_same_cassette(example_server: Serve) -> None:
    code = recipe("curl")
    assert RECIPE_URL in code
    result = subprocess.run(
        ["sh", "-c", "set -e\n" + code.replace(RECIPE_URL, example_server.url)],
        capture_output=True,
        text=True,
        env=client_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["choices"][0]["message"]["content"] == ANSWER


def test_the_faults_recipe_survives_a_rate_limit_recording_then_replaying(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    for name in list(os.environ):
        if name.startswith(("TAPEPROXY_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    code = recipe("faults")
    path = code.splitlines()[0].removeprefix("# ")
    pytester.mkdir("tests")
    (pytester.path / path).write_text(code, encoding="utf-8")
    monkeypatch.setenv("TAPEPROXY_UPSTREAM", f"openai={fake.url}")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_OPENAI)
    pytester.runpytest("--tapeproxy-mode", "once").assert_outcomes(passed=1)
    assert len(fake.hits) == 1  # the 429 came from tapeproxy; only the retry went upstream

    fake.stop()
    monkeypatch.delenv("OPENAI_API_KEY")
    replay = pytester.runpytest()  # the 429 again, then the recording
    replay.assert_outcomes(passed=1)
    replay.stdout.fnmatch_lines(["tapeproxy: 1 replayed, 0 recorded, 0 missed*"])


def test_the_pytest_recipe_records_once_then_replays_offline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    for name in list(os.environ):
        if name.startswith(("TAPEPROXY_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    code = recipe("pytest")
    path = code.splitlines()[0].removeprefix("# ")
    assert path == "tests/test_capital.py"
    pytester.mkdir("tests")
    (pytester.path / path).write_text(code, encoding="utf-8")

    monkeypatch.setenv("TAPEPROXY_UPSTREAM", f"openai={fake.url}")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_OPENAI)
    pytester.runpytest("--tapeproxy-mode", "once").assert_outcomes(passed=1)
    assert (pytester.path / "tests" / "cassettes" / "test_capital" / "test_capital").is_dir()

    fake.stop()
    monkeypatch.delenv("OPENAI_API_KEY")
    replay = pytester.runpytest()
    replay.assert_outcomes(passed=1)
    replay.stdout.fnmatch_lines(["tapeproxy: 1 replayed, 0 recorded, 0 missed*"])


def test_the_mcp_recipe_replays_a_tool_call_from_the_agent_cassette(tmp_path: Path) -> None:
    """`tapeproxy serve --cassette examples/mcp-agent --upstream tools=...` with no tool server
    to reach: the recipe's MCP client gets the recorded tool result."""
    dead = f"http://127.0.0.1:{closed_port()}"
    copy_committed("examples/mcp-agent", tmp_path)
    args = ["--cassette", "examples/mcp-agent", "--cassettes", str(tmp_path)]
    server = Serve([*args, "--upstream", f"tools={dead}", "--upstream", f"openai={dead}"], ROOT)
    try:
        code = recipe("mcp")
        assert RECIPE_URL in code
        result = subprocess.run(
            [sys.executable, "-c", code.replace(RECIPE_URL, server.url)],
            capture_output=True,
            text=True,
            env=client_env(),
            timeout=60,
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"city": "Paris", "forecast": "sunny", "celsius": 21}\n'


def test_the_run_recipe_records_then_replays_through_the_real_host_name(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    code = recipe("run-curl")
    env = {k: v for k, v in client_env().items() if "proxy" not in k.lower()}
    env |= {
        "TAPEPROXY_UPSTREAM": f"openai={fake.url}",  # api.openai.com's requests reach the fake
        "OPENAI_API_KEY": SECRET_OPENAI,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    }
    result = subprocess.run(
        ["sh", "-c", "set -e\n" + code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    decoder = json.JSONDecoder()
    first, end = decoder.raw_decode(result.stdout)
    second, _ = decoder.raw_decode(result.stdout[end:].lstrip())
    assert first == second and first["object"] == "chat.completion"
    assert len(fake.hits) == 1  # the second run replayed
    summary = [line for line in result.stderr.splitlines() if line.startswith("tapeproxy:")]
    assert summary == [
        "tapeproxy: replayed 0, recorded 1, misses 0",
        "tapeproxy: replayed 1, recorded 0, misses 0",
    ]
    files = [p for p in (tmp_path / "cassettes").rglob("*") if p.is_file()]
    assert files and not any(SECRET_OPENAI.encode() in p.read_bytes() for p in files)
