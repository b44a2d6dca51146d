"""Recording's WebSocket targets (`bench/sockets.py --record`): the cost per relayed frame,
the first server frame's delay, peak RSS for a long session, and replay timing `recorded`
against the recorded offsets; with the upstream routes these measure (`stamp`, `paced`)."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from starlette.websockets import WebSocket
from websockets.asyncio.client import connect

from bench.procs import Server, start

SOCKETS = Path(__file__).resolve().with_name("sockets.py")
ASK = json.dumps({"type": "response.create"})
SESSIONS = 100  # new sessions per side for the first frame's delay
TURNS = 2  # client frames in the paced session, each followed by len(PACE) server frames
REPLAYS = 2  # rounds of the paced session replayed


def pace() -> list[int]:
    """Each server frame's time in ms after the client's frame: 40 frames 25 ms apart,
    with a pause of 200 ms before the 11th, 21st and 31st (a voice turn's silences)."""
    at, out = 0, []
    for n in range(40):
        at += 200 if n in (10, 20, 30) else 25
        out.append(at)
    return out


PACE = pace()


async def stamp(ws: WebSocket) -> None:
    """Upstream: each client frame answered by one event stamped with its send time
    (CLOCK_MONOTONIC, system-wide on Linux, so the client's clock reads the same)."""
    await ws.accept()
    while True:
        await ws.receive_text()
        await ws.send_text(json.dumps({"type": "session.created", "sent_ns": time.monotonic_ns()}))


async def paced(ws: WebSocket) -> None:
    """Upstream: each client frame answered by deltas at PACE's times after it."""
    await ws.accept()
    loop = asyncio.get_running_loop()
    while True:
        await ws.receive_text()
        began = loop.time()
        for n, ms in enumerate(PACE):
            await asyncio.sleep(max(0.0, began + ms / 1000 - loop.time()))
            await ws.send_text(json.dumps({"type": "response.output_audio.delta", "n": n}))


def serve_argv(workdir: Path, mode: str, upstream: str, cassettes: str = "cassettes") -> list[str]:
    return [
        sys.executable, "-m", "tapeproxy", "serve", "--port", "0", "--mode", mode,
        "--cassettes", str(workdir / cassettes), "--upstream", f"openai={upstream}",
        "--repeat", "repeat-last",  # every round replays the one recording
    ]  # fmt: skip


def ws_url(url: str, path: str) -> str:
    return url.replace("http://", "ws://") + "/openai/v1/" + path


async def round_trips(url: str, count: int) -> list[float]:
    """Seconds for each of `count` frames to come back from the echo route, one at a time."""
    took = []
    async with connect(ws_url(url, "echo")) as ws:
        for n in range(count):
            began = time.perf_counter()
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "n": n}))
            await ws.recv()
            took.append(time.perf_counter() - began)
    return took


async def long_session(url: str, frames: int) -> None:
    async with connect(ws_url(url, "audio"), max_size=None) as ws:
        await ws.send(str(frames))
        while await ws.recv() != "done":
            pass


async def first_frame(url: str) -> float:
    """ms from the upstream's send of a new session's first server frame to its arrival."""
    async with connect(ws_url(url, "stamp")) as ws:
        await ws.send(ASK)
        event = await ws.recv()
        arrived = time.monotonic_ns()
    return float(arrived - json.loads(event)["sent_ns"]) / 1e6


async def first_frames(direct: str, ours: str) -> tuple[list[float], list[float]]:
    """SESSIONS new sessions to each, in turns (a noisy box slows both alike)."""
    await first_frame(direct)  # warm-ups, unmeasured
    await first_frame(ours)
    took: tuple[list[float], list[float]] = ([], [])
    for _ in range(SESSIONS):
        took[0].append(await first_frame(direct))
        took[1].append(await first_frame(ours))
    return took


async def paced_session(url: str) -> list[list[float]]:
    """Per turn, each server frame's arrival in ms after the client's frame."""
    turns = []
    async with connect(ws_url(url, "paced")) as ws:
        for turn in range(TURNS):
            sent = time.monotonic_ns()
            await ws.send(json.dumps({"type": "response.create", "turn": turn}))
            arrived = []
            for _ in PACE:
                await ws.recv()
                arrived.append((time.monotonic_ns() - sent) / 1e6)
            turns.append(arrived)
    return turns


