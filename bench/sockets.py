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

    app = Starlette(routes=[WebSocketRoute("/openai/v1/realtime", session)])

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


def timed(server: Server, count: int, rounds: int) -> float:
    asyncio.run(one_session(server.url, count))  # warm-up, unmeasured
    return statistics.median(asyncio.run(one_session(server.url, count)) for _ in range(rounds))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="compare", choices=["compare", "baseline"])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
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
            bare, ours = (
                timed(baseline, args.frames, args.rounds),
                timed(replay, args.frames, args.rounds),
            )
        finally:
            baseline.stop()
            replay.stop()
    ratio = ours / bare
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"{args.frames}-frame session, median of {args.rounds}:")
    print(f"  starlette (frames from memory): {bare * 1000:8.1f} ms")
    print(f"  tapeproxy replay (timing none): {ours * 1000:8.1f} ms")
    print(f"  ratio {ratio:.2f}x (target <= {TARGET}x): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
