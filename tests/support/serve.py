"""`tapeproxy serve` as a user runs it, in a process of its own: started, its ready line read,
stopped by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream, Reply

TAPEPROXY = [sys.executable, "-m", "tapeproxy"]
ROOT = Path(__file__).resolve().parents[2]  # the repository
STARTED: list[subprocess.Popen[str]] = []  # every process Serve started, oldest first


def stop_started(since: int) -> None:
    """Stop the processes Serve started after the first `since` that still run: those a test
    left behind (it failed before its `stop`). SIGTERM, then SIGKILL past 10 s."""
    while len(STARTED) > since:
        process = STARTED.pop()
        if process.poll() is None:
            process.terminate()
            try:
                process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate(timeout=10)


class Serve:
    """`tapeproxy serve --port 0 ARGS` in a process of its own (or another command that
    serves: `view`), as a user runs it; `url` is where it says it is ready."""

    command = "serve"

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
        environ["PYTHONPATH"] = str(ROOT)
        environ.update(env or {})
        self.process = subprocess.Popen(
            [*TAPEPROXY, self.command, "--port", "0", *args],
            cwd=cwd,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        STARTED.append(self.process)
        assert self.process.stdout is not None
        self.ready = self.process.stdout.readline()
        self.url = self.ready.split(" on ")[-1].strip()

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(sig)
        _, err = self.process.communicate(timeout=30)
        return self.process.returncode, err


def record_in_serve(
    fake: FakeUpstream, tmp_path: Path, path: str, reply: Reply, *options: str
) -> tuple[int, float]:
    """`reply` recorded by `tapeproxy serve` in its own process, into tmp_path/cassettes: the
    bytes its client received, and how far (MB) the server's peak RSS grew meanwhile."""
    fake.script(path, reply)
    cassettes = tmp_path / "cassettes"
    args = ["--mode", "record", "--cassettes", str(cassettes), "--upstream", f"tool={fake.url}"]
    server = Serve([*args, *options], tmp_path)
    try:
        before = peak_rss_mb(server.process.pid)
        with httpx.stream("GET", server.url + "/tool" + path, timeout=60) as response:
            received = sum(len(chunk) for chunk in response.iter_bytes())
        return received, peak_rss_mb(server.process.pid) - before
    finally:
        server.stop()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc")
