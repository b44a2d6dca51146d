"""WebSocket replay against a bare starlette WebSocket endpoint: one recorded Realtime
session of 2,000 server frames replayed by `tapeproxy serve --mode replay` (timing `none`),
and the same 2,000 frames sent from memory by starlette on uvicorn (the same
`websockets-sansio` protocol); each timed from the client's first frame to the last server
frame, the median of the rounds. Target: replay <= 1.2x starlette.

    .venv/bin/python bench/sockets.py [--frames 2000] [--rounds 15]
    .venv/bin/python bench/sockets.py baseline     # the starlette endpoint alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import Server, start

ROUTE = "/openai/v1/realtime?model=gpt-realtime"
ASK = json.dumps({"type": "response.create"})
TARGET = 1.2


def frames(count: int) -> list[str]:
    """Realtime audio-ish deltas, as the upstream sends them (compact JSON)."""
    return [
        json.dumps(
            {
                "type": "response.output_text.delta",
                "event_id": f"event_{n}",
                "response_id": "resp_1",
                "delta": f"word {n} " * 8,
            },
            separators=(",", ":"),
        )
        for n in range(count)
    ]


def run_baseline(count: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    sent = frames(count)

    async def session(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            await ws.receive_text()
            for frame in sent:
                await ws.send_text(frame)

    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            await ws.send_text(await ws.receive_text())

    async def audio(ws: WebSocket) -> None:
        """Asked `N`: N audio deltas of 100 KB, as a long voice session sends."""
        await ws.accept()
        delta = json.dumps({"type": "response.output_audio.delta", "delta": "A" * 100_000})
        while True:
            for _ in range(int(await ws.receive_text())):
                await ws.send_text(delta)
            await ws.send_text("done")

    app = Starlette(
        routes=[
            WebSocketRoute("/openai/v1/realtime", session),
            WebSocketRoute("/openai/v1/echo", echo),
            WebSocketRoute("/openai/v1/audio", audio),
        ]
    )

    class ReadyServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"baseline ready on http://127.0.0.1:{port}", flush=True)

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", ws="websockets-sansio"
    )
    ReadyServer(config).run()


async def one_session(url: str, count: int) -> float:
    """Seconds from the client's frame to the last of `count` server frames."""
    async with connect(url.replace("http://", "ws://") + ROUTE, max_size=None) as ws:
        began = time.perf_counter()
        await ws.send(ASK)
        for _ in range(count):
            await ws.recv()
        return time.perf_counter() - began


def record(workdir: Path, count: int) -> None:
    """The 2,000-frame session recorded by tapeproxy from the baseline as its upstream."""
    upstream = start(
        "upstream", [sys.executable, __file__, "baseline", "--frames", str(count)], workdir
    )
    try:
        recorder = start("record", serve_argv(workdir, "record", upstream.url + "/openai"), workdir)
        try:
            asyncio.run(one_session(recorder.url, count))
        finally:
            recorder.stop()
    finally:
        upstream.stop()


def serve_argv(workdir: Path, mode: str, upstream: str) -> list[str]:
    return [
        sys.executable, "-m", "tapeproxy", "serve", "--port", "0", "--mode", mode,
        "--cassettes", str(workdir / "cassettes"), "--upstream", f"openai={upstream}",
        "--repeat", "repeat-last",  # every round replays the one recording
    ]  # fmt: skip


async def round_trips(url: str, count: int) -> list[float]:
    """Seconds for each of `count` frames to come back from the echo route, one at a time."""
    took = []
    async with connect(url.replace("http://", "ws://") + "/openai/v1/echo") as ws:
        for n in range(count):
            began = time.perf_counter()
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "n": n}))
            await ws.recv()
            took.append(time.perf_counter() - began)
    return took


async def long_session(url: str, frames: int) -> None:
    async with connect(url.replace("http://", "ws://") + "/openai/v1/audio", max_size=None) as ws:
        await ws.send(str(frames))
        while await ws.recv() != "done":
            pass


def recording(workdir: Path, frames: int) -> None:
    """Recording's cost per relayed frame (p50 round trip through `--mode record` against
    the upstream directly), and peak RSS while recording a session of `frames` 100 KB
    frames. Targets: <= 1 ms added; <= 120 MB for a 50 MB session."""
    upstream = start("upstream", [sys.executable, __file__, "baseline"], workdir)
    recorder = start("record", serve_argv(workdir, "record", upstream.url + "/openai"), workdir)
    try:
        direct = statistics.median(asyncio.run(round_trips(upstream.url, 1000)))
        ours = statistics.median(asyncio.run(round_trips(recorder.url, 1000)))
        asyncio.run(long_session(recorder.url, frames))
        _, peak = recorder.memory_mb()
    finally:
        recorder.stop()
        upstream.stop()
    added = (ours - direct) * 1000
    print(f"recording, 1,000 frames one at a time: direct p50 {direct * 1000:.3f} ms, through")
    print(f"  tapeproxy {ours * 1000:.3f} ms: {added:.3f} ms added (target <= 1 ms): "
          f"{'met' if added <= 1 else 'NOT met'}")  # fmt: skip
    size = frames * 100_000 / 1e6
    print(f"recording a {size:.0f} MB session: peak RSS {peak or 0:.0f} MB (target <= 120 MB): "
          f"{'met' if peak is not None and peak <= 120 else 'NOT met'}")  # fmt: skip


def timed(servers: tuple[Server, Server], count: int, rounds: int) -> tuple[float, float]:
    """The median of each server's rounds, taken in turns (a noisy box slows both alike)."""
    for server in servers:
        asyncio.run(one_session(server.url, count))  # warm-up, unmeasured
    took: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for server, times in zip(servers, took, strict=True):
            times.append(asyncio.run(one_session(server.url, count)))
    return statistics.median(took[0]), statistics.median(took[1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="compare", choices=["compare", "baseline"])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--record", action="store_true", help="recording's targets too")
    args = parser.parse_args(argv)
    if args.what == "baseline":
        run_baseline(args.frames)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        workdir = Path(tmp)
        record(workdir, args.frames)
        baseline = start(
            "baseline",
            [sys.executable, __file__, "baseline", "--frames", str(args.frames)],
            workdir,
        )
        replay = start("replay", serve_argv(workdir, "replay", "http://127.0.0.1:9"), workdir)
        try:
            bare, ours = timed((baseline, replay), args.frames, args.rounds)
        finally:
            baseline.stop()
            replay.stop()
        if args.record:
            recording(workdir, 500)
    ratio = ours / bare
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"{args.frames}-frame session, median of {args.rounds}:")
    print(f"  starlette (frames from memory): {bare * 1000:8.1f} ms")
    print(f"  tapeproxy replay (timing none): {ours * 1000:8.1f} ms")
    print(f"  ratio {ratio:.2f}x (target <= {TARGET}x): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
