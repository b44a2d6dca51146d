"""Real agents and CLIs that take no base URL, recorded through `tapeproxy run` against a fake
and replayed with the fake stopped, to the same output: the Node `openai` package, the `llm`
CLI, and Claude Code in print mode (`claude -p`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.e2e.test_forward_proxy import record_then_replay
from tests.fakes.upstream import FakeUpstream

TESTS = Path(__file__).resolve().parents[1]
NODE_DIR = TESTS / "node"
CLAUDE = TESTS / "agents" / "node_modules" / ".bin" / "claude"
LLM = Path(sys.executable).parent / "llm"


@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "undici").is_dir(),
    reason="needs node and `npm ci --prefix tests/node` (.ci/run does it)",
)
def test_the_node_openai_package_with_no_base_url(tmp_path: Path, fake: FakeUpstream) -> None:
    recorded, _ = record_then_replay(tmp_path, fake, "node", str(NODE_DIR / "forward.mjs"))
    assert '"chat.completion"' in recorded.stdout


@pytest.mark.skipif(not LLM.is_file(), reason="needs the llm CLI (the test extra installs it)")
def test_the_llm_cli(tmp_path: Path, fake: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))  # its log database, not ~'s
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-llm-fake")
    cmd = (str(LLM), "prompt", "--no-stream", "--no-log", "-m", "gpt-4o-mini", "What is 2+2?")
    recorded, _ = record_then_replay(tmp_path, fake, *cmd)
    assert recorded.stdout.strip()


@pytest.mark.skipif(
    not CLAUDE.is_file(), reason="needs `npm ci --prefix tests/agents` (.ci/run does it)"
)
def test_claude_code_in_print_mode(
    tmp_path: Path, fake: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # its settings and session files
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-claude-fake-0123456789")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.chdir(tmp_path)
    # Its system prompt holds the date and a checksum that differ between runs.
    recorded, _ = record_then_replay(
        tmp_path,
        fake,
        str(CLAUDE), "-p", "What is the capital of France?",
        extra=("--ignore", "anthropic:body:system"),
        recordings=None,
    )  # fmt: skip
    assert recorded.stdout.strip()
    assert any(hit.path == "/v1/messages" for hit in fake.hits)
