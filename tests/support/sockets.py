"""What the WebSocket session tests share: servers on one library, a Realtime turn driven
with the websockets library's client, the exchange files written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from tapeproxy.settings import Settings
from tests.support import ProxyServer

KEY_PROTOCOL = "openai-insecure-api-key.sk-proj-secretsecret123456"


class Servers:
    """tapeproxy servers on `cassettes`, every built-in upstream and `tool` at one URL;
    each stopped when the block ends."""

    def __init__(self, cassettes: Path) -> None:
        self.cassettes = cassettes
        self.started: list[ProxyServer] = []

    def start(self, upstream: str = "http://127.0.0.1:9", **values: Any) -> ProxyServer:
        settings = Settings(
            port=0,
            cassettes=str(self.cassettes),
            upstream={"openai": upstream, "gemini": upstream, "tool": upstream},
            shutdown_timeout=2,
            **values,
        )
        server = ProxyServer(settings).start()
        self.started.append(server)
        return server

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.started:
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