def recorded_offsets(cassettes: Path) -> list[list[int]]:
    """Per client frame of the one recorded session, the offsets in ms of the server frames
    that followed it, counted from it (replay is causal: it waits from the client's frame)."""
    (path,) = [p for p in cassettes.rglob("*.json") if '"frames"' in p.read_text()]
    frames: list[dict[str, Any]] = json.loads(path.read_text())["session"]["frames"]
    turns: list[list[int]] = []
    began = 0
    for frame in frames:
        if frame["direction"] == "client":
            began = frame["ms"]
            turns.append([])
        elif turns:
            turns[-1].append(frame["ms"] - began)
    return turns


def timing(workdir: Path, upstream: Server) -> list[list[float]]:
    """The paced session recorded once, then replayed REPLAYS times with timing `recorded`:
    per turn replayed, |arrival offset - recorded offset| in ms for each server frame."""
    argv = serve_argv(workdir, "record", upstream.url + "/openai", "paced")
    recorder = start("record-paced", argv, workdir)
    try:
        asyncio.run(paced_session(recorder.url))
    finally:
        recorder.stop()  # the session is written when it ends, at the latest on shutdown
    recorded = recorded_offsets(workdir / "paced")
    argv = serve_argv(workdir, "replay", "http://127.0.0.1:9", "paced")
    replay = start("replay-paced", [*argv, "--replay-timing", "recorded"], workdir)
    errors = []
    try:
        for _ in range(REPLAYS):
            arrived = asyncio.run(paced_session(replay.url))
            for want, got in zip(recorded, arrived, strict=True):
                errors.append([abs(g - w) for w, g in zip(want, got, strict=True)])
    finally:
        replay.stop()
    return errors


def recording(workdir: Path, frames: int) -> None:
    """Recording's cost per relayed frame (p50 round trip through `--mode record` against
    the upstream directly), the first server frame's delay, and peak RSS while recording a
    session of `frames` 100 KB frames; then replay timing `recorded`."""
    upstream = start("upstream", [sys.executable, str(SOCKETS), "baseline"], workdir)
    try:
        recorder = start("record", serve_argv(workdir, "record", upstream.url + "/openai"), workdir)
        try:
            direct = statistics.median(asyncio.run(round_trips(upstream.url, 1000)))
            ours = statistics.median(asyncio.run(round_trips(recorder.url, 1000)))
            first = asyncio.run(first_frames(upstream.url, recorder.url))
            asyncio.run(long_session(recorder.url, frames))
            _, peak = recorder.memory_mb()
        finally:
            recorder.stop()
        errors = timing(workdir, upstream)
    finally:
        upstream.stop()
    report(direct, ours, first, frames, peak)
    report_timing(errors)


def report(
    direct: float, ours: float, first: tuple[list[float], list[float]], frames: int,
    peak: float | None,
) -> None:  # fmt: skip
    added = (ours - direct) * 1000
    print(f"recording, 1,000 frames one at a time: direct p50 {direct * 1000:.3f} ms, through")
    print(f"  tapeproxy {ours * 1000:.3f} ms: {added:.3f} ms added (target <= 1 ms): "
          f"{'met' if added <= 1 else 'NOT met'}")  # fmt: skip
    bare, late = statistics.median(first[0]), statistics.median(first[1])
    print(f"recording, a new session's first server frame ({SESSIONS} sessions), p50 after")
    print(f"  the upstream sent it: direct {bare:.3f} ms, through tapeproxy {late:.3f} ms "
          f"(target <= 3 ms): {'met' if late <= 3 else 'NOT met'}")  # fmt: skip
    size = frames * 100_000 / 1e6
    print(f"recording a {size:.0f} MB session: peak RSS {peak or 0:.0f} MB (target <= 120 MB): "
          f"{'met' if peak is not None and peak <= 120 else 'NOT met'}")  # fmt: skip


def report_timing(turns: list[list[float]]) -> None:
    errors = [e for turn in turns for e in turn]
    worst, p95 = max(errors), statistics.quantiles(errors, n=20)[18]
    print(f"replay timing `recorded`, {len(errors)} server frames ({REPLAYS} rounds of "
          f"{TURNS} turns x {len(PACE)} frames, 25 ms apart, pauses of 200 ms):")  # fmt: skip
    print(f"  |arrival - recorded offset| p95 {p95:.2f} ms, max {worst:.2f} ms "
          f"(target <= 10 ms): {'met' if worst <= 10 else 'NOT met'}")  # fmt: skip
    # Where along a turn: a drift that grows frame by frame shows as first << last.
    first = statistics.median(turn[0] for turn in turns)
    last = statistics.median(turn[-1] for turn in turns)
    print(f"  median over the turns: {first:.2f} ms at a turn's first frame, {last:.2f} ms "
          f"at its last")  # fmt: skip
