"""The pytest plugin's server in its background thread, stopped as a session ends: it ends at
once when idle, lets an answer in flight finish and keeps its recording, and cuts one still
coming after the graceful timeout quietly, recording nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tapeproxy.cli.background import BackgroundServer
from tapeproxy.modes import Mode
from tapeproxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under
from tests.support.streams import USER, stream_through_shutdown


def start(cassettes: Path, fake: FakeUpstream, **more: Any) -> BackgroundServer:
    settings = Settings.model_validate(
        {
            "mode": Mode.RECORD,
            "port": 0,
            "cassettes": cassettes,
            "upstream": {"openai": fake.url},
            **more,
        }
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
