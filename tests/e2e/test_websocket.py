"""WebSocket sessions through tapeproxy with a raw client (the websockets library) against a
fake Realtime server: recorded as one exchange, replayed causally with the server stopped,
a changed client frame or an unrecorded upgrade refused with the error event and 1008,
credentials never written, and the bad input and faults of sessions."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tapeproxy.exchange.model import dump_exchange, load_exchange
from tests.fakes.realtime import FakeRealtime
from tests.support import ProxyServer
from tests.support.sockets import KEY_PROTOCOL, Servers, files, session, turn, ws_url

Serve = Callable[..., ProxyServer]


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    with FakeRealtime() as fake:
        yield fake


@pytest.fixture
def serve(cassettes: Path) -> Iterator[Serve]:
    with Servers(cassettes) as servers:
        yield servers.start


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
    # Written frame by frame from its spool, laid out as the model renders it whole.
    assert dump_exchange(load_exchange(file.read_bytes())) == file.read_bytes()
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


def echo_url(proxy: ProxyServer) -> str:
    return ws_url(proxy, "/tool/echo")


def test_binary_frames_record_and_replay_byte_for_byte(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(echo_url(recorder)) as ws:
        ws.send(b"\x00\xffaudio")
        recorded = ws.recv(timeout=10)
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    assert recorded == b"\x00\xffaudio\x01"
    [file] = files(cassettes)
    frames = json.loads(file.read_text())["session"]["frames"]
    assert [(f["direction"], f["type"]) for f in frames] == [
        ("client", "binary"),
        ("server", "binary"),
        ("client", "text"),
    ]
    realtime.stop()
    with connect(echo_url(serve(mode="replay"))) as ws:
        ws.send(b"\x00\xffaudio")
        assert ws.recv(timeout=10) == recorded
        ws.send("bye")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "bye")


def test_a_client_frame_over_max_frame_closes_the_session_with_1009(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record", max_frame=1024)
    with connect(echo_url(proxy)) as ws:
        ws.send("x" * 2048)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    proxy.stop()
    assert files(cassettes) == []


def test_a_server_frame_over_max_frame_closes_the_session_with_1009(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record", max_frame=1024)
    with connect(echo_url(proxy)) as ws:
        ws.send("big:4096")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    proxy.stop()
    assert files(cassettes) == []  # not written: it did not end with a close


def test_a_client_that_drops_mid_session_leaves_nothing_written(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record")
    with connect(echo_url(proxy)) as ws:
        ws.send("one")
        ws.recv(timeout=10)
        ws.socket.shutdown(socket.SHUT_RDWR)  # no close frame: the TCP connection just ends
    for _ in range(1000):  # the proxy counts it once it has closed the upstream leg
        if proxy.get("/__tapeproxy/stats")["aborted"]:
            break
    assert proxy.get("/__tapeproxy/stats")["aborted"] == 1
    assert realtime.sessions == 1
    proxy.stop()
    assert files(cassettes) == []


def test_an_upstream_that_drops_without_a_close_is_not_written(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    realtime.drop_after = 2  # session.created, session.updated, then the TCP connection ends
    proxy = serve(realtime.url, mode="record")
    with pytest.raises(ConnectionClosed) as closed:
        session(proxy)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    proxy.stop()
    assert files(cassettes) == []
    kept = serve(realtime.url, mode="record", record_failures=True)
    with pytest.raises(ConnectionClosed):
        session(kept)
    kept.stop()
    [file] = files(cassettes)
    exchange = json.loads(file.read_text())
    assert exchange["outcome"] == "upstream_cut" and exchange["session"]["end"]["cut"] is True


def test_cut_after_3_ends_a_replayed_session_after_three_server_frames(
    realtime: FakeRealtime, serve: Serve
) -> None:
    recorder = serve(realtime.url, mode="record")
    session(recorder)
    recorder.stop()
    proxy = serve(mode="replay", fault=["cut:after=3"])
    got: list[Any] = []
    protocols = [Subprotocol("realtime")]
    with (
        connect(ws_url(proxy), subprotocols=protocols) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        got.append(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Say hi"}}))
        got.append(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "response.create"}))
        while True:
            got.append(ws.recv(timeout=10))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    assert closed.value.rcvd.reason == "tapeproxy fault: cut"
    assert proxy.get("/__tapeproxy/stats")["faults"] == 1
    assert [json.loads(one)["type"] for one in got] == [
        "session.created",
        "session.updated",
        "response.created",
    ]


def test_reset_refuses_the_upgrade_and_server_error_sends_the_error_event(
    realtime: FakeRealtime, serve: Serve
) -> None:
    proxy = serve(realtime.url, mode="record")
    headers = {"x-tapeproxy-fault": "reset"}
    with pytest.raises(InvalidStatus):
        connect(ws_url(proxy), additional_headers=headers)
    headers = {"x-tapeproxy-fault": "server_error"}
    with connect(ws_url(proxy), additional_headers=headers) as ws:
        error = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert error["type"] == "error" and error["error"]["type"] == "server_error"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    assert realtime.sessions == 0  # neither went upstream


def test_a_session_over_max_record_is_relayed_whole_but_not_written(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record", max_record=4096)
    with connect(echo_url(proxy)) as ws:
        for n in range(8):
            ws.send(f"frame {n} " + "x" * 1000)
            assert json.loads(ws.recv(timeout=10))["echo"].startswith(f"frame {n} ")
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert proxy.get("/__tapeproxy/stats")["too_large"] == 1
    proxy.stop()
    assert files(cassettes) == []


def test_auto_records_then_replays_passthrough_writes_nothing_and_live_goes_beside(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    passthrough = serve(realtime.url, mode="passthrough")
    session(passthrough)
    passthrough.stop()
    assert files(cassettes) == [] and realtime.sessions == 1
    recorder = serve(realtime.url, mode="auto")
    recorded, _ = session(recorder)
    recorder.stop()
    assert len(files(cassettes)) == 1 and realtime.sessions == 2
    replayed, _ = session(serve(realtime.url, mode="auto"))  # a new run: the recording answers
    assert replayed == recorded and realtime.sessions == 2
    live = serve(realtime.url, mode="replay", live=["openai"])
    fresh, _ = session(live)  # partial replay: the session goes live as a whole
    live.stop()
    assert fresh != recorded and realtime.sessions == 3
    assert [p.parent.name for p in files(cassettes)] == ["default", "default.derived"]


def test_a_key_in_the_query_reaches_the_upstream_but_neither_the_file_nor_the_key(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    secret = "AIzaSyQueryKeyForTapeproxy0123456789abcd"
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder, f"/tool/echo?key={secret}")) as ws:
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    [file] = files(cassettes)
    assert secret not in file.read_text() and secret[:12] not in file.read_text()
    with connect(ws_url(serve(mode="replay"), "/tool/echo?key=another-key-value")) as ws:
        ws.send("bye")  # keyed without its credential: the same session
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


@pytest.mark.parametrize(
    "sent",
    [
        '{"b": 1,"a":[1.0, 2e5]}',  # no layout json.dumps writes: kept as text
        '{"type":"delta","delta":"caf\\u00e9 \\ud83d"}',  # escapes and a lone surrogate
        '{\n  "indented": true\n}\n',
        "not json at all",
    ],
)
def test_server_text_frames_replay_byte_for_byte_whatever_their_layout(
    realtime: FakeRealtime, serve: Serve, cassettes: Path, sent: str
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(echo_url(recorder)) as ws:
        ws.send("raw:" + sent)
        assert ws.recv(timeout=10) == sent
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    realtime.stop()
    with connect(echo_url(serve(mode="replay"))) as ws:
        ws.send("raw:" + sent)
        assert ws.recv(timeout=10) == sent


def test_a_client_frame_after_the_recorded_ones_is_a_miss(
    realtime: FakeRealtime, serve: Serve
) -> None:
    recorder = serve(realtime.url, mode="record")
    session(recorder)
    recorder.stop()
    with connect(ws_url(serve(mode="replay")), subprotocols=[Subprotocol("realtime")]) as ws:
        turn(ws, "Say hi")
        ws.send(json.dumps({"type": "response.create"}))  # one more than was recorded
        error = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert "client frame #3 " in error["error"]["message"]
    assert "the recorded session had no more" in error["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_cut_on_a_live_session_ends_both_legs_and_writes_nothing(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record", fault=["cut:after=2"])
    got: list[Any] = []
    with connect(ws_url(proxy)) as ws, pytest.raises(ConnectionClosed) as closed:
        got.append(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Say hi"}}))
        got.append(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "response.create"}))
        while True:
            got.append(ws.recv(timeout=10))
    assert len(got) == 2
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    proxy.stop()
    assert files(cassettes) == []


def test_strict_order_refuses_a_session_out_of_the_recorded_order(
    realtime: FakeRealtime, serve: Serve
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(echo_url(recorder)) as ws:
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    session(recorder)
    recorder.stop()
    proxy = serve(mode="replay", strict_order=True)
    protocols = [Subprotocol("realtime")]
    with connect(ws_url(proxy), subprotocols=protocols) as ws:  # the second, asked first
        error = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert "--strict-order" in error["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
