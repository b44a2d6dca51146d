"""The JSON-RPC rules (tapeproxy.engine.jsonrpc): keys without ids or `_meta`, a recorded
answer's ids swapped for the incoming request's, a miss as a JSON-RPC error."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.inbound import HeaderView
from tapeproxy.engine.keying import request_key, request_parts
from tapeproxy.engine.replay import Replay
from tapeproxy.engine.rules import MatchRules
from tapeproxy.exchange.bodies import Payload
from tapeproxy.providers import generic

CALL: dict[str, Any] = {
    "jsonrpc": "2.0",
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 1}},
}
ids = st.one_of(st.integers(), st.text(max_size=8))


def key_of(body: Any, headers: dict[str, str] | None = None) -> str:
    raw = json.dumps(body).encode()
    heads = {"content-type": "application/json", **(headers or {})}
    parts = request_parts("POST", "tools", "/mcp", "", heads, raw, MatchRules())
    return request_key(parts, MatchRules())


@given(ids, ids, st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
def test_the_id_and_meta_are_not_part_of_the_key(a: Any, b: Any, meta: dict[str, int]) -> None:
    other = {**CALL, "id": b, "params": {**CALL["params"], "_meta": meta}}
    assert key_of({**CALL, "id": a}) == key_of(other)


def test_method_params_notification_and_mcp_headers_are_part_of_the_key() -> None:
    base = key_of({**CALL, "id": 1})
    other_args = {**CALL, "id": 1, "params": {"name": "add", "arguments": {"a": 2}}}
    assert key_of(other_args) != base
    assert key_of(CALL) != base  # a notification is not a request
    assert key_of({**CALL, "id": 1}, {"mcp-method": "tools/call"}) != base
    assert key_of({**CALL, "id": 1}, {"mcp-session-id": "s1", "last-event-id": "3"}) == base
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
    python = {**init, "params": {"capabilities": {}, "clientInfo": {"name": "mcp"}}}
    node = {**init, "params": {"capabilities": {}, "clientInfo": {"name": "node"}}}
    assert key_of(python) == key_of(node)  # the client's name is telemetry, not the question
    listed = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert key_of(listed) == key_of({**listed, "params": {"_meta": {"progressToken": 1}}})
    batch = [{**CALL, "id": 1}, {**CALL, "id": 2}]
    assert key_of(batch) == key_of([{**CALL, "id": "x"}, {**CALL, "id": "y"}])


def json_replay(body: bytes, ids: tuple[Any, ...]) -> Replay:
    headers = ((b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)))
    return Replay(200, headers, ((0, body),), False, rpc=True, rpc_ids=ids)


def asked(*request_ids: Any) -> Payload:
    return Payload("json", [{**CALL, "id": i} for i in request_ids])


def test_a_batch_answer_gets_each_request_its_own_id_in_any_order() -> None:
    answer = [
        {"jsonrpc": "2.0", "id": 2, "result": "b"},
        {"jsonrpc": "2.0", "id": 1, "result": "a"},
    ]
    recorded = json_replay(json.dumps(answer).encode(), (1, 2))
    sent = jsonrpc.answer(recorded, asked("x", "y"), HeaderView(()))
    got = json.loads(sent.whole)
    assert [(m["id"], m["result"]) for m in got] == [("y", "b"), ("x", "a")]
    assert dict(sent.headers)[b"content-length"] == str(len(sent.whole)).encode()


def test_in_a_stream_only_the_frames_that_answer_are_renumbered() -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {}}
    response = {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}
    frames = tuple(
        (0, f"event: message\r\ndata: {json.dumps(m)}\r\n\r\n".encode())
        for m in (request, response)
    )
    sse = ((b"content-type", b"text/event-stream"),)
    recorded = Replay(200, sse, frames, False, rpc=True, rpc_ids=(1,))
    sent = jsonrpc.answer(recorded, Payload("json", {**CALL, "id": 42}), HeaderView(()))
    first, second = (data.decode() for _, data in sent.frames)
    assert first == f"event: message\r\ndata: {json.dumps(request)}\r\n\r\n"  # the server's own
    assert second.startswith("event: message\r\ndata: ") and second.endswith("\r\n\r\n")
    assert json.loads(second.split("data: ")[1]) == {**response, "id": 42}
    assert recorded.frames == frames  # the cached recording is untouched
    assert jsonrpc.answer(recorded, Payload("json", {**CALL, "id": 1}), HeaderView(())) is recorded


def test_a_json_rpc_error_frame_is_an_answer_not_a_failed_stream() -> None:
    signs = generic("tools", "http://127.0.0.1:1").frame_signs
    error = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "unknown tool"}}
    assert signs.final("message", error, json.dumps(error))
    assert not signs.error("message", error, json.dumps(error))
    assert signs.error("error", {"error": "overloaded"}, "")  # the other dialects' still count


def test_a_miss_on_a_batch_is_one_json_rpc_error_per_request() -> None:
    refused = jsonrpc.refusal(asked(1, 2), {"message": "cassette miss: ...", "key": "k"})
    assert refused is not None and refused.status == 200
    assert [m["id"] for m in refused.body] == [1, 2]
    assert {m["error"]["code"] for m in refused.body} == {jsonrpc.MISS_CODE}
    assert refused.body[0]["error"]["message"].startswith('tool call add({"a": 1})')
    assert jsonrpc.refusal(Payload("json", {"model": "m"}), {"message": "m"}) is None


def test_json_nested_past_the_parsers_depth_is_no_json_and_no_crash() -> None:
    """A hostile client's or upstream's frame 5,000 deep: json raises RecursionError, which is
    no ValueError; each reader takes it as text, as any other frame that is no JSON."""
    from tapeproxy.engine.frames import decoded

    deep = "[" * 5000 + "]" * 5000
    assert decoded(deep) == deep
    assert decoded(b"{" + deep.encode() + b"}") == {
        "base64": base64.b64encode(b"{" + deep.encode() + b"}").decode()
    }
    frames = ((0, deep.encode()),)
    assert jsonrpc._swapped_frames(frames, {"1": 2}, sse=False) == frames
    event = f"data: {deep}\n\n".encode()
    assert jsonrpc._swapped_frames(((0, event),), {"1": 2}, sse=True) == ((0, event),)
