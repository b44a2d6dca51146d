"""The official openai SDK's Realtime client (`client.realtime.connect`) through tapeproxy:
a text turn and an audio turn recorded against the fake Realtime server, replayed offline
(the server stopped) to the same events; a changed prompt gets the miss error event."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from websockets.exceptions import ConnectionClosedError

from tapeproxy.modes import Mode
from tapeproxy.settings import Settings
from tests.e2e.test_guide_recipes import recipe
from tests.fakes.realtime import FakeRealtime
from tests.support import ProxyServer
from tests.support.serve import ROOT

NODE_DIR = ROOT / "tests" / "node"

pytest_plugins = ["pytester"]


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    with FakeRealtime() as fake:
        yield fake


def proxy(cassettes: Path, upstream: str, mode: str, *faults: str) -> ProxyServer:
    values: dict[str, Any] = {"cassettes": str(cassettes), "upstream": {"openai": upstream}}
    settings = Settings(port=0, mode=Mode(mode), shutdown_timeout=2, fault=faults, **values)
    return ProxyServer(settings).start()


async def turns(url: str, prompt: str) -> list[dict[str, Any]]:
    """A text turn then an audio turn: every event the SDK hands the agent."""
    client = openai.AsyncOpenAI(base_url=url + "/openai/v1", api_key="sk-proj-sdksecret0123456789")
    got: list[dict[str, Any]] = []
    try:
        await converse(client, prompt, got)
    except ConnectionClosedError as exc:  # after a miss: closed with 1008
        got.append({"closed": exc.rcvd.code if exc.rcvd is not None else None})
    return got


async def converse(client: openai.AsyncOpenAI, prompt: str, got: list[dict[str, Any]]) -> None:
    async with client.realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(session={"type": "realtime", "instructions": prompt})
        for modality in ("text", "audio"):
            await connection.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": f"{prompt} ({modality})"}],
                }
            )
            await connection.response.create(response={"output_modalities": [modality]})
            async for event in connection:
                got.append(event.to_dict())
                if event.type == "response.done":
                    break
                if event.type == "error":
                    return


def test_the_sdk_records_and_replays_a_text_and_an_audio_turn_offline(
    realtime: FakeRealtime, cassettes: Path
) -> None:
    recorder = proxy(cassettes, realtime.url, "record")
    recorded = asyncio.run(turns(recorder.url, "Say hi"))
    recorder.stop()
    kinds = [event["type"] for event in recorded]
    assert kinds[0] == "session.created" and kinds.count("response.done") == 2
    assert "response.output_audio.delta" in kinds and "response.output_text.delta" in kinds
    realtime.stop()
    replayer = proxy(cassettes, realtime.url, "replay")
    try:
        assert asyncio.run(turns(replayer.url, "Say hi")) == recorded
    finally:
        replayer.stop()
    replayer = proxy(cassettes, realtime.url, "replay")  # a new run: the recording unused
    try:
        changed = asyncio.run(turns(replayer.url, "Say bye"))
    finally:
        replayer.stop()
    cut = proxy(cassettes, realtime.url, "replay", "cut:after=3")
    try:
        faulted = asyncio.run(turns(cut.url, "Say hi"))
    finally:
        cut.stop()
    assert faulted[:3] == recorded[:3]  # three server frames, then the connection ends
    assert faulted[3:] == [{"closed": 1011}]
    [error] = [event for event in changed if event.get("type") == "error"]
    assert error["type"] == "error" and error["error"]["type"] == "cassette_miss"
    assert '"Say hi" -> "Say bye"' in error["error"]["message"]


def test_the_realtime_recipe_records_once_then_replays_offline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, realtime: FakeRealtime
) -> None:
    for name in list(os.environ):
        if name.startswith(("TAPEPROXY_", "OPENAI_")):
            monkeypatch.delenv(name)
    code = recipe("realtime")
    path = code.splitlines()[0].removeprefix("# ")
    pytester.mkdir("tests")
    (pytester.path / path).write_text(code, encoding="utf-8")
    monkeypatch.setenv("TAPEPROXY_UPSTREAM", f"openai={realtime.url}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-recipesecret0123456789")
    pytester.runpytest("--tapeproxy-mode", "once").assert_outcomes(passed=1)
    assert realtime.sessions == 1
    realtime.stop()
    monkeypatch.delenv("OPENAI_API_KEY")
    replay = pytester.runpytest()
    replay.assert_outcomes(passed=1)
    replay.stdout.fnmatch_lines(["tapeproxy: 1 replayed, 0 recorded, 0 missed*"])


async def two_turns(url: str) -> list[dict[str, Any]]:
    """Two turns of Responses over one WebSocket, the second following the first's id."""
    client = openai.AsyncOpenAI(base_url=url + "/openai/v1", api_key="sk-proj-sdksecret0123456789")
    got: list[dict[str, Any]] = []
    previous = None
    async with client.responses.connect() as connection:
        for prompt in ("Hello?", "And again?"):
            await connection.response.create(
                model="gpt-5", input=prompt, previous_response_id=previous
            )
            async for event in connection:
                got.append(event.to_dict())
                if event.type == "response.completed":
                    previous = event.response.id
                    break
    return got


def test_responses_over_websocket_records_and_replays_two_turns(
    realtime: FakeRealtime, cassettes: Path
) -> None:
    recorder = proxy(cassettes, realtime.url, "record")
    recorded = asyncio.run(two_turns(recorder.url))
    recorder.stop()
    assert [e["type"] for e in recorded].count("response.completed") == 2
    assert realtime.seen[1]["previous_response_id"] == "resp_1_1"
    realtime.stop()
    replayer = proxy(cassettes, realtime.url, "replay")
    try:
        assert asyncio.run(two_turns(replayer.url)) == recorded
    finally:
        replayer.stop()


@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "ws").is_dir(),
    reason="needs node and `npm install --prefix tests/node` (.ci/run does it)",
)
def test_the_node_sdk_replays_the_python_recording(realtime: FakeRealtime, cassettes: Path) -> None:
    recorder = proxy(cassettes, realtime.url, "record")
    recorded = asyncio.run(turns(recorder.url, "Say hi"))
    recorder.stop()
    realtime.stop()
    replayer = proxy(cassettes, realtime.url, "replay")
    try:
        script = str(NODE_DIR / "realtime.mjs")
        base = replayer.url + "/openai/v1"
        done = subprocess.run(
            ["node", script, base, "Say hi"], capture_output=True, text=True, timeout=60
        )
    finally:
        replayer.stop()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == recorded
