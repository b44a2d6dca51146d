"""Recording large answers: while tapeproxy records (and commits) an answer of N MB, how long
does `/__tapeproxy/health` take, and how far does tapeproxy's RSS grow? Targets (issue 11):
health under 100 ms throughout, RSS bounded whatever the answer's size.

    .venv/bin/python bench/commit.py [--sizes 60,500] [--kinds json,sse] [--mode passthrough]

Everything on 127.0.0.1: an in-process upstream makes each answer piece by piece (bounded
memory), tapeproxy runs as a subprocess in record mode with --max-record above the largest
size, and a probe asks for health every 10 ms. Stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import Server, start_tapeproxy

PIECE = 256 * 1024


def json_piece(index: int) -> bytes:
    row = json.dumps({"index": index, "embedding": [0.125] * 60})
    return (row + ",\n").encode() * max(1, PIECE // (len(row) + 2))


def sse_piece(index: int) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": f"word {index} "}}]}
    frame = f"data: {json.dumps(chunk)}\n\n".encode()
    return frame * max(1, PIECE // len(frame))


async def big(request: web.Request) -> web.StreamResponse:
    """`?mb=N&kind=json|sse`: an answer of about N MB, made as it is sent."""
    size = int(float(request.query["mb"]) * 1024 * 1024)
    kind = request.query.get("kind", "json")
    sse = kind == "sse"
    content_type = "text/event-stream" if sse else "application/json"
    response = web.StreamResponse(headers={"content-type": content_type})
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent, index = 0, 0
    if not sse:
        await response.write(b'{"data": [\n')
    while sent < size:
        piece = sse_piece(index) if sse else json_piece(index)
        await response.write(piece)
        sent += len(piece)
        index += 1
    last = b"data: [DONE]\n\n" if sse else b'{"index": -1}\n], "usage": {}}\n'
    await response.write(last)
    await response.write_eof()
    return response


async def start_upstream() -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/v1/big", big)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def probe(
    session: aiohttp.ClientSession, url: str, server: Server, out: dict[str, float]
) -> None:
    """Health every 10 ms until cancelled: the slowest answer, and tapeproxy's peak RSS."""
    while True:
        started = time.perf_counter()
        async with session.get(url + "/__tapeproxy/health") as response:
            await response.read()
        took = (time.perf_counter() - started) * 1000
        if took > out.get("health_max_ms", 0.0):
            out["health_max_ms"] = took
            out["health_max_at"] = started
        rss, _ = server.memory_mb()
        out["rss_peak_mb"] = max(out.get("rss_peak_mb", 0.0), rss or 0.0)
        await asyncio.sleep(0.01)


async def one(url: str, upstream: str, server: Server, mb: float, kind: str) -> dict[str, float]:
    out: dict[str, float] = {}
    rss_before, _ = server.memory_mb()
    # A second probe in its own process (curl): this process also plays the upstream, and
    # its own event loop must not be what the figure measures.
    loop_probe = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        f'while :; do curl -s -o /dev/null -w "%{{time_total}}\\n" {url}/__tapeproxy/health; '
        "sleep 0.01; done",
        stdout=asyncio.subprocess.PIPE,
    )
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        watcher = asyncio.create_task(probe(session, url, server, out))
        started = time.perf_counter()
        body = {"model": "big", "stream": kind == "sse", "n": time.time()}
        received = 0
        async with session.post(f"{url}/up/v1/big?mb={mb}&kind={kind}", json=body) as response:
            async for chunk in response.content.iter_chunked(PIECE):
                received += len(chunk)
                if not received - len(chunk):
                    out["first_byte_s"] = time.perf_counter() - started
        out["seconds"] = time.perf_counter() - started
        await asyncio.sleep(0.05)
        loop_probe.terminate()
        lines = (await loop_probe.communicate())[0].decode().split()
        out["curl_health_max_ms"] = max((float(x) * 1000 for x in lines), default=0.0)
        if "health_max_at" in out:
            out["health_max_at"] -= started
        watcher.cancel()
    out["received_mb"] = received / 1024 / 1024
    out["rss_before_mb"] = rss_before or 0.0
    return out


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="60,500", help="answer sizes in MB (default 60,500)")
    parser.add_argument("--kinds", default="json,sse", help="json, sse or both")
    parser.add_argument(
        "--mode", default="record", help="tapeproxy's mode: record, or passthrough to compare"
    )
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    runner, upstream = await start_upstream()
    with tempfile.TemporaryDirectory(prefix="tapeproxy-commit-") as work:
        library = Path(work) / "cassettes"
        limit = f"{int(max(sizes) * 2) + 16}MiB"
        options = [
            "--mode",
            args.mode,
            "--cassettes",
            str(library),
            "--max-record",
            limit,
        ]
        server = await asyncio.to_thread(
            start_tapeproxy, "commit", Path(work), *options, "--upstream", f"up={upstream}"
        )
        try:
            print(
                f"{'answer':>14} {'seconds':>8} {'health max ms':>14} {'RSS before':>11} "
                f"{'RSS peak':>9} {'file MB':>8}"
            )
            for kind in kinds:
                for mb in sizes:
                    row = await one(server.url, upstream, server, mb, kind)
                    files = list(library.rglob("*.json"))
                    newest = max(files, key=lambda p: p.stat().st_mtime) if files else None
                    file_mb = newest.stat().st_size / 1024 / 1024 if newest else 0.0
                    print(
                        f"{f'{mb:.0f} MB {kind}':>14} {row['seconds']:8.1f} "
                        f"{row.get('health_max_ms', 0):14.1f} {row['rss_before_mb']:9.0f} MB "
                        f"{row.get('rss_peak_mb', 0):6.0f} MB {file_mb:8.0f}"
                    )
                    print("   ", {k: round(v, 3) for k, v in row.items()})
        finally:
            server.stop()
            await runner.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
