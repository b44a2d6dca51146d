"""WebSocket replay against a bare starlette WebSocket endpoint: one recorded Realtime
session of 2,000 server frames replayed by `tapeproxy serve --mode replay` (timing `none`),
and the same 2,000 frames sent from memory by starlette on uvicorn (the same
`websockets-sansio` protocol); each timed from the client's first frame to the last server
frame, the median of the rounds. Target: replay <= 1.2x starlette. With `--record`,
recording's targets too (bench/sockets_record.py): the cost per relayed frame, the first
server frame's delay, peak RSS, and replay timing `recorded` against the recorded offsets.

    .venv/bin/python bench/sockets.py [--frames 2000] [--rounds 15] [--record]
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
from bench.sockets_record import paced, recording, serve_argv, stamp

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
            WebSocketRoute("/openai/v1/stamp", stamp),
            WebSocketRoute("/openai/v1/paced", paced),
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
