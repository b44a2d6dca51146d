"""The pytest plugin's server in its background thread, stopped as a session ends: it ends at
once when idle, lets an answer in flight finish and keeps its recording, and cuts one still
coming after the graceful timeout quietly, recording nothing."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tapeproxy.cli.background import BackgroundServer
from tapeproxy.modes import Mode
from tapeproxy.settings import Settings
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, files_under
from tests.support.streams import USER, stream_through_shutdown


def start(cassettes: Path, fake: FakeUpstream, **more: Any) -> BackgroundServer:
    settings = Settings.model_validate(
        {"mode": Mode.RECORD, "port": 0, "cassettes": cassettes, "upstream": {"openai": fake.url}}
        | more
    )
    return BackgroundServer(settings).start()


def test_a_stop_with_idle_connections_ends_the_server_and_closes_them(tmp_path: Path) -> None:
    with FakeUpstream() as fake:
        server = start(tmp_path, fake)
        with httpx.Client(base_url=server.url, timeout=10) as client:  # kept alive, idle
            assert client.get("/__tapeproxy/health").status_code == 200
            server.stop()
            with pytest.raises(httpx.TransportError):
                client.get("/__tapeproxy/health")
    with pytest.raises(httpx.ConnectError):  # nothing listens any more
        httpx.get(server.url + "/__tapeproxy/health", timeout=10)


def test_a_stop_lets_a_stream_in_flight_finish_and_keeps_its_recording(tmp_path: Path) -> None:
    with FakeUpstream(frame_delay=0.05) as fake:
        server = start(tmp_path, fake, cassette="stopped")
        client = openai.OpenAI(
            base_url=server.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0
        )
        chunks = iter(
            client.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        )
        deltas = [next(chunks).choices[0].delta.content or ""]
        reader = threading.Thread(
            target=lambda: deltas.extend(c.choices[0].delta.content or "" for c in chunks)
        )
        reader.start()
        server.stop()  # the stream is still coming: it has frames 0.05 s apart
        reader.join(10)
    assert "".join(deltas) == "echo: " + USER[0]["content"]
    assert [name.split("/")[0] for name in files_under(tmp_path)] == ["stopped"]


def test_a_stream_still_coming_after_the_graceful_timeout_is_cut_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeUpstream(frame_delay=1.0) as fake:
        server = start(tmp_path, fake, shutdown_timeout=0.5)  # open streams get 1 s
        assert stream_through_shutdown(server, caplog) == ["RemoteProtocolError"]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert files_under(tmp_path) == {}


def test_a_stop_waits_until_a_large_answer_has_left_for_a_slow_reader(tmp_path: Path) -> None:
    """A replayed answer is written at once, and its request is over; most of its bytes still
    wait in the server's buffers for a client that reads slowly: they are sent before the
    server ends, not dropped."""
    audio = bytes(range(256)) * (16 * 4096)  # 16 MiB
    request = (
        b"POST /openai/v1/audio/speech HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"authorization: Bearer " + SECRET_OPENAI.encode() + b"\r\n"
        b"content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    )
    with FakeUpstream() as fake:
        fake.script("/v1/audio/speech", Reply(body=audio, headers={"content-type": "audio/mpeg"}))
        recorder = start(tmp_path, fake)
        httpx.post(recorder.url + "/openai/v1/audio/speech", json={}, timeout=30)
        recorder.stop()
        server = start(tmp_path, fake, mode=Mode.REPLAY)
    host, port = server.url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect((host, int(port)))
        sock.sendall(request)
        time.sleep(0.3)  # the answer is written; the client has not read yet
        received = bytearray()
        reader = threading.Thread(target=read_slowly, args=(sock, received))
        reader.start()
        server.stop()
        reader.join(30)
    assert received.endswith(audio)


def read_slowly(sock: socket.socket, into: bytearray) -> None:
    while chunk := sock.recv(65536):
        into += chunk
        time.sleep(0.0005)
