"""Fixtures: a fake provider upstream and a factory for real tapeproxy servers pointed at it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, settings

from tapeproxy.providers import BUILTIN
from tapeproxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.support import ProxyServer
from tests.support.seaweed import SeaweedFS
from tests.support.serve import STARTED, stop_started

MakeProxy = Callable[..., ProxyServer]


@pytest.fixture(autouse=True)
def _no_server_left_running() -> Iterator[None]:
    """A test that fails before it stops the `tapeproxy serve` it started leaves no process
    behind: stopped here by its pid. A server a wider fixture started (set up before this
    one) is that fixture's to stop."""
    since = len(STARTED)
    yield
    stop_started(since)


def pytest_configure(config: pytest.Config) -> None:
    """Build (and close) the openai SDK's HTTP client before any test runs, which imports
    the whole stack under the SDKs (httpx2 and httpcore2, which `import openai` alone does
    not reach). pytester's inline runs (the pytest plugin and guide recipe tests) drop every
    module first imported inside them. When httpcore2 was one, httpx2 kept a map of its
    exception classes from the dropped copy, and a cut stream later raised a bare httpcore2
    error where the openai SDK raises APIConnectionError: two test_streaming tests failed
    whenever xdist ran them after such a run (without Node, say). Only openai is named
    here: it is a declared test dependency; what it is built on is its own business."""
    openai.DefaultHttpxClient().close()


# These machines are shared and noisy: Hypothesis checks properties here, not speed.
settings.register_profile("shared", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared")


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def cassettes(tmp_path: Path) -> Path:
    return tmp_path / "cassettes"


@pytest.fixture
def make_proxy(fake: FakeUpstream, cassettes: Path) -> Iterator[MakeProxy]:
    """Start tapeproxy with every built-in upstream pointed at the fake; stopped at test end."""
    started: list[ProxyServer] = []

    def make(**overrides: Any) -> ProxyServer:
        upstreams = {name: fake.url for name in BUILTIN}
        upstreams.update(overrides.pop("upstream", {}))
        values: dict[str, Any] = {
            "port": 0,
            "cassettes": cassettes,
            "upstream": upstreams,
            "shutdown_timeout": 2,
        }
        values.update(overrides)
        server = ProxyServer(Settings(**values)).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def hanging_upstream() -> Iterator[tuple[str, threading.Event]]:
    """Reads one request, never answers, and sets the event when the proxy hangs up."""
    server = socket.create_server(("127.0.0.1", 0))
    hung_up = threading.Event()

    def serve() -> None:
        server.settimeout(20)  # a test that never connects does not hold teardown for long
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(20)
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                return
            hung_up.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", hung_up
    server.close()
    thread.join(timeout=25)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One real SeaweedFS (`weed mini`) for the whole session: it takes ~15 s to start."""
    store = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    try:
        store.wait()
        yield store
    finally:
        store.stop()


@pytest.fixture
def s3_library(seaweed: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty `s3://` library on the session's SeaweedFS, with the AWS variables set
    for this process and the servers it starts, and a read-through cache of this test's own."""
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return seaweed.library()
