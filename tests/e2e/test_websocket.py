"""WebSocket sessions through tapeproxy with a raw client (the websockets library) against a
fake Realtime server: recorded as one exchange, replayed causally with the server stopped,
a changed client frame or an unrecorded upgrade refused with the error event and 1008,
credentials never written, and the bad input and faults of sessions."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from tapeproxy.settings import Settings
from tests.fakes.realtime import FakeRealtime
from tests.support import ProxyServer

KEY_PROTOCOL = "openai-insecure-api-key.sk-proj-secretsecret123456"
Serve = Callable[..., ProxyServer]


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    with FakeRealtime() as fake:
        yield fake


@pytest.fixture
def serve(cassettes: Path) -> Iterator[Serve]:
    started: list[ProxyServer] = []

    def make(upstream: str = "http://127.0.0.1:9", **values: Any) -> ProxyServer:
        settings = Settings(
            port=0,
            cassettes=str(cassettes),
            upstream={"openai": upstream, "gemini": upstream, "tool": upstream},
            shutdown_timeout=2,
            **values,
        )
        server = ProxyServer(settings).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def ws_url(proxy: ProxyServer, path: str = "/openai/v1/realtime?model=gpt-realtime") -> str:
    return proxy.url.replace("http://", "ws://") + path


def turn(ws: ClientConnection, prompt: str) -> list[Any]:
    """One text turn, the events the client receives (session.created first)."""
    got = [json.loads(ws.recv(timeout=10))]
    update = {"type": "session.update", "event_id": "evt_a1", "session": {"instructions": prompt}}
    ws.send(json.dumps(update))
    got.append(json.loads(ws.recv(timeout=10)))
    ws.send(json.dumps({"type": "response.create", "event_id": "evt_a2"}))
    while got[-1]["type"] != "response.done":
        got.append(json.loads(ws.recv(timeout=10)))
    return got


def session(proxy: ProxyServer, prompt: str = "Say hi") -> tuple[list[Any], str | None]:
    protocols = [Subprotocol("realtime"), Subprotocol(KEY_PROTOCOL)]
    headers = {"Authorization": "Bearer sk-proj-headersecret123456"}
    with connect(ws_url(proxy), subprotocols=protocols, additional_headers=headers) as ws:
        return turn(ws, prompt), ws.subprotocol


def files(cassettes: Path) -> list[Path]:
    return sorted(p for p in cassettes.rglob("*.json") if ".tapeproxy" not in p.parts)


def test_a_session_is_recorded_and_replays_offline_to_the_same_events(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    recorder = serve(realtime.url, mode="record")
    recorded, protocol = session(recorder)
    recorder.stop()  # the session is written as it ends, after the client's close
    assert protocol == "realtime"
    assert recorded[-1]["response"]["usage"]["output_tokens"] == 11
    [file] = files(cassettes)
    text = file.read_text()
    assert "secretsecret" not in text and "headersecret" not in text  # never written
    exchange = json.loads(text)
    assert exchange["kind"] == "websocket"
    assert exchange["usage"] == {"input_tokens": 20, "output_tokens": 11}
    frames = exchange["session"]["frames"]
    assert [f["direction"] for f in frames[:3]] == ["server", "client", "server"]
    assert exchange["session"]["end"]["code"] == 1000
    assert realtime.headers[0]["Authorization"] == "Bearer sk-proj-headersecret123456"
    assert KEY_PROTOCOL in realtime.headers[0]["Sec-WebSocket-Protocol"]  # reaches upstream
    realtime.stop()
    replayed, protocol = session(serve(realtime.url, mode="replay"))
    assert replayed == recorded
    assert protocol == "realtime"  # the chosen subprotocol, answered in replay too


def test_a_changed_client_frame_is_a_miss_with_the_error_event_and_1008(
    realtime: FakeRealtime, serve: Serve
) -> None:
    recorder = serve(realtime.url, mode="record")
    session(recorder)
    recorder.stop()
    proxy = serve(mode="replay")
    with connect(ws_url(proxy), subprotocols=[Subprotocol("realtime")]) as ws:
        ws.recv(timeout=10)
        update = {"type": "session.update", "event_id": "x", "session": {"instructions": "Bye"}}
        ws.send(json.dumps(update))
        error = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert error["type"] == "error" and error["error"]["type"] == "cassette_miss"
    assert error["event_id"].startswith("event_")
    assert "client frame #1 " in error["error"]["message"]
    assert 'session.instructions: "Say hi" -> "Bye"' in error["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert "default" in closed.value.rcvd.reason
    [miss] = httpx.get(proxy.url + "/__tapeproxy/misses").json()["misses"]
    assert miss["closest"]["differences"][0]["path"] == "session.instructions"
    assert httpx.get(proxy.url + "/__tapeproxy/stats").json()["misses"] == 1


def test_an_upgrade_with_no_recording_is_accepted_and_refused_in_replay(serve: Serve) -> None:
    proxy = serve(mode="replay")
    with connect(ws_url(proxy)) as ws:
        error = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert error["error"]["type"] == "cassette_miss"
    assert "has no recording for GET openai /v1/realtime" in error["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
