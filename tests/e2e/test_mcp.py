"""MCP tool servers in the cassette: the official `mcp` Python SDK client (Streamable HTTP)
records a session with a real MCP server through tapeproxy, and a new session replays it with
the server gone; raw JSON-RPC requests get their own ids back; a miss is a JSON-RPC error."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.conftest import MakeProxy
from tests.fakes.mcp_server import ToolServer
from tests.fakes.socket_upstream import Answer, SocketUpstream
from tests.support import files_under, wait_for

ACCEPT = {"accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
OSLO = '{"city": "Oslo", "forecast": "sunny", "celsius": 21}'
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def session(url: str, mode: str) -> list[Any]:
    """One client session: initialize (or discover), list the tools, call two: what it got."""
    async with Client(url, mode=mode) as client:
        tools = await client.list_tools()
        added = await client.call_tool("add", {"a": 1, "b": 2})
        weather = await client.call_tool("get_weather", {"city": "Oslo"})
        info = client.server_info
        return [
            info.model_dump() if info is not None else None,
            tools.model_dump(),
            added.model_dump(),
            weather.model_dump(),
        ]


def stored(cassettes: Path) -> list[dict[str, Any]]:
    return [json.loads(data) for data in files_under(cassettes).values()]


def show_json(cassettes: Path) -> list[dict[str, Any]]:
    """`tapeproxy show default --json`: the exchanges as it lists them."""
    result = CliRunner().invoke(app, ["show", "default", "--cassettes", str(cassettes), "--json"])
    assert result.exit_code == 0, result.output
    exchanges: list[dict[str, Any]] = json.loads(result.output)["exchanges"]
    return exchanges


def rpc_method(exchange: dict[str, Any]) -> str | None:
    body = exchange["request"].get("body") or {}
    found = body["json"] if isinstance(body.get("json"), dict) else {}
    method = found.get("method")
    return method if isinstance(method, str) else None


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_an_sdk_session_recorded_with_a_real_mcp_server_replays_with_the_server_gone(
    make_proxy: MakeProxy, cassettes: Path, mode: str
) -> None:
    with ToolServer() as tools:
        recorder = make_proxy(mode="record", upstream={"tools": tools.url})
        live = asyncio.run(session(recorder.url + "/tools/mcp", mode))
        recorder.stop()
        assert tools.calls == ["add", "get_weather"]
    assert live[2]["structured_content"] == {"result": 3}
    files = stored(cassettes)
    assert {f["outcome"] for f in files} == {"complete"}
    # Its standalone GET stream went live and was not recorded: no replay serves one.
    assert {f["request"]["method"] for f in files} <= {"POST", "DELETE"}
    methods = {rpc_method(f) for f in files}
    assert {"tools/list", "tools/call"} <= methods
    shown = show_json(cassettes)
    assert [e["tool"] for e in shown if e["tool"]] == [
        {"name": "add", "arguments": {"a": 1, "b": 2}, "result": "3"},
        {"name": "get_weather", "arguments": {"city": "Oslo"}, "result": OSLO},
    ]
    replayer = make_proxy(mode="replay", upstream={"tools": tools.url})
    assert asyncio.run(session(replayer.url + "/tools/mcp", mode)) == live
    replayer.put_cassette(cassette="default")  # a new run: the recordings are served anew
    assert asyncio.run(session(replayer.url + "/tools/mcp", mode)) == live
    stats = replayer.stats
    assert (stats["misses"], stats["upstream_calls"], stats["errors"]) == (0, 0, 0)


def raw_session(url: str, rpc_id: int = 1) -> httpx.Response:
    """A raw 2025-11-25 session: initialize, notify, then end it (DELETE). The initialize."""
    init = httpx.post(url, json={**INITIALIZE, "id": rpc_id}, headers=ACCEPT, timeout=10)
    carried = {"mcp-session-id": init.headers["mcp-session-id"], **ACCEPT}
    notified = httpx.post(url, json=INITIALIZED, headers=carried, timeout=10)
    assert notified.status_code == 202
    assert httpx.delete(url, headers=carried, timeout=10).status_code == 200
    return init


def test_a_recorded_session_id_is_not_kept_and_replay_mints_one_per_session(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    with ToolServer() as tools:
        recorder = make_proxy(mode="record", upstream={"tools": tools.url})
        raw_session(recorder.url + "/tools/mcp")
        recorder.stop()
    [init] = [f for f in stored(cassettes) if rpc_method(f) == "initialize"]
    assert init["response"]["headers"]["mcp-session-id"] == "recorded-session"
    proxy = make_proxy(mode="replay", upstream={"tools": tools.url}, repeat="cycle")
    url = proxy.url + "/tools/mcp"
    first, second = raw_session(url), raw_session(url, rpc_id=2)
    minted = {first.headers["mcp-session-id"], second.headers["mcp-session-id"]}
    assert len(minted) == 2 and "recorded-session" not in minted
    carried = {"mcp-session-id": first.headers["mcp-session-id"]}
    stream = httpx.get(url, headers={**carried, "accept": "text/event-stream"}, timeout=10)
    assert stream.status_code == 405  # no standalone stream in replay
    assert proxy.stats["misses"] == 0


def test_raw_json_rpc_requests_with_other_ids_get_their_own_ids_back(
    make_proxy: MakeProxy,
) -> None:
    call: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 5}, "_meta": {"progressToken": 1}},
    }
    with ToolServer() as tools:
        recorder = make_proxy(mode="record", upstream={"tools": tools.url})
        url = recorder.url + "/tools/mcp"
        init = httpx.post(url, json={**INITIALIZE, "id": 1}, headers=ACCEPT, timeout=10)
        carried = {"mcp-session-id": init.headers["mcp-session-id"], **ACCEPT}
        httpx.post(url, json={**call, "id": 7}, headers=carried, timeout=10)
        recorder.stop()
    proxy = make_proxy(mode="replay", upstream={"tools": tools.url})
    url = proxy.url + "/tools/mcp"
    init = httpx.post(url, json={**INITIALIZE, "id": 9001}, headers=ACCEPT, timeout=10)
    assert sse_answers(init.text)[0]["id"] == 9001
    other = {**call, "id": "call-b", "params": {**call["params"], "_meta": {"progressToken": 9}}}
    answered = httpx.post(url, json=other, headers=ACCEPT, timeout=10)
    [result] = sse_answers(answered.text)
    assert result["id"] == "call-b"
    assert result["result"]["structuredContent"] == {"result": 7}
    assert proxy.stats["misses"] == 0


def sse_answers(text: str) -> list[Any]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def test_an_unrecorded_tool_call_is_a_json_rpc_error_that_never_reaches_the_server(
    make_proxy: MakeProxy,
) -> None:
    with ToolServer() as tools:
        recorder = make_proxy(mode="record", upstream={"tools": tools.url})
        asyncio.run(session(recorder.url + "/tools/mcp", "2026-07-28"))
        recorder.stop()
        proxy = make_proxy(mode="replay", upstream={"tools": tools.url})
        refused = asyncio.run(other_city(proxy.url + "/tools/mcp"))
        assert tools.calls == ["add", "get_weather"]  # only the recording's
    assert refused.startswith("code -32001: tool call get_weather")
    assert "get_weather" in refused and "Lima" in refused and "Oslo" in refused
    assert proxy.stats["misses"] == 1


async def other_city(url: str) -> str:
    async with Client(url, mode="2026-07-28") as client:
        try:
            result = await client.call_tool("get_weather", {"city": "Lima"})
        except Exception as exc:  # the SDK raises the JSON-RPC error
            return f"code {getattr(exc, 'code', None)}: {exc}"
        return json.dumps(result.model_dump())


def late_ending_stream(left: threading.Event, responds: bool) -> Answer:
    """An MCP server's SSE answer whose end comes only after its client left: a progress
    notification and (when it `responds` at once) the response; once `left` is set, the
    response if it was not sent, and the end of the body."""
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    response = {"jsonrpc": "2.0", "id": 5, "result": {"content": [], "isError": False}}

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def answer(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        events = [
            chunk(b"event: message\r\ndata: %s\r\n\r\n" % json.dumps(message).encode())
            for message in (progress, response)
        ]
        conn.sendall(b"".join(events if responds else events[:1]))
        left.wait(10)
        conn.sendall(b"".join([] if responds else events[1:]) + b"0\r\n\r\n")

    return answer


@pytest.mark.parametrize("kept", [True, False])
def test_a_client_that_closes_once_it_has_its_response_still_gets_it_recorded(
    make_proxy: MakeProxy, cassettes: Path, kept: bool
) -> None:
    """The MCP SDKs close an SSE answer as soon as they have the response they waited for:
    the upstream is read to its end after they left, and the exchange kept whole. A client
    that leaves before its response (it gave up) records nothing."""
    left = threading.Event()
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow"}}
    with SocketUpstream(late_ending_stream(left, responds=kept)) as upstream:
        proxy = make_proxy(mode="record", upstream={"tools": upstream.url})
        with httpx.stream("POST", proxy.url + "/tools/mcp", json=call, headers=ACCEPT) as answer:
            seen = b""
            for piece in answer.iter_raw():
                seen += piece
                if (b'"result"' if kept else b"progress") in seen:
                    break
        if kept:
            # The upstream ends only after the proxy saw the hang-up: no counter tells when it
            # did, so give it a moment (seen later, the upstream merely ended first).
            time.sleep(0.3)
        else:
            wait_for(lambda: proxy.stats["aborted"] == 1)  # before the upstream answers
        left.set()
        wait_for(lambda: proxy.stats["recorded"] + proxy.stats["aborted"] == 1)
    files = stored(cassettes)
    assert (proxy.stats["recorded"], len(files)) == ((1, 1) if kept else (0, 0))
    if kept:
        assert files[0]["outcome"] == "complete"
        assert len(files[0]["response"]["frames"]) == 2


NODE_DIR = Path(__file__).resolve().parents[1] / "node"
MCP_SDK = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk"


@pytest.mark.skipif(
    shutil.which("node") is None or not MCP_SDK.is_dir(),
    reason="needs node and `npm ci --prefix tests/node` (.ci/run does it)",
)
def test_the_typescript_sdk_replays_what_the_python_sdk_recorded(make_proxy: MakeProxy) -> None:
    with ToolServer() as tools:
        recorder = make_proxy(mode="record", upstream={"tools": tools.url})
        server, listed, added, weather = asyncio.run(session(recorder.url + "/tools/mcp", "legacy"))
        recorder.stop()
    proxy = make_proxy(mode="replay", upstream={"tools": tools.url})
    result = subprocess.run(
        ["node", str(NODE_DIR / "mcp.mjs"), proxy.url + "/tools/mcp"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    node = json.loads(result.stdout)
    assert node["server"]["name"] == server["name"] == "weather-tools"
    assert [t["name"] for t in node["tools"]["tools"]] == [t["name"] for t in listed["tools"]]
    assert node["added"]["structuredContent"] == added["structured_content"] == {"result": 3}
    assert node["weather"]["content"][0]["text"] == weather["content"][0]["text"] == OSLO
    assert proxy.stats["misses"] == 0  # its initialize, its GET (405) and DELETE included


def endless_after_response(stop: threading.Event) -> Answer:
    """An SSE answer that sends its JSON-RPC response, then, a moment later, data without end
    (100 KB at a time)."""
    response = {"jsonrpc": "2.0", "id": 5, "result": {"content": [], "isError": False}}
    event = b"event: message\r\ndata: %s\r\n\r\n" % json.dumps(response).encode()
    noise = b"event: message\r\ndata: {}\r\n\r\n" * 4_000

    def answer(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
        time.sleep(0.5)  # the client leaves meanwhile, its response in hand: the read-on begins
        while not stop.is_set():
            conn.sendall(b"%x\r\n%s\r\n" % (len(noise), noise))
            time.sleep(0.05)

    return answer


def test_reading_on_after_the_client_left_stops_once_the_answer_passes_max_record(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """The read-on after a client that had its response is for a recording: once the answer
    passes --max-record there is none to keep, and the upstream is closed (not read, at its
    pace, for the whole read timeout)."""
    stop = threading.Event()
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow"}}
    with SocketUpstream(endless_after_response(stop)) as upstream:
        proxy = make_proxy(
            mode="record",
            upstream={"tools": upstream.url},
            max_record=4 * 1024 * 1024,
            read_timeout=60,
        )
        with httpx.stream("POST", proxy.url + "/tools/mcp", json=call, headers=ACCEPT) as answer:
            for piece in answer.iter_raw():
                if b'"result"' in piece:
                    break
        try:
            wait_for(lambda: proxy.stats["aborted"] == 1, timeout=10)
        finally:
            stop.set()
    assert (proxy.stats["recorded"], stored(cassettes)) == (0, [])
