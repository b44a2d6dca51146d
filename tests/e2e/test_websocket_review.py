"""WebSocket sessions as an attacker or an unlucky user drives them: a credential in the
upstream's close reason or an ephemeral client secret (`ek_...`) never reaches a file, a
log line, the misses journal or the error event; a session the server's shutdown cuts
short is not written as if it had ended."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tests.fakes.realtime import FakeRealtime
from tests.support import ProxyServer
from tests.support.sockets import Servers, files, session, turn, ws_url

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


def test_an_ephemeral_client_secret_leaves_nowhere(
    realtime: FakeRealtime, serve: Serve, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tapeproxy")
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder, "/tool/echo")) as ws:
        ws.send(f"token {EPHEMERAL}")
        ws.recv(timeout=10)
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    [file] = files(cassettes)
    assert EPHEMERAL not in file.read_text() and "token [redacted]" in file.read_text()
    proxy = serve(mode="replay")
    with connect(ws_url(proxy, "/tool/echo")) as ws:
        ws.send(json.dumps({"client_secret": EPHEMERAL, "seen": EPHEMERAL}))
        error = ws.recv(timeout=10)
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert "cassette_miss" in str(error) and EPHEMERAL not in str(error)
    assert EPHEMERAL not in json.dumps(proxy.get("/__tapeproxy/misses"))
    assert EPHEMERAL not in caplog.text


def test_a_session_cut_by_the_servers_shutdown_is_not_written_as_ended(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder)) as ws:
        turn(ws, "Say hi")  # one turn of a session that would go on
        stopping = threading.Thread(target=recorder.stop)  # what SIGTERM does
        stopping.start()
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        stopping.join(10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
    assert not stopping.is_alive()  # bounded
    assert files(cassettes) == []  # it was cut, not "closed 1012 by the client"


@pytest.mark.parametrize("mode", ["replay", "record"])
def test_malformed_breaks_the_first_json_server_frame_of_a_session(
    realtime: FakeRealtime, serve: Serve, cassettes: Path, mode: str
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder)) as ws:
        ws.recv(timeout=10)  # session.created, then the client's close
    recorder.stop()
    proxy = serve(realtime.url, mode=mode)
    with connect(ws_url(proxy), additional_headers={"x-tapeproxy-fault": "malformed"}) as ws:
        first = ws.recv(timeout=10)
    assert isinstance(first, str) and first.startswith('{"type": "session.created"')
    with pytest.raises(ValueError):
        json.loads(first)  # cut in half, as a malformed HTTP body is
    assert proxy.get("/__tapeproxy/stats")["faults"] == 1
    proxy.stop()
    assert len(files(cassettes)) == 1  # a spoiled session is never written


def test_a_frame_miss_in_auto_mode_does_not_advise_auto(
    realtime: FakeRealtime, serve: Serve
) -> None:
    recorder = serve(realtime.url, mode="record")
    session(recorder)
    recorder.stop()
    proxy = serve(realtime.url, mode="auto")  # the upgrade has a recording: it is replayed
    protocols = [Subprotocol("realtime")]
    with pytest.raises(ConnectionClosed), connect(ws_url(proxy), subprotocols=protocols) as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Bye"}}))
        error = json.loads(ws.recv(timeout=10))
        ws.recv(timeout=10)
    message = error["error"]["message"]
    assert "--mode auto" not in message and "--mode record" in message


def test_a_frame_of_exactly_max_frame_passes_both_ways_and_one_byte_more_closes_1009(
    realtime: FakeRealtime, serve: Serve
) -> None:
    proxy = serve(realtime.url, mode="record", max_frame=1024)
    with connect(ws_url(proxy, "/tool/echo"), max_size=None) as ws:
        ws.send(b"x" * 1023)  # echoed with one byte more: 1,024 bytes from the upstream
        assert len(ws.recv(timeout=10)) == 1024
        ws.send(b"x" * 1024)  # the client's own, at the limit too: 1,025 back is over it
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_a_flood_of_empty_frames_counts_against_max_record(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record", max_record=100_000)
    with connect(ws_url(proxy, "/tool/echo")) as ws:
        for _ in range(2000):  # no payload, yet each is a frame in the file, and in replay
            ws.send(b"")
        for _ in range(2000):
            ws.recv(timeout=10)
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert proxy.get("/__tapeproxy/stats")["too_large"] == 1
    proxy.stop()
    assert files(cassettes) == []


def test_timing_recorded_and_slow_hold_server_frames_back(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder, "/tool/echo")) as ws:
        ws.send("one")
        ws.recv(timeout=10)
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    [file] = files(cassettes)
    exchange = json.loads(file.read_text())
    client, server = exchange["session"]["frames"][:2]
    server["ms"] = client["ms"] + 400  # the echo came 0.4 s after its client frame
    file.write_text(json.dumps(exchange))
    for header in ({"x-tapeproxy-timing": "recorded"}, {"x-tapeproxy-fault": "slow:ttfb=400"}):
        with connect(ws_url(serve(mode="replay"), "/tool/echo"), additional_headers=header) as ws:
            ws.send("one")
            began = time.monotonic()
            ws.recv(timeout=10)
            assert time.monotonic() - began >= 0.3, header  # never sooner (no upper bound)


def test_the_miss_close_reason_says_where_the_report_is(serve: Serve) -> None:
    """Gemini Live's SDK shows the close reason only (not the error event before it)."""
    route = "/gemini/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    proxy = serve(mode="replay", cassette="tests/test_voice/test_a_rather_long_name_" + "x" * 60)
    with pytest.raises(ConnectionClosed) as closed, connect(ws_url(proxy, route)) as ws:
        ws.send(json.dumps({"setup": {"model": "models/gemini-live-2.5-flash"}}))
        while True:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert "/__tapeproxy/misses" in closed.value.rcvd.reason


