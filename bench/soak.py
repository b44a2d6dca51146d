"""Soak: 10,000 mixed requests against one replay server (answers from the cassette, streams,
misses, streams the client drops after the first bytes), then the server's RSS before and
after. Everything on 127.0.0.1, bounded by a request count and a wall-clock cap.

    .venv/bin/python bench/soak.py [--requests N] [--concurrency C] [--cap SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apps import stream_model
from bench.procs import Server, start_app, start_tapeproxy

DISTINCT = 40  # recorded requests of each kind
KINDS = {"replay": 0.55, "stream": 0.15, "miss": 0.15, "dropped stream": 0.15}


def body(kind: str, n: int) -> dict[str, object]:
    model = stream_model(20, 0) if kind in ("stream", "dropped stream") else "bench-json"
    text = f"miss {n} {random.random()}" if kind == "miss" else f"question {n % DISTINCT}"
    return {
        "model": model,
        "stream": model != "bench-json",
        "messages": [{"role": "user", "content": text}],
    }


async def one(session: aiohttp.ClientSession, url: str, kind: str, n: int) -> str:
    """Send one request of `kind`; the outcome as a word for the tally."""
    async with session.post(url, json=body(kind, n)) as response:
        if kind == "dropped stream":
            await response.content.read(16)
            response.close()  # the client hangs up mid-answer
            return "dropped"
        await response.read()
        wanted = 422 if kind == "miss" else 200
        return "ok" if response.status == wanted else f"status {response.status} for {kind}"


async def record(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for n in range(DISTINCT):
            for kind in ("replay", "stream"):
                outcome = await one(session, url, kind, n)
                if outcome != "ok":
                    raise SystemExit(f"recording failed: {outcome}")


async def soak(url: str, total: int, concurrency: int, cap: float) -> Counter[str]:
    tally: Counter[str] = Counter()
    kinds = random.choices(list(KINDS), weights=list(KINDS.values()), k=total)
    queue = iter(enumerate(kinds))
    deadline = time.monotonic() + cap

    async def worker(session: aiohttp.ClientSession) -> None:
        for n, kind in queue:
            if time.monotonic() > deadline:
                tally["stopped by the cap"] += 1
                return
            try:
                tally[await one(session, url, kind, n)] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                tally[f"error {type(exc).__name__}"] += 1

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return tally


def rss(server: Server) -> str:
    now, peak = server.memory_mb()
    return f"RSS {now or 0:.1f} MB (peak {peak or 0:.1f} MB)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--cap", type=float, default=300.0, help="wall-clock cap, seconds")
    args = parser.parse_args(argv)
    random.seed(7)
    with tempfile.TemporaryDirectory(prefix="tapeproxy-soak-") as folder:
        work = Path(folder)
        fake = start_app("fake", work)
        servers = [fake]
        try:
            library = str(work / "library")
            upstream = f"openai={fake.url}"
            recorder = start_tapeproxy(
                "record", work, "--mode", "record", "--cassettes", library, "--upstream", upstream
            )
            servers.append(recorder)
            asyncio.run(record(recorder.url + "/openai/v1/chat/completions"))
            recorder.stop()
            replayer = start_tapeproxy(
                "replay",
                work,
                "--cassettes",
                library,
                "--upstream",
                upstream,
                "--repeat",
                "repeat-last",
            )
            servers.append(replayer)
            url = replayer.url + "/openai/v1/chat/completions"
            asyncio.run(soak(url, 200, args.concurrency, args.cap))  # warm-up
            before = rss(replayer)
            started = time.monotonic()
            tally = asyncio.run(soak(url, args.requests, args.concurrency, args.cap))
            took = time.monotonic() - started
            print(
                f"{sum(tally.values()):,} requests in {took:.1f} s at concurrency "
                f"{args.concurrency}: {json.dumps(dict(tally))}"
            )
            print(f"replay server before: {before}")
            print(f"replay server after:  {rss(replayer)}")
            bad = {k: v for k, v in tally.items() if k not in ("ok", "dropped")}
            return 1 if bad else 0
        finally:
            for server in reversed(servers):
                server.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
