"""A fake provider that drifts, for `tapeproxy drift`: FakeUpstream's wire formats with every
id, text, count and timestamp random on every call (what a real provider does between two
calls), and, when `mutation` names one of MUTATIONS, its answers changed the way a provider
changes its API (a field removed, renamed or retyped, a new enum value or event type, events
reordered, another status or content type). `gpt-bad` and `claude-bad` get error answers."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tapeproxy.exchange.shape import ENUM_FIELDS
from tapeproxy.providers import BUILTIN

from .upstream import FakeUpstream, Hit
from .wire import JsonOut, Out, StreamOut, dumps

# Values kept as they are: the enum-like fields, names (tools, models) and JSON-RPC's marker.
KEPT = ENUM_FIELDS.union(*(p.enum_fields for p in BUILTIN.values()))
KEPT |= {"name", "model", "jsonrpc", "modelVersion", "param", "index"}
Event = list[Any]  # [event name or None, payload (JSON, or a bare data text such as [DONE])]
Mutation = Callable[[str, Out], Out]  # (request path, answer) -> answer


def scramble(value: Any, rng: random.Random, name: str = "") -> Any:
    """`value` with each leaf replaced by a random one of its type (KEPT fields aside)."""
    if isinstance(value, dict):
        return {k: scramble(v, rng, k) for k, v in value.items()}
    if isinstance(value, list):
        return [scramble(v, rng, name) for v in value]
    if name in KEPT or value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return rng.randrange(1, 1000)  # token counts: a few cents at most
    if isinstance(value, float):
        return rng.random()
    if isinstance(value, str):
        return "".join(rng.choice("abcdefghij ") for _ in range(rng.randrange(1, 24)))
    return value


_SSE = re.compile(
    r"^(?:event: (?P<event>[^\r\n]*)(?P<eol>\r?\n))?data: (?P<data>.*?)\r?\n\r?\n$", re.S
)


def events_of(out: StreamOut) -> tuple[list[Event], str]:
    """A stream's frames as [event, payload] pairs, and its line end."""
    events, eol = [], "\n"
    for frame in out.frames:
        match = _SSE.match(frame.decode())
        if match is None:  # an NDJSON line or a JSON document's piece: left as it is
            events.append([None, frame.decode()])
            continue
        eol = "\r\n" if frame.endswith(b"\r\n\r\n") else "\n"
        data = match.group("data")
        try:
            payload: Any = json.loads(data)
        except ValueError:
            payload = data
        events.append([match.group("event"), payload])
    return events, eol


def with_events(out: StreamOut, events: list[Event], eol: str) -> StreamOut:
    frames = []
    for event, payload in events:
        data = payload if isinstance(payload, str) else dumps(payload).decode()
        head = f"event: {event}{eol}" if event is not None else ""
        frames.append(f"{head}data: {data}{eol}{eol}".encode())
    return replace(out, frames=frames)


def is_sse(out: Out) -> bool:
    return isinstance(out, StreamOut) and "event-stream" in out.content_type


class DriftingUpstream(FakeUpstream):
    """FakeUpstream with random values on every call and a switchable `mutation`."""

    def __init__(self) -> None:
        super().__init__()
        self.mutation: str | None = None
        self.rng = random.Random()

    def answer(self, hit: Hit) -> Out:
        out = _bad(hit) or super().answer(hit)
        out = self._scrambled(out)
        mutation = MUTATIONS.get(self.mutation or "")
        return out if mutation is None else mutation(hit.path, out)

    def _scrambled(self, out: Out) -> Out:
        if isinstance(out, JsonOut):
            return replace(out, payload=scramble(out.payload, self.rng))
        if not is_sse(out):
            return out
        events, eol = events_of(out)
        for item in events:
            item[1] = item[1] if isinstance(item[1], str) else scramble(item[1], self.rng)
        return with_events(out, events, eol)


def _bad(hit: Hit) -> Out | None:
    """The error answers: an unknown model, in each provider's error shape."""
    model = hit.json().get("model") if hit.body.startswith(b"{") else None
    if model == "gpt-bad":
        error = {"message": "no such model", "type": "invalid_request_error", "param": "model"}
        return JsonOut({"error": {**error, "code": "model_not_found"}}, status=404)
    if model == "claude-bad":
        error = {"type": "not_found_error", "message": "model: claude-bad"}
        return JsonOut({"type": "error", "error": error}, status=404)
    return None


