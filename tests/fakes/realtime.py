"""A real WebSocket server impersonating OpenAI's Realtime API and Gemini Live, for the
WebSocket session tests: aiohttp on 127.0.0.1 (ephemeral port) in a thread of its own.

- ``/v1/realtime?model=M`` speaks the Realtime events: ``session.created`` on connect;
  ``session.update`` -> ``session.updated``; ``conversation.item.create`` ->
  ``conversation.item.created``; ``response.create`` -> ``response.created``, text deltas
  (``response.output_text.delta``) or audio deltas, then ``response.done`` with usage.
- ``/ws/google.ai.generativelanguage.VERSION.GenerativeService.BidiGenerateContent`` speaks
  Gemini Live: ``setup`` -> ``setupComplete``; ``clientContent`` -> ``serverContent`` parts,
  ``turnComplete``, ``usageMetadata``.
- ``/echo`` echoes each frame (text or binary) and closes with 1000 on ``bye``; ``raw:TEXT``
  is answered with TEXT as given, ``big:N`` with N bytes.

Ids and text vary on every live session (a counter), so a replay that gives back the
recorded ones is told from a live call. Knobs: ``drop_after`` (server frames, then the TCP
connection is dropped with no close frame), ``big`` (a server frame of that many bytes).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
from types import TracebackType
from typing import Any

from aiohttp import WSMsgType, web


class FakeRealtime:
    """`with FakeRealtime() as fake:` serves on fake.url (http://127.0.0.1:PORT)."""

    def __init__(self) -> None:
        self.url = ""
        self.sessions = 0
        self.drop_after: int | None = None
        self.seen: list[Any] = []  # every client frame, decoded
        self.headers: list[dict[str, str]] = []  # each upgrade's headers
        self._counter = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-realtime")

    def __enter__(self) -> FakeRealtime:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._runner = None

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/v1/realtime", self._realtime)
        app.router.add_get("/ws/{method}", self._gemini)  # v1beta, v1 or v1alpha
        app.router.add_get("/echo", self._echo)
        app.router.add_get("/v1/responses", self._responses)  # Responses in WebSocket mode
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    async def _open(self, request: web.Request) -> tuple[web.WebSocketResponse, int]:
        self.sessions += 1
        self.headers.append(dict(request.headers))
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        chosen = [p for p in offered if p == "realtime"]
        ws = web.WebSocketResponse(protocols=chosen, max_msg_size=64 * 1024 * 1024)
        await ws.prepare(request)
        return ws, next(self._counter)

    async def _send(
        self, ws: web.WebSocketResponse, count: list[int], event: Any, binary: bool = False
    ) -> bool:
        """Send one server event (`binary`: its JSON as a binary frame, as Gemini Live sends
        every message); False (the connection dropped) past `drop_after`."""
        if self.drop_after is not None and count[0] >= self.drop_after:
            transport = ws._req.transport if ws._req is not None else None
            if transport is not None:
                transport.abort()  # no close frame: a cut
            return False
        count[0] += 1
        if binary:
            await ws.send_bytes(json.dumps(event).encode())
        else:
            await ws.send_str(json.dumps(event))
        return True

    async def _realtime(self, request: web.Request) -> web.WebSocketResponse:
        ws, n = await self._open(request)
        sent = [0]
        model = request.query.get("model", "gpt-realtime")
        session = {"id": f"sess_{n}", "object": "realtime.session", "model": model}
        if not await self._send(
            ws, sent, {"type": "session.created", "event_id": f"ev_{n}_0", "session": session}
        ):
            return ws
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            event = json.loads(msg.data)
            self.seen.append(event)
            for out in realtime_answers(event, n, session):
                if not await self._send(ws, sent, out):
                    return ws
        return ws

    async def _gemini(self, request: web.Request) -> web.WebSocketResponse:
        ws, n = await self._open(request)
        sent = [0]
        async for msg in ws:
            data = msg.data if msg.type is WSMsgType.TEXT else None
            if msg.type is WSMsgType.BINARY:
                data = bytes(msg.data).decode()
            if data is None:
                continue
            event = json.loads(data)
            self.seen.append(event)
            for out in gemini_answers(event, n):
                if not await self._send(ws, sent, out, binary=True):
                    return ws
        return ws

    async def _responses(self, request: web.Request) -> web.WebSocketResponse:
        ws, n = await self._open(request)
        turns = itertools.count(1)
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            event = json.loads(msg.data)
            self.seen.append(event)
            if event.get("type") == "response.create":
                for out in responses_answers(event, n, next(turns)):
                    await ws.send_str(json.dumps(out))
        return ws

    async def _echo(self, request: web.Request) -> web.WebSocketResponse:
        ws, n = await self._open(request)
        sent = [0]
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                await ws.send_bytes(bytes(msg.data) + n.to_bytes(1, "big"))
            elif msg.type is WSMsgType.TEXT:
                self.seen.append(msg.data)
                if msg.data == "bye":
                    await ws.close(code=1000, message=b"bye")
                    break
                if msg.data.startswith("close:"):  # a close frame with a reason of the test's
                    await ws.close(code=4000, message=msg.data[6:].encode())
                    break
                if msg.data.startswith("raw:"):  # sent as given: a layout of the test's own
                    await ws.send_str(msg.data[4:])
                    continue
                if msg.data.startswith("big:"):
                    await ws.send_str("x" * int(msg.data[4:]))
                    continue
                if not await self._send(ws, sent, {"echo": msg.data, "n": n}):
                    return ws
        return ws


def realtime_answers(event: dict[str, Any], n: int, session: dict[str, Any]) -> list[Any]:
    """The server events the Realtime API sends for one client event."""
    kind = event.get("type")
    ev = itertools.count(1)

    def eid() -> str:
        return f"ev_{n}_{next(ev)}"

    if kind == "session.update":
        return [
            {
                "type": "session.updated",
                "event_id": eid(),
                "session": {**session, **event.get("session", {})},
            }
        ]
    if kind == "conversation.item.create":
        item = {**event.get("item", {}), "id": f"item_{n}"}
        return [
            {
                "type": "conversation.item.created",
                "event_id": eid(),
                "previous_item_id": None,
                "item": item,
            }
        ]
    if kind != "response.create":
        return []
    rid = f"resp_{n}"
    audio = "audio" in (event.get("response") or {}).get("output_modalities", [])
    words = ["Hello", " from", f" session {n}."]
    out: list[Any] = [
        {
            "type": "response.created",
            "event_id": eid(),
            "response": {
                "id": rid,
                "object": "realtime.response",
                "status": "in_progress",
                "output": [],
            },
        }
    ]
    for word in words:
        if audio:
            # A response asked with instructions saying "long" sends ~200 KB an audio delta.
            long = "long" in str((event.get("response") or {}).get("instructions", ""))
            chunk = base64.b64encode(word.encode() * (40_000 if long else 40)).decode()
            out.append(
                {
                    "type": "response.output_audio.delta",
                    "event_id": eid(),
                    "response_id": rid,
                    "item_id": f"msg_{n}",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": chunk,
                }
            )
        else:
            out.append(
                {
                    "type": "response.output_text.delta",
                    "event_id": eid(),
                    "response_id": rid,
                    "item_id": f"msg_{n}",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": word,
                }
            )
    usage = {"total_tokens": 30 + n, "input_tokens": 20, "output_tokens": 10 + n}
    text = "".join(words)
    content = [{"type": "output_text", "text": text}]
    done = {
        "id": rid,
        "object": "realtime.response",
        "status": "completed",
        "output": [{"id": f"msg_{n}", "type": "message", "role": "assistant", "content": content}],
        "usage": usage,
    }
    out.append({"type": "response.done", "event_id": eid(), "response": done})
    return out


def gemini_answers(event: dict[str, Any], n: int) -> list[Any]:
    """Gemini Live's answers to one client message."""
    if "setup" in event:
        return [{"setupComplete": {}}]
    asks = ("clientContent", "client_content", "realtimeInput", "realtime_input")
    if not any(name in event for name in asks):
        return []
    parts = [{"text": "Hi"}, {"text": f" from live session {n}."}]
    out: list[Any] = [{"serverContent": {"modelTurn": {"parts": [part]}}} for part in parts]
    usage = {"promptTokenCount": 7, "responseTokenCount": 5 + n, "totalTokenCount": 12 + n}
    out.append({"serverContent": {"turnComplete": True}, "usageMetadata": usage})
    return out


def responses_answers(event: dict[str, Any], n: int, turn: int) -> list[Any]:
    """The Responses API's stream events for one `response.create`, over a WebSocket."""
    rid = f"resp_{n}_{turn}"
    base = {"id": rid, "object": "response", "created_at": 1700000000, "model": event.get("model")}
    words = ["Turn", f" {turn}", f" of session {n}."]
    out: list[Any] = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {**base, "status": "in_progress", "output": []},
        }
    ]
    for index, word in enumerate(words, start=1):
        delta = {"item_id": f"msg_{n}_{turn}", "output_index": 0, "content_index": 0, "delta": word}
        out.append({"type": "response.output_text.delta", "sequence_number": index, **delta})
    message: dict[str, Any] = {
        "id": f"msg_{n}_{turn}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
    }
    message["content"] = [{"type": "output_text", "text": "".join(words), "annotations": []}]
    usage = {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}
    done = {**base, "status": "completed", "output": [message], "usage": usage}
    out.append({"type": "response.completed", "sequence_number": len(words) + 1, "response": done})
    return out
