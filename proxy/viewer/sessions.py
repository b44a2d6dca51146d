"""A WebSocket session as the viewer shows it: its client's turns as the conversation (what
the client sent: Realtime's `conversation.item.create` items and `instructions`, Gemini's
`setup` and `clientContent` turns), and every frame on a timeline. Pure."""

from __future__ import annotations

from typing import Any

from tapeproxy.exchange.answers import socket_frame_text
from tapeproxy.exchange.model import Session, SocketFrame

MAX_SHOWN = 400  # characters of a frame on the timeline (an audio delta runs to many KB)


def conversation_body(session: Session) -> dict[str, Any]:
    """The client's side of the session as a request body the conversation reader knows:
    `instructions` and `input` items (Realtime), `systemInstruction` and `contents` (Live)."""
    body: dict[str, Any] = {"input": [], "contents": []}
    for frame in session.frames:
        event = frame.json_
        if frame.direction != "client" or not isinstance(event, dict):
            continue
        settings = event.get("session") if event.get("type") == "session.update" else None
        if isinstance(settings, dict) and isinstance(settings.get("instructions"), str):
            body["instructions"] = settings["instructions"]
        if event.get("type") == "conversation.item.create" and isinstance(event.get("item"), dict):
            body["input"].append(event["item"])
        content = event.get("clientContent") or event.get("client_content")
        if isinstance(content, dict) and isinstance(content.get("turns"), list):
            body["contents"] += content["turns"]
    return {name: value for name, value in body.items() if value}


def frame_line(frame: SocketFrame) -> str:
    """One frame on the timeline: who sent it and what, cut short."""
    shown = socket_frame_text(frame)
    if len(shown) > MAX_SHOWN:
        shown = shown[: MAX_SHOWN - 1] + "…"
    return f"{frame.direction}: {shown}"
