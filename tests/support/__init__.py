"""Test harness: the real tapeproxy app on real uvicorn, port 0, in a background thread."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tapeproxy.app import Server
from tapeproxy.cli.server import KEEP_ALIVE_SECONDS, ReadyServer, uvicorn_config
from tapeproxy.settings import Settings
from tapeproxy.store.protocol import parse_exchange_file
from tapeproxy.store.state import STATE_DIR

REPOSITORY = Path(__file__).resolve().parents[2]
SECRET_OPENAI = "sk-test-SECRET-openai-0123456789abcdef"
SECRET_ANTHROPIC = "sk-ant-test-SECRET-anthropic-0123456789"
SECRET_GEMINI = "AIza-test-SECRET-gemini-0123456789"
SECRETS = (SECRET_OPENAI, SECRET_ANTHROPIC, SECRET_GEMINI)


class ProxyServer:
    """`with ProxyServer(settings) as proxy:` serves on proxy.url until the block ends."""

    def __init__(self, settings: Settings, keep_alive: int = KEEP_ALIVE_SECONDS) -> None:
        self.settings = settings
        self.tapeproxy = Server(settings)
        self.app = self.tapeproxy.app
        self.url = ""
        self._ready = threading.Event()
        config = uvicorn_config(self.app, settings, keep_alive, self.tapeproxy.protocol)
        self._server = ReadyServer(config, self._on_ready)
        self._thread = threading.Thread(target=self._run, name="tapeproxy-test", daemon=True)

    def _on_ready(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def _run(self) -> None:
        asyncio.run(self._server.serve())
        self._ready.set()

    def start(self) -> ProxyServer:
        self._thread.start()
        if not self._ready.wait(timeout=20) or not self.url:
            raise RuntimeError("tapeproxy did not start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def get(self, path: str) -> Any:
        return httpx.get(self.url + path, timeout=10).json()

    def put_cassette(self, **body: str) -> httpx.Response:
        return httpx.put(self.url + "/__tapeproxy/cassette", json=body, timeout=10)

    @property
    def stats(self) -> Any:
        return self.get("/__tapeproxy/stats")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go): an unreachable upstream."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def library_files(root: Path) -> list[Path]:
    """Every file below `root` but the state folder's (`.tapeproxy/`: the notes replay runs
    leave for prune), sorted: tests compare what was recorded."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != STATE_DIR]
        found += [Path(folder) / name for name in names]
    return sorted(found)


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (but the state folder), by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in library_files(folder)}


def committed(cassette: str) -> list[Path]:
    """The exchange files of the repository's own cassette `cassette` (under cassettes/),
    to read: what a README demo run or a stray write left there is not among them."""
    folder = REPOSITORY / "cassettes" / cassette
    return sorted(p for p in folder.iterdir() if parse_exchange_file(p.name))


def copy_committed(cassette: str, library: Path, name: str | None = None) -> Path:
    """A copy of the repository's cassette `cassette` (its exchange files) in `library`,
    named `name` (else the same), for a test to serve or change: no test runs on the
    repository's own cassettes/ folder. The copy's folder."""
    folder = library / (name or cassette)
    folder.mkdir(parents=True, exist_ok=True)
    for path in committed(cassette):
        shutil.copy2(path, folder / path.name)
    return folder


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def check_jsonschema(schema: str, path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema's built-in `schema` (e.g. `vendor.compose-spec`) run on `path`."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
