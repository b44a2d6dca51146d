"""The head-to-head, driven by wrk: tapeproxy against a bare starlette endpoint serving the same
bytes from memory (the stack's limit) and against Talkback (the peer), in the same run, on
50 distinct recorded chat completions replayed with `--repeat repeat-last`, a 100-frame SSE
stream, and record mode against the fake upstream hit directly; plus the cost of one
durable write on this disk, the floor under every recorded exchange."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.apps import SSE_PATH, stream_model
from bench.context import DIRECT_PATH, DIRTY_S, OPENAI_PATH, Bench, call, chat_body, check
from bench.load import one
from bench.procs import ROOT, BenchError, Server, start, start_app
from bench.wrk import INSTALL_HINT, WrkResult, run_wrk, wrk_path

KEYS = 50
SSE_FRAMES = 100
BODIES = [chat_body(f"bench-json-{i:02d}") for i in range(KEYS)]
SSE_BODY = chat_body(stream_model(SSE_FRAMES, 0), stream=True)
TALKBACK = ROOT / "bench" / "talkback.js"
TALKBACK_MODULE = ROOT / "bench" / ".peers" / "node_modules" / "talkback"
DURABLE_WRITES = 200
CLEANED = Path(tempfile.gettempdir()) / "tapeproxy-bench-cleaned"


@dataclass(frozen=True)
class Metric:
    """One line of the head-to-head: `better` is "higher" or "lower"; `target(contest)` is
    the bound tapeproxy must meet (None: no figure to bound it by)."""

    name: str
    better: str
    target: Callable[[Contest], float | None] | None = None
    target_text: str = ""


@dataclass
class Contest:
    """Figures by metric name and contender: "starlette", "talkback", "tapeproxy", "direct"."""

    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    servers: dict[str, str] = field(default_factory=dict)

    def put(self, metric: str, who: str, value: float | None) -> None:
        if value is not None:
            self.figures.setdefault(metric, {})[who] = value

    def get(self, metric: str, who: str) -> float | None:
        return self.figures.get(metric, {}).get(who)


R1 = "replay req/s, 1 connection"
R32 = "replay req/s, 32 connections"
P50 = "replay p50 ms, 1 connection"
P99 = "replay p99 ms, 32 connections"
SSE = f"SSE replay, {SSE_FRAMES} frames, p50 ms"
ADDED = "record p50 added to direct ms, 1 connection"
REC32 = "record req/s, 32 connections"
DISK50 = "durable write p50 ms (write, fsync, rename, fsync folder)"
DISK99 = "durable write p99 ms"
DIRECT50 = "direct p50 ms, 1 connection"


def _times(metric: str, bound: float) -> Callable[[Contest], float | None]:
    def target(contest: Contest) -> float | None:
        base = contest.get(metric, "starlette")
        return None if base is None else base * bound

    return target


def _talkbacks(bound: float) -> Callable[[Contest], float | None]:
    def target(contest: Contest) -> float | None:
        peer = contest.get(REC32, "talkback")
        return None if peer is None else peer * bound

    return target


# Issue 22's targets: replay as fast as users feel it (and ahead of Talkback, which the
# verdict says on every row); record adds what no provider call would notice.
METRICS = [
    Metric(R1, "higher"),
    Metric(R32, "higher", _times(R32, 0.8), ">= 0.8x starlette"),
    Metric(P50, "lower", _times(P50, 1.5), "<= 1.5x starlette"),
    Metric(P99, "lower", _times(P99, 2.0), "<= 2x starlette"),
    Metric(SSE, "lower", _times(SSE, 1.2), "<= 1.2x starlette"),
    Metric(ADDED, "lower", lambda contest: 3.0, "<= 3 ms"),
    Metric(REC32, "higher", _talkbacks(0.35), ">= 0.35x Talkback"),
    Metric(DISK50, "lower"),
    Metric(DISK99, "lower"),
]


def durable_write_ms(folder: Path, data: bytes, count: int = DURABLE_WRITES) -> list[float]:
    """What one exchange file costs on this disk at the least: each write as tapeproxy's
    `write_atomic` does it (temp file, write, fsync, rename, fsync the folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    took = []
    for i in range(count):
        started = time.perf_counter()
        temp = folder / f".{i}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, folder / f"{i}.json")
        dirfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
        took.append((time.perf_counter() - started) * 1000)
    return took  # the files stay until the run ends: deleting them now would slow what follows


def talkback_ready() -> str:
    """Why Talkback cannot run here, or "" when it can."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not TALKBACK_MODULE.is_dir():
        return "npm `talkback` is not installed in bench/.peers (run `bash bench/setup.sh`)"
    return ""


def start_talkback(workdir: Path, upstream: str, tapes: Path, record: str) -> Server:
    node = shutil.which("node") or "node"
    return start("talkback", [node, str(TALKBACK), upstream, str(tapes), record], workdir)


class HeadToHead:
    """Runs every contender through the same wrk loads; fills a Contest."""

    def __init__(self, bench: Bench, seconds: float) -> None:
        self.bench = bench
        self.seconds = seconds
        self.contest = Contest()

    def wrk(self, url: str, path: str, bodies: list[bytes], conns: int, **kw: str) -> WrkResult:
        try:
            run_wrk(url, path, bodies, conns, 1, kw or None)  # warm-up, not measured
            result = run_wrk(url, path, bodies, conns, self.seconds, kw or None)
        except RuntimeError as exc:
            raise BenchError(str(exc)) from exc
        if result.errors:
            self.contest.notes.append(f"{url}{path} c={conns}: {result.errors} errors")
        return result

    def replay_loads(self, who: str, url: str, json_path: str, sse_path: str) -> None:
        one_conn = self.wrk(url, json_path, BODIES, 1)
        many = self.wrk(url, json_path, BODIES, 32)
        sse = self.wrk(url, sse_path, [SSE_BODY], 1)
        put = self.contest.put
        put(R1, who, one_conn.rate)
        put(P50, who, one_conn.p50_ms)
        put(R32, who, many.rate)
        put(P99, who, many.p99_ms)
        put(SSE, who, sse.p50_ms)

    def record_loads(self, who: str, url: str, path: str, direct_p50: float) -> None:
        one_conn = self.wrk(url, path, BODIES, 1)
        many = self.wrk(url, path, BODIES, 32)
        self.contest.put(ADDED, who, one_conn.p50_ms - direct_p50)
        self.contest.put(REC32, who, many.rate)


async def record_library(bench: Bench, url: str, path: str, what: str) -> None:
    """One request per body through a recording proxy at `url`."""
    for body in [*BODIES, SSE_BODY]:
        check(await one(call(url, body, path=path)), f"recording through {what}")


async def head_to_head(bench: Bench, seconds: float) -> Contest:
    game = HeadToHead(bench, seconds)
    contest = game.contest
    if wrk_path() is None:
        contest.notes.append(f"SKIPPED: wrk is not installed; {INSTALL_HINT}")
        return contest
    work = bench.workdir / "h2h"
    library = work / "tapeproxy"

    baseline = start_app("baseline", bench.workdir)
    try:
        contest.servers["starlette"] = baseline.log_tail(3)
        game.replay_loads("starlette", baseline.url, DIRECT_PATH, SSE_PATH)
    finally:
        baseline.stop()

    upstream = f"openai={bench.fake_url}"
    with bench.tapeproxy(
        "h2h-record", "--mode", "record", "--cassettes", str(library), "--upstream", upstream
    ) as server:
        await record_library(bench, server.url, OPENAI_PATH, "tapeproxy")
    with bench.tapeproxy(
        "h2h-replay", "--mode", "replay", "--cassettes", str(library), "--repeat", "repeat-last"
    ) as server:
        game.replay_loads("tapeproxy", server.url, OPENAI_PATH, OPENAI_PATH)

    why_not = talkback_ready()
    if not why_not:
        try:
            await talkback_replay(game, work / "tapes")
        except BenchError as exc:
            why_not = f"it failed: {exc}"
    if why_not:
        contest.notes.append(f"Talkback skipped: {why_not}")

    # Right before the record loads, in the state they meet: making a file costs 10x more on
    # a disk that just deleted many (an ext4 without a journal; bench/RESULTS.md, stop 13).
    settle(contest, bench.settle_s)
    disk_floor(contest, work)
    direct = game.wrk(bench.fake_url, DIRECT_PATH, BODIES, 1)
    contest.put(DIRECT50, "direct", direct.p50_ms)
    with bench.tapeproxy(
        "h2h-record-load",
        "--mode",
        "record",
        "--cassettes",
        str(work / "load"),
        "--upstream",
        upstream,
    ) as server:
        game.record_loads("tapeproxy", server.url, OPENAI_PATH, direct.p50_ms)
    if not why_not:
        recorder = start_talkback(bench.workdir, bench.fake_url, work / "tapes-load", "OVERWRITE")
        try:
            game.record_loads("talkback", recorder.url, DIRECT_PATH, direct.p50_ms)
        finally:
            recorder.stop()
    # `work` goes with the run's folder at its end: deleted now, its thousands of files
    # would slow every file the scenarios after it make (context.SETTLE_S).
    return contest


def mark_cleaned() -> None:
    """The run's files are deleted now: the next run's record loads wait for them to settle."""
    with contextlib.suppress(OSError):  # only a wait is lost
        temp = CLEANED.with_name(f"{CLEANED.name}.{os.getpid()}")
        temp.write_text(f"{time.time():.3f}\n")
        os.replace(temp, CLEANED)  # whole: a run starting meanwhile reads it whole


def settle(contest: Contest, settle_s: float) -> None:
    """Wait out the rest of `settle_s` since the previous run deleted its files, if it did,
    and note how long ago that was when ext4 may still step over them (RECENTCY_DIRTY)."""
    try:
        cleaned = float(CLEANED.read_text())
    except (OSError, ValueError):
        return
    if not math.isfinite(cleaned):
        return
    age = max(time.time() - cleaned, 0.0)  # in the future (a clock set back): as if just now
    wait = settle_s - age
    if wait > 0:
        print(
            f"waiting {wait:.0f} s for the files the previous run deleted to settle "
            "(bench/README.md)",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(wait)
        age += wait
    if age < DIRTY_S:
        contest.notes.append(
            f"the previous run deleted its files {age:.0f} s before the record loads: ext4 "
            f"without a journal may step over them for up to {DIRTY_S:.0f} s (--settle)"
        )


def disk_floor(contest: Contest, work: Path) -> None:
    """The cost of one durable write on the disk of `work`: what recording does per exchange."""
    writes = durable_write_ms(work / "durable", b"x" * 3000)
    contest.put(DISK50, "disk", statistics.median(writes))
    contest.put(DISK99, "disk", sorted(writes)[int(len(writes) * 0.99) - 1])


async def talkback_replay(game: HeadToHead, tapes: Path) -> None:
    """Record the library through Talkback (`NEW`), then replay it (`DISABLED`)."""
    bench = game.bench
    recorder = start_talkback(bench.workdir, bench.fake_url, tapes, "NEW")
    try:
        await record_library(bench, recorder.url, DIRECT_PATH, "talkback")
    finally:
        recorder.stop()
    player = start_talkback(bench.workdir, bench.fake_url, tapes, "DISABLED")
    try:
        game.replay_loads("talkback", player.url, DIRECT_PATH, DIRECT_PATH)
    finally:
        player.stop()


def verdicts(contest: Contest) -> list[tuple[Metric, float | None, float | None, str]]:
    """Per metric: tapeproxy / starlette, tapeproxy / Talkback, and whether the target is met."""
    out = []
    for metric in METRICS:
        ours = contest.get(metric.name, "tapeproxy")
        base = contest.get(metric.name, "starlette")
        peer = contest.get(metric.name, "talkback")
        verdict = ""
        if metric.target is not None and ours is not None:
            bound = metric.target(contest)
            if bound is not None:
                met = ours >= bound if metric.better == "higher" else ours <= bound
                verdict = "met" if met else "MISSED"
        if peer is not None and ours is not None:
            beats = ours >= peer if metric.better == "higher" else ours <= peer
            verdict += ("; " if verdict else "") + (
                "beats Talkback" if beats else "LOSES to Talkback"
            )
        out.append((metric, _ratio(ours, base), _ratio(ours, peer), verdict))
    return out


def _ratio(ours: float | None, other: float | None) -> float | None:
    return None if ours is None or not other else ours / other


def as_json(contest: Contest) -> dict[str, object]:
    return {"figures": contest.figures, "notes": contest.notes}


def dumps(contest: Contest) -> str:
    return json.dumps(as_json(contest), indent=2)


def _cell(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def render_contest(contest: Contest, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in ["metric", "starlette", "Talkback", "tapeproxy", "x starlette", "x Talkback"]:
        table.add_column(name, justify="left" if name == "metric" else "right")
    table.add_column("target")
    table.add_column("verdict")
    for metric, vs_base, vs_peer, verdict in verdicts(contest):
        if metric.name in (DISK50, DISK99):
            continue
        digits = 0 if "req/s" in metric.name else 2
        table.add_row(
            metric.name,
            _cell(contest.get(metric.name, "starlette"), digits),
            _cell(contest.get(metric.name, "talkback"), digits),
            _cell(contest.get(metric.name, "tapeproxy"), digits),
            _cell(vs_base),
            _cell(vs_peer),
            metric.target_text,
            verdict,
            style="bold red" if "MISSED" in verdict or "LOSES" in verdict else None,
        )
    console = Console(width=200)
    console.print(table)
    disk50, disk99 = contest.get(DISK50, "disk"), contest.get(DISK99, "disk")
    if disk50 is not None:
        console.print(
            f"one durable write on this disk (write, fsync, rename, fsync folder): "
            f"p50 {disk50:.2f} ms, p99 {_cell(disk99)} ms; "
            f"upstream direct p50 {_cell(contest.get(DIRECT50, 'direct'))} ms"
        )
    for note in contest.notes:
        console.print(f"note: {note}")
