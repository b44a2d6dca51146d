"""WebSocket sessions as an attacker or an unlucky user drives them: a credential in the
upstream's close reason never reaches a file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.fakes.realtime import FakeRealtime
from tests.support import ProxyServer
from tests.support.sockets import Servers, files, ws_url

Serve = Callable[..., ProxyServer]
KEY = "sk-proj-CloseReason0123456789abcdefghijklmnop"
EPHEMERAL = "ek_68af296e8e408191a1120ab6383263c2"  # OpenAI's documented shape


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    with FakeRealtime() as fake:
        yield fake


@pytest.fixture
def serve(cassettes: Path) -> Iterator[Serve]:
    with Servers(cassettes) as servers:
        yield servers.start


def test_a_key_in_the_upstreams_close_reason_is_not_written(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder, "/tool/echo")) as ws:
        ws.send(f"close:invalid key {KEY}")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    [file] = files(cassettes)
    assert KEY not in file.read_text()
    assert json.loads(file.read_text())["session"]["end"]["reason"] == "invalid key [redacted]"
