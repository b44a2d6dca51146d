"""The cassette tools on a recorded WebSocket session: ls and report count its tokens from
its usage events, show lists it as a session and prints its frames, verify passes it, diff
names the frames that differ, redact scrubs its frames (and replay still matches), prune
keeps it once a run used it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.fakes.realtime import FakeRealtime
from tests.support.sockets import Servers, files, session

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Path, Servers]]:
    """A library holding one Realtime session in cassette `voice`, and servers on it."""
    library = tmp_path / "cassettes"
    with FakeRealtime() as fake, Servers(library) as servers:
        recorder = servers.start(fake.url, mode="record", cassette="voice")
        session(recorder)
        recorder.stop()
        yield library, servers


def test_ls_show_and_report_read_a_session(recorded: tuple[Path, Servers]) -> None:
    library, _ = recorded
    code, out = run("ls", "--cassettes", str(library))
    assert code == 0 and "20 in / 11 out" in out
    code, out = run("show", "voice", "--cassettes", str(library))
    assert code == 0 and "websocket" in out and "gpt-realtime" in out
    code, out = run("show", "voice", "--full", "--cassettes", str(library))
    assert code == 0 and "-- websocket session (9 frames)" in out
    assert "client {" in out and "closed 1000 by the client" in out
    code, out = run("report", "--cassettes", str(library))
    assert code == 0 and "| `voice` | 1 | 20 | 11 |" in out


def test_verify_passes_a_session_and_diff_names_its_changed_frames(
    recorded: tuple[Path, Servers],
) -> None:
    library, _ = recorded
    assert run("verify", "--cassettes", str(library))[0] == 0
    shutil.copytree(library / "voice", library / "voice2")
    [file] = files(library / "voice2")
    file.write_text(file.read_text().replace("session 1.", "session 2."))
    code, out = run("diff", "voice", "voice2", "--cassettes", str(library))
    assert code != 0
    assert 'response.session.frames[7].payload.delta: " session 1." -> " session 2."' in out


def test_redact_scrubs_frames_and_replay_still_matches(recorded: tuple[Path, Servers]) -> None:
    library, servers = recorded
    code, out = run(
        "redact", "voice", "--field", "session.instructions", "--cassettes", str(library)
    )
    assert code == 0 and "1 rewritten" in out
    [file] = files(library / "voice")
    frames = json.loads(file.read_text())["session"]["frames"]
    assert frames[1]["json"]["session"]["instructions"] == "[redacted]"
    replayer = servers.start(mode="replay", cassette="voice", redact_field=["session.instructions"])
    events, _ = session(replayer)
    assert events[-1]["type"] == "response.done"
    replayer.stop()
    code, out = run("prune", "voice", "--cassettes", str(library))
    assert code == 0 and "1 kept" in out
    assert len(files(library / "voice")) == 1


def test_the_viewer_shows_a_session_as_its_turns_and_a_timeline(
    recorded: tuple[Path, Servers],
) -> None:
    library, servers = recorded
    [file] = files(library / "voice")
    server = servers.start(mode="replay", cassette="voice")
    page = httpx.get(server.url + f"/__tapeproxy/ui/exchange?cassette=voice&file={file.name}")
    assert page.status_code == 200
    text = page.text
    assert "WebSocket session: 9 frames over" in text
    assert text.count("<progress max=") == 9
    assert "client: {&#34;type&#34;: &#34;session.update&#34;" in text
    assert "Say hi" in text.split('id="conversation"')[1].split('id="answer"')[0]
    assert "Hello from session 1." in text.split('id="answer"')[1]


def test_the_session_page_in_headless_chromium(recorded: tuple[Path, Servers]) -> None:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By

    from tests.support.browser import ARTIFACTS, chromium

    assert webdriver is not None
    library, servers = recorded
    [file] = files(library / "voice")
    server = servers.start(mode="replay", cassette="voice")
    with chromium() as browser:
        browser.get(server.url + f"/__tapeproxy/ui/exchange?cassette=voice&file={file.name}")
        timeline = browser.find_element(By.ID, "timeline")
        assert "WebSocket session: 9 frames" in timeline.text
        assert len(timeline.find_elements(By.TAG_NAME, "progress")) == 9
        assert "Hello from session 1." in browser.find_element(By.ID, "answer").text
        assert browser.save_screenshot(str(ARTIFACTS / "viewer-websocket-session.png"))


def test_export_har_gives_a_session_its_websocket_messages(
    recorded: tuple[Path, Servers], tmp_path: Path
) -> None:
    library, _ = recorded
    out = tmp_path / "voice.har"
    code, _ = run("export", "har", "voice", "-o", str(out), "--cassettes", str(library))
    assert code == 0
    [entry] = json.loads(out.read_text())["log"]["entries"]
    messages = entry["_webSocketMessages"]
    assert [m["type"] for m in messages[:3]] == ["receive", "send", "receive"]
    assert json.loads(messages[0]["data"])["type"] == "session.created"
    assert {m["opcode"] for m in messages} == {1}