def test_a_binary_frame_of_json_is_stored_readable_scrubbed_and_replayed_as_bytes(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    recorder = serve(realtime.url, mode="record")
    sent = json.dumps({"realtimeInput": {"text": "hi"}, "note": KEY}).encode()
    with connect(ws_url(recorder, "/tool/echo")) as ws:
        ws.send(sent)
        recorded = ws.recv(timeout=10)  # the echo adds a byte: `{...}\x01`, no JSON
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    [file] = files(cassettes)
    client, server = json.loads(file.read_text())["session"]["frames"][:2]
    assert client["type"] == "binary" and client["json"]["note"] == "[redacted]"
    assert server["type"] == "binary" and "base64" in server  # `{...}\x01`: no JSON
    realtime.stop()
    with connect(ws_url(serve(mode="replay"), "/tool/echo")) as ws:
        ws.send(sent.replace(b"CloseReason", b"OtherReason"))  # another key: still a match
        again = ws.recv(timeout=10)
    assert isinstance(recorded, bytes) and isinstance(again, bytes)
    assert again == recorded  # (binary that is no JSON is kept as it came, as HTTP's is)


def test_a_client_text_frame_of_invalid_utf8_closes_1007_and_nothing_is_written(
    realtime: FakeRealtime, serve: Serve, cassettes: Path
) -> None:
    proxy = serve(realtime.url, mode="record")
    with connect(ws_url(proxy, "/tool/echo")) as ws:
        ws.send("one")
        ws.recv(timeout=10)
        ws.send(b"\xff\xfe not UTF-8", text=True)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    proxy.stop()
    assert files(cassettes) == []  # as a frame over --max-frame: a failed session


def test_a_replay_with_recorded_timing_ends_when_its_client_leaves(
    realtime: FakeRealtime, serve: Serve, cassettes: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    recorder = serve(realtime.url, mode="record")
    with connect(ws_url(recorder, "/tool/echo")) as ws:
        ws.send("one")
        ws.recv(timeout=10)
        ws.send("bye")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    recorder.stop()
    [file] = files(cassettes)
    exchange = json.loads(file.read_text())
    first, echo, *rest = exchange["session"]["frames"]
    later = [dict(echo, ms=echo["ms"] + 1000 * n) for n in range(20)]  # 20 s of answers
    exchange["session"]["frames"] = [first, *later, *rest]
    file.write_text(json.dumps(exchange))
    proxy = serve(mode="replay", replay_timing="recorded")
    with connect(ws_url(proxy, "/tool/echo")) as ws:
        ws.send("one")
        ws.recv(timeout=10)  # then the client leaves
    proxy.stop()  # within its 2 s: the replay did not play on to nobody for 20 s
    assert "graceful shutdown exceeded" not in capfd.readouterr().err