def on_json(where: str, change: Callable[[Any], Any], errors: bool = False) -> Mutation:
    """A mutation of the JSON answers to paths ending with `where` (the error answers with
    `errors`, else the others): `change` edits a copy (and may return another JsonOut, for a
    status or content type)."""

    def mutate(path: str, out: Out) -> Out:
        if not path.endswith(where) or not isinstance(out, JsonOut):
            return out
        if (isinstance(out.payload, dict) and "error" in out.payload) != errors:
            return out
        payload = json.loads(json.dumps(out.payload))
        changed = change(payload)
        return changed if isinstance(changed, JsonOut) else replace(out, payload=payload)

    return mutate


def on_events(where: str, change: Callable[[list[Event]], list[Event] | None]) -> Mutation:
    """A mutation of the SSE answers to paths ending with `where` (the query aside)."""

    def mutate(path: str, out: Out) -> Out:
        if not path.endswith(where) or not isinstance(out, StreamOut) or not is_sse(out):
            return out
        events, eol = events_of(out)
        return with_events(out, change(events) or events, eol)

    return mutate


def each(kind: str, change: Callable[[dict[str, Any]], None]) -> Callable[[list[Event]], None]:
    """`change` applied to the payload of every event named `kind` (`*`: every JSON one)."""

    def run(events: list[Event]) -> None:
        for name, payload in events:
            if isinstance(payload, dict) and kind in ("*", name):
                change(payload)

    return run


def choice(payload: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = payload["choices"][0]
    return first


def _swap_first_two(events: list[Event]) -> list[Event]:
    return [events[1], events[0], *events[2:]]


def _new_event(events: list[Event]) -> list[Event]:
    extra: Event = ["content_block_citation", {"type": "content_block_citation", "index": 0}]
    return [*events[:-1], extra, events[-1]]


def _status(status: int) -> Callable[[Any], JsonOut]:
    return lambda payload: JsonOut(payload, status=status)


CHAT, MESSAGES, GEMINI = "/chat/completions", "/messages", ":streamGenerateContent"
MUTATIONS: dict[str, Mutation] = {
    "chat-field-removed": on_json(CHAT, lambda p: p.pop("usage")),
    "chat-field-retyped": on_json(CHAT, lambda p: p.update(created=str(p["created"]))),
    "chat-field-renamed": on_json(
        CHAT, lambda p: p.update(fingerprint=p.pop("system_fingerprint"))
    ),
    "chat-nested-added": on_json(CHAT, lambda p: choice(p)["message"].update(audio={"id": "a"})),
    "chat-nested-removed": on_json(CHAT, lambda p: p["usage"].pop("prompt_tokens_details")),
    "chat-item-retyped": on_json(CHAT, lambda p: choice(p).update(index="0")),
    "chat-enum-value": on_json(CHAT, lambda p: choice(p).update(finish_reason="content_filter")),
    "chat-status-400": on_json(CHAT, _status(400)),
    "chat-content-type": on_json(
        CHAT, lambda p: JsonOut(p, content_type="text/plain; charset=utf-8")
    ),
    "stream-field-removed": on_events(CHAT, each("*", lambda p: p.pop("system_fingerprint"))),
    "stream-enum-value": on_events(CHAT, each("*", lambda p: p.update(object="chat.delta"))),
    "stream-done-missing": on_events(CHAT, lambda events: events[:-1]),
    "anthropic-new-event": on_events(MESSAGES, _new_event),
    "anthropic-reordered": on_events(MESSAGES, _swap_first_two),
    "anthropic-event-missing": on_events(
        MESSAGES, lambda events: [e for e in events if e[0] != "content_block_stop"]
    ),
    "anthropic-retyped": on_events(
        MESSAGES, each("message_delta", lambda p: p["usage"].update(output_tokens="7"))
    ),
    "anthropic-stop-reason": on_events(
        MESSAGES, each("message_delta", lambda p: p["delta"].update(stop_reason="refusal"))
    ),
    "anthropic-nested-added": on_events(
        MESSAGES, each("message_start", lambda p: p["message"].update(container={"id": "c"}))
    ),
    "gemini-field-removed": on_events(GEMINI, each("*", lambda p: p.pop("usageMetadata"))),
    "gemini-finish-reason": on_events(
        GEMINI,
        each(
            "*",
            lambda p: (
                p["candidates"][0].get("finishReason")
                and p["candidates"][0].update(finishReason="MALFORMED_FUNCTION_CALL")
            ),
        ),
    ),
    "error-shape": on_json(CHAT, lambda p: p["error"].pop("type"), errors=True),
    "error-status": on_json(CHAT, _status(400), errors=True),
}
