"""JSON-RPC 2.0 and MCP's Streamable HTTP, in one place (CONTRACT.md, "JSON-RPC and MCP
upstreams"): what keys a message (its method and params, not its `id` nor `params._meta`);
which stream frame answers a request; a recorded answer given the incoming request's ids and
session; a miss as a JSON-RPC error; the standalone stream a replay does not offer."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, replace
from typing import Any

from tapeproxy.engine.inbound import HeaderView, Refuse
from tapeproxy.engine.replay import Replay
from tapeproxy.errors import CassetteMiss
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.framing import AnyOf, FrameSigns, FrameTest, frame_data
from tapeproxy.exchange.model import Exchange
from tapeproxy.store.protocol import CassetteStore, exchange_file, unreadable

SESSION_HEADER = "mcp-session-id"
_SESSION = SESSION_HEADER.encode()
# What a recording keeps of the session id its server minted: the id is a bearer of the
# session, and differs on every recording (a re-record must show no diff).
RECORDED_SESSION = "recorded-session"
# Revision 2026-07-28 repeats a request's method and tool name in headers: keyed as they are.
KEY_HEADERS = frozenset({"mcp-method", "mcp-name"})
# Params that say who asks, not what: progress tokens and client info in `_meta`, and the
# client's name and version in `initialize` (telemetry, as a user-agent is: the Python SDK,
# the TypeScript SDK and curl ask the same question).
UNKEYED_PARAMS = frozenset({"_meta", "clientInfo"})
MISS_CODE = -32001  # in JSON-RPC's range for errors a server defines
_DATA_LINE = re.compile(r"^data:", re.MULTILINE)
_LINE = re.compile(r"\r\n|\r|\n")

# A standalone stream (GET) has nothing recorded to say: replay answers that it offers none.
NO_STREAM = Replay(
    status=405,
    headers=((b"allow", b"POST, DELETE"), (b"content-length", b"0")),
    frames=(),
    cut=False,
)


def messages(value: Any) -> list[dict[str, Any]]:
    """The JSON-RPC 2.0 messages of a JSON body (one, or a batch); [] for any other body."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in items):
        return []
    return items


def is_request(message: dict[str, Any]) -> bool:
    """A request or a notification (not a response): it names a method."""
    return isinstance(message.get("method"), str)


def key_form(value: Any) -> Any:
    """A JSON body as it is keyed: each JSON-RPC request without its `id` (only whether it
    has one: a notification is another request) and without the UNKEYED_PARAMS; a response,
    and any other body, as it is."""
    found = messages(value)
    if not any(is_request(m) for m in found):
        return value
    keyed = [_keyed(m) if is_request(m) else m for m in found]
    return keyed if isinstance(value, list) else keyed[0]


def _keyed(message: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "id"}
    if "id" in message:
        out["id"] = "*"
    params = out.get("params")
    if isinstance(params, dict) and not UNKEYED_PARAMS.isdisjoint(params):
        out["params"] = {k: v for k, v in params.items() if k not in UNKEYED_PARAMS}
    if out.get("params") == {}:
        del out["params"]  # empty params are no params: SDKs send either
    return out


def request_ids(value: Any) -> tuple[Any, ...]:
    """The ids of the requests in a body, in order (notifications have none)."""
    return tuple(m["id"] for m in messages(value) if is_request(m) and "id" in m)


def answers(payload: Any) -> bool:
    """A response (or a batch holding one): what a client waits for before it hangs up."""
    found = messages(payload)
    return any("id" in m and not is_request(m) and ("result" in m or "error" in m) for m in found)


def _answer_frame(event: str, payload: Any, data: str) -> bool:
    return answers(payload)


@dataclass(frozen=True)
class _UnlessMessage:
    """A frame test that never holds for a JSON-RPC message: its `error` member is an answer
    like any other (unknown tool, bad params), to record, not a failed stream."""

    test: FrameTest

    def __call__(self, event: str, payload: Any, data: str) -> bool:
        return not messages(payload) and self.test(event, payload, data)


def frame_signs(base: FrameSigns) -> FrameSigns:
    """`base` for an upstream that may speak JSON-RPC: the frame holding a response is final
    (a client may hang up after it), and a JSON-RPC error is no failed stream."""
    return FrameSigns(
        final=AnyOf((base.final, _answer_frame)), error=_UnlessMessage(base.error), idle=base.idle
    )


def ready(exchange: Exchange, key: str) -> Replay:
    """A recording made ready to send: `Replay.of`, then `prepared`."""
    return prepared(Replay.of(exchange, key), exchange.request.body)


def read_ready(store: CassetteStore, cassette: str, key: str, ordinal: int) -> Replay:
    """A recording read and made `ready` (blocking). CassetteCorrupt for a file that cannot
    be read, or whose answer cannot be sent though the file is valid (a hand edit)."""
    exchange = store.read(cassette, key, ordinal)
    try:
        return ready(exchange, key)
    except ValueError as exc:
        where = f"{store.where(cassette)}/{exchange_file(key, ordinal)}"
        raise unreadable(where, cassette, exc) from exc


def prepared(replay: Replay, request_body: dict[str, Any] | None) -> Replay:
    """A recording made ready to send, marked when it answers a JSON-RPC request or holds a
    session id, with its request's ids (to swap in replay)."""
    asked = (request_body or {}).get("json")
    if not messages(asked) and not any(k == _SESSION for k, _ in replay.headers):
        return replay
    return replace(replay, rpc=True, rpc_ids=request_ids(asked))


def standalone_stream(method: str, headers: HeaderView) -> bool:
    """An MCP client opening its standalone stream (GET, SSE, with a session or version)."""
    return (
        method == "GET"
        and "text/event-stream" in headers.get("accept", "")
        and bool(headers.get(SESSION_HEADER, "") or headers.get("mcp-protocol-version", ""))
    )


