"""google-genai's Gemini Live client (`client.aio.live.connect`) through tapeproxy: a session
(setup, a turn, its content, turnComplete and usageMetadata) recorded against the fake Live
server and replayed offline to the same messages; the API key is never written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import types

from tapeproxy.modes import Mode
from tapeproxy.settings import Settings
from tests.fakes.realtime import FakeRealtime
from tests.support import ProxyServer

API_KEY = "AIzaSyTapeproxyLiveTestKey0123456789abc"


@pytest.fixture
def live() -> Iterator[FakeRealtime]:
    with FakeRealtime() as fake:
        yield fake


def proxy(cassettes: Path, upstream: str, mode: str) -> ProxyServer:
    values: dict[str, Any] = {"cassettes": str(cassettes), "upstream": {"gemini": upstream}}
    settings = Settings(port=0, mode=Mode(mode), shutdown_timeout=2, **values)
    return ProxyServer(settings).start()


async def talk(url: str) -> list[dict[str, Any]]:
    client = genai.Client(api_key=API_KEY, http_options={"base_url": url + "/gemini"})
    # google-genai turns every base URL into wss:// when it holds an API key; tapeproxy serves
    # plain ws:// on loopback, so the test names its WebSocket base URL (and no TLS) itself.
    client._api_client._websocket_ssl_ctx = {}
    ws_base = url.replace("http://", "ws://") + "/gemini"
    client._api_client._websocket_base_url = lambda http_options=None: ws_base  # type: ignore[method-assign]
    got: list[dict[str, Any]] = []
    config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])
    async with client.aio.live.connect(model="gemini-live-2.5-flash", config=config) as session:
        turn = types.Content(role="user", parts=[types.Part(text="Hello?")])
        await session.send_client_content(turns=turn, turn_complete=True)
        async for message in session.receive():
            got.append(message.model_dump(exclude_none=True, mode="json"))
    return got


def test_a_live_session_records_and_replays_offline(live: FakeRealtime, cassettes: Path) -> None:
    recorder = proxy(cassettes, live.url, "record")
    recorded = asyncio.run(talk(recorder.url))
    recorder.stop()
    assert any(m.get("server_content", {}).get("turn_complete") for m in recorded)
    [file] = [p for p in cassettes.rglob("*.json") if ".tapeproxy" not in p.parts]
    assert API_KEY not in file.read_text()
    exchange = json.loads(file.read_text())
    assert exchange["session"]["frames"][0]["json"]["setup"]["model"].endswith("flash")
    assert exchange["usage"]["output_tokens"] == 6
    # Live sends its JSON as binary frames: kept readable (and scrubbed), sent back as bytes
    server = exchange["session"]["frames"][1]
    assert server["type"] == "binary" and server["json"] == {"setupComplete": {}}
    live.stop()
    replayer = proxy(cassettes, live.url, "replay")
    try:
        assert asyncio.run(talk(replayer.url)) == recorded
    finally:
        replayer.stop()
