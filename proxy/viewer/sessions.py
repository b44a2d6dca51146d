"""A WebSocket session as the viewer shows it: its client's turns as the conversation (what
the client sent: Realtime's `conversation.item.create` items and `instructions`, Gemini's
`setup` and `clientContent` turns); its frames go on the timeline (viewer/parts.py). Pure."""

from __future__ import annotations

from typing import Any

from tapeproxy.exchange.model import Session


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