def answer(replay: Replay, body: Payload, headers: HeaderView) -> Replay:
    """The recorded answer to send to this request: each response's id the incoming request's
    (in a JSON body and in every SSE frame that answers it), and a session id minted for the
    replay session (or the one the request carries) where the recording had the server's."""
    if not replay.rpc:
        return replay  # the common case: no JSON-RPC (an LLM's answer)
    has_session = any(k == _SESSION for k, _ in replay.headers)
    ids = request_ids(body.value) if body.kind == "json" else ()
    swap = {_id(old): new for old, new in zip(replay.rpc_ids, ids, strict=False)}
    swap = {old: new for old, new in swap.items() if old != _id(new)}
    if not swap and not has_session:
        return replay
    session = (headers.get(SESSION_HEADER, "") or uuid.uuid4().hex).encode("latin-1")
    frames = replay.frames
    if swap:
        sse = any(k == b"content-type" and b"event-stream" in v for k, v in replay.headers)
        frames = _swapped_frames(frames, swap, sse)
    size = str(sum(len(data) for _, data in frames)).encode()
    head = tuple(
        (k, session if k == _SESSION else size if k == b"content-length" and swap else v)
        for k, v in replay.headers
    )
    return replace(replay, headers=head, frames=frames)


def _id(value: Any) -> str:
    return json.dumps(value)  # 1 and "1" are different ids


def _swapped_frames(
    frames: tuple[tuple[int, bytes], ...], swap: dict[str, Any], sse: bool
) -> tuple[tuple[int, bytes], ...]:
    if sse:
        return tuple((ms, _swapped_event(data, swap)) for ms, data in frames)
    whole = b"".join(data for _, data in frames)
    try:
        value = json.loads(whole)
    except (ValueError, RecursionError):
        return frames
    return ((0, _dumps(_renumbered(value, swap))),)


def _swapped_event(data: bytes, swap: dict[str, Any]) -> bytes:
    """An SSE event with the ids of the responses it holds swapped; other events as they are."""
    text = data.decode("utf-8", "replace")
    _, payload = frame_data("sse", text)
    if payload is None:
        return data
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):
        return data
    new = _renumbered(value, swap)
    if new is value:
        return data
    ending = next(iter(_LINE.findall(text)), "\n")
    lines, out, placed = _LINE.split(text), [], False
    for line in lines:
        if _DATA_LINE.match(line):
            if not placed:
                out.append("data: " + _dumps(new).decode("utf-8"))
                placed = True
            continue
        out.append(line)
    return ending.join(out).encode("utf-8")


def _renumbered(value: Any, swap: dict[str, Any]) -> Any:
    """`value` with each response's id swapped (the same object when none was)."""
    if isinstance(value, list):
        items = [_renumbered(item, swap) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if answers(value) and _id(value["id"]) in swap:
        return {**value, "id": swap[_id(value["id"])]}
    return value


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def refusal(body: Payload, report: dict[str, Any]) -> Refuse | None:
    """A miss on a JSON-RPC request as the client's SDK reads it: a JSON-RPC error (-32001)
    for each request, its message the miss report led by the tool call (name, arguments);
    None for any other request."""
    asked = [m for m in messages(body.value) if is_request(m)] if body.kind == "json" else []
    if not asked:
        return None
    message = _asked(asked) + report["message"]
    details = {k: v for k, v in report.items() if k != "message"}
    errors = [
        {
            "jsonrpc": "2.0",
            "id": m.get("id"),
            "error": {"code": MISS_CODE, "message": message, "data": details},
        }
        for m in asked
    ]
    return Refuse(CassetteMiss(message), errors if isinstance(body.value, list) else errors[0], 200)


def _asked(asked: list[dict[str, Any]]) -> str:
    """What was asked, in a line: `tool call NAME(ARGUMENTS)` for a tool call."""
    said = []
    for m in asked:
        params = m["params"] if isinstance(m.get("params"), dict) else {}
        if m["method"] == "tools/call":
            arguments = json.dumps(params.get("arguments") or {}, ensure_ascii=False)
            said.append(f"tool call {params.get('name')}({arguments})")
        else:
            said.append(str(m["method"]))
    return f"{', '.join(said)}: not served from the cassette, never sent to the tool server.\n"


def tool_call(request: Any, payloads: list[Any]) -> dict[str, Any] | None:
    """An MCP tool call as `show` lists it: the tool's name, its arguments and its result
    (the text the tool returned, else its structured content, or the error), from the
    request's JSON body and the answer's payloads; None for any other exchange."""
    calls = [m for m in messages(request) if m.get("method") == "tools/call"]
    if len(calls) != 1 or not isinstance(calls[0].get("params"), dict):
        return None
    params, wanted = calls[0]["params"], _id(calls[0].get("id"))
    found = [m for p in payloads for m in messages(p) if answers(m) and _id(m["id"]) == wanted]
    return {
        "name": params.get("name"),
        "arguments": params.get("arguments") or {},
        "result": _result_text(found[-1]) if found else None,
    }


def _result_text(response: dict[str, Any]) -> str:
    if "error" in response:
        error: dict[str, Any] = response["error"] if isinstance(response["error"], dict) else {}
        return f"error {error.get('code')}: {error.get('message')}"
    result: dict[str, Any] = response["result"] if isinstance(response.get("result"), dict) else {}
    texts = [
        part["text"]
        for part in result.get("content") or []
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]
    prefix = "error: " if result.get("isError") else ""
    if texts:
        return prefix + "\n".join(texts)
    return prefix + json.dumps(result.get("structuredContent", result), ensure_ascii=False)
