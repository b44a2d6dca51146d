"""Server subprocesses: start one and wait for its ready line, read its memory from /proc,
stop it with SIGTERM (bounded), and report how it exited."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = Path(__file__).resolve().parent / "apps.py"
READY = "ready on "


class BenchError(Exception):
    """The benchmark cannot go on: a server did not start, or answered wrongly."""


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    startup_s: float
    log: Path
    exit_code: int | None = None
    stop_s: float | None = None
    output: list[bytes] = field(default_factory=list)
    drain: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def memory_mb(self) -> tuple[float | None, float | None]:
        """(current RSS, peak RSS) in MB from /proc/PID/status, of the server and its child
        processes together; None where unreadable. The peak is the sum
        of each process's own peak: at most that, at once."""
        now = peak = None
        for pid in [self.pid, *_children(self.pid)]:
            values = _memory(pid)
            if "VmRSS" in values:
                now = (now or 0.0) + values["VmRSS"]
            if "VmHWM" in values:
                peak = (peak or 0.0) + values["VmHWM"]
        return now, peak

    def pss_mb(self) -> float | None:
        """The proportional set size now, in MB, of the server and its children together:
        pages they share (the interpreter, its libraries) counted once between them, which
        a sum of RSS counts in each. None where unreadable."""
        total = None
        for pid in [self.pid, *_children(self.pid)]:
            try:
                rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            except OSError:
                continue
            for line in rollup:
                if line.startswith("Pss:"):
                    total = (total or 0.0) + int(line.split()[1]) / 1024
        return total

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait up to `timeout`, then SIGKILL. The exit code (negative: a signal)."""
        if self.exit_code is not None:
            return self.exit_code
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.stop_s = time.monotonic() - started
        self.exit_code = self.process.returncode
        if self.drain is not None:
            self.drain.join(timeout=5)  # the pipe hits EOF once the process is gone
        if self.process.stdout is not None and not (self.drain and self.drain.is_alive()):
            self.process.stdout.close()
        return self.exit_code


def clean_env() -> dict[str, str]:
    """The environment minus TAPEPROXY_* (a developer's settings must not leak into the run)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}


def start(name: str, argv: list[str], workdir: Path, timeout: float = 60.0) -> Server:
    """Start `argv` in `workdir`, stderr to a log file, and wait for `... ready on URL`."""
    fd, path = tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log", dir=workdir)
    os.close(fd)
    log = Path(path)
    started = time.monotonic()
    with log.open("wb") as err:
        process = subprocess.Popen(
            argv, cwd=workdir, stdout=subprocess.PIPE, stderr=err, env=clean_env()
        )
    server = Server(name, process, "", 0.0, log)
    try:
        line = _ready_line(process, started + timeout)
    except BaseException:  # Ctrl-C while waiting: never leave the process behind
        server.stop(timeout=5)
        raise
    server.startup_s = time.monotonic() - started
    if line is None:
        server.stop(timeout=5)
        raise BenchError(
            f"{name} printed no ready line (exit code {server.exit_code}, after "
            f"{server.startup_s:.1f} s, limit {timeout:.0f} s); its log:\n{server.log_tail()}"
        )
    server.url = line.split(READY, 1)[1].strip()
    server.drain = threading.Thread(target=_drain, args=(process, server.output), daemon=True)
    server.drain.start()
    return server


def _ready_line(process: subprocess.Popen[bytes], deadline: float) -> str | None:
    if process.stdout is None:
        return None
    fd = process.stdout.fileno()
    buffer = b""
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not readable:
            if process.poll() is not None:
                return None
            continue
        data = os.read(fd, 4096)
        if not data:
            return None
        buffer += data
        for raw in buffer.split(b"\n")[:-1]:
            text = raw.decode(errors="replace")
            if READY in text:
                return text
    return None


def _drain(process: subprocess.Popen[bytes], sink: list[bytes]) -> None:
    """Keep reading stdout so a chatty server never blocks on a full pipe."""
    stdout = process.stdout
    if stdout is None:
        return
    try:
        while data := os.read(stdout.fileno(), 4096):
            sink.append(data)
    except (OSError, ValueError):
        pass


def start_app(name: str, workdir: Path) -> Server:
    return start(name, [sys.executable, str(APPS), name], workdir)


def start_tapeproxy(name: str, workdir: Path, *options: str) -> Server:
    """tapeproxy as a user runs it: the default log level (one INFO line per exchange),
    its stderr going to a file."""
    argv = [
        sys.executable,
        "-m",
        "tapeproxy",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        *options,
    ]
    return start(name, argv, workdir)


def _memory(pid: int) -> dict[str, float]:
    values: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return values


def _children(pid: int) -> list[int]:
    """A process's children: each is listed under the thread that started it."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found
