"""What every scenario shares: the budget, the requests, the run's rows and baselines, and
tapeproxy servers that are always stopped and checked for a clean SIGTERM exit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.apps import stream_model
from bench.load import Call, Reply
from bench.procs import BenchError, Server, start_tapeproxy
from bench.report import Row, ratio

OPENAI_PATH = "/openai/v1/chat/completions"
DIRECT_PATH = "/v1/chat/completions"
SLOW_SHUTDOWN_S = 3.0
# An ext4 without a journal of its own (this machine's disk) steps over every inode freed in
# the last 60 s when it makes a file (RECENTCY_MIN in fs/ext4/ialloc.c), 360 s while the
# inode's table block is dirty (the next run's own files make it so): a run right after
# another meets the first one's clean-up. The record loads wait SETTLE_S after it (peers.py).
SETTLE_S = 60.0
DIRTY_S = 360.0


@dataclass(frozen=True)
class Budget:
    """How much each scenario does; every load row is also capped at `cap_s` seconds."""

    count: int  # requests per throughput row (at `concurrency`)
    latency_count: int  # requests per latency row (concurrency 1)
    stream_count: int  # requests per replayed-stream row
    slow_count: int  # requests per row of 20 ms-paced streams
    record_count: int  # requests of the record-mode row (one fsync'd file each)
    warmup: int
    cap_s: float
    timing_reps: int
    library_size: int
    concurrency: int = 8


FULL = Budget(
    count=2000,
    latency_count=1000,
    stream_count=500,
    slow_count=100,
    record_count=200,
    warmup=100,
    cap_s=30.0,
    timing_reps=5,
    library_size=100_000,
)
QUICK = Budget(
    count=300,
    latency_count=300,
    stream_count=150,
    slow_count=25,
    record_count=50,
    warmup=30,
    cap_s=6.0,
    timing_reps=2,
    library_size=100_000,
)


def chat_body(model: str, stream: bool = False) -> bytes:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello"}],
    }
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


JSON_BODY = chat_body("bench-json")
SSE_BODY = chat_body(stream_model(50, 0), stream=True)  # scenario 3: 50 frames, no pause
PACED_BODY = chat_body(stream_model(10, 20), stream=True)  # scenario 4: 20 ms between frames
TIMED_BODY = chat_body(stream_model(10, 50), stream=True)  # scenario 6: 50 ms between frames


def call(base: str, body: bytes, *headers: tuple[str, str], path: str = OPENAI_PATH) -> Call:
    return Call(base + path, body, (("content-type", "application/json"), *headers))


@dataclass
class Recording:
    """The exchange files tapeproxy wrote while recording, by scenario."""

    library: Path
    files: dict[str, Path]


@dataclass
class Bench:
    budget: Budget
    workdir: Path
    library_dir: Path | None = None  # where the big library goes; None: see library_parent()
    fake_url: str = ""
    settle_s: float = SETTLE_S  # waited after a previous run's clean-up before record
    rows: list[Row] = field(default_factory=list)
    baseline: dict[str, float] = field(default_factory=dict)  # "c1", "c8", "startup" (ms)
    direct: dict[str, float] = field(default_factory=dict)  # the fake hit directly (ms)
    replay: dict[str, float] = field(default_factory=dict)  # small-cassette replay (ms)
    exits: list[tuple[str, int, float]] = field(default_factory=list)

    def base(self, concurrency: int) -> float | None:
        return self.baseline.get(f"c{concurrency}")

    def add(self, row: Row, server: Server | None = None) -> Row:
        if server is not None:
            row.rss_mb = server.memory_mb()[1]
            row.pss_mb = server.pss_mb()
        self.rows.append(row)
        return row

    @contextmanager
    def tapeproxy(self, name: str, *options: str) -> Iterator[Server]:
        """A running `tapeproxy serve`, stopped with SIGTERM at the end; a warning row if it
        does not exit 0 or takes long to."""
        server = start_tapeproxy(name, self.workdir, *options)
        try:
            yield server
        finally:
            code = server.stop()
            took = server.stop_s or 0.0
            self.exits.append((name, code, took))
            if code != 0:
                tail = server.log_tail(5).replace("\n", " | ")
                self.add(
                    Row(
                        f"WARNING: tapeproxy {name}",
                        note=(
                            f"exited with {code} on SIGTERM (want 0) after {took:.1f} s; "
                            f"log: {tail}"
                        ),
                        warning=True,
                    )
                )
            elif took > SLOW_SHUTDOWN_S:
                self.add(
                    Row(
                        f"WARNING: tapeproxy {name}",
                        note=(f"took {took:.1f} s to exit on SIGTERM"),
                        warning=True,
                    )
                )


def check(reply: Reply, what: str) -> Reply:
    if reply.status != 200:
        raise BenchError(f"{what}: status {reply.status}: {reply.body[:500]!r}")
    return reply


def startup_row(scenario: str, seconds: float, bench: Bench) -> Row:
    ms = seconds * 1000
    return Row(
        scenario,
        requests=1,
        p50_ms=ms,
        ratio=ratio(ms, bench.baseline.get("startup")),
        note="process start to ready line; ratio vs the baseline's start-up",
    )


def first_row(scenario: str, reply: Reply, bench: Bench, note: str) -> Row:
    total = reply.total_s * 1000
    return Row(
        scenario,
        requests=1,
        concurrency=1,
        p50_ms=total,
        ratio=ratio(total, bench.base(1)),
        note=note,
    )
