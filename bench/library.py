"""Scenario 5: a cassette of 100,000 exchange files. Start-up, the first replayed request
(which lists the folder), lookups against it vs the small cassette, and memory."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.context import JSON_BODY, Bench, Recording, call, check, first_row, startup_row
from bench.load import Sample, client, one, send
from bench.procs import Server
from bench.report import Row, ratio

LOOKUP_SLOWDOWN = 1.3  # p50 big / p50 one-file cassette above this is flagged
SHM = Path("/dev/shm")
SHM_NEEDED = 2 * 1024**3


def library_parent(chosen: Path | None) -> Path:
    """Where to build the big library: `chosen`, else tmpfs when there is room. Writing
    100,000 files to a shared disk takes 5 to 50 s here, and what is measured (listing
    names from the dentry cache, reading one file) does not depend on the disk once warm."""
    if chosen is not None:
        return chosen
    try:
        stat = os.statvfs(SHM)
        if os.access(SHM, os.W_OK) and stat.f_bavail * stat.f_frsize > SHM_NEEDED:
            return SHM
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def fill(cassette: Path, data: bytes, size: int) -> float:
    """`size` files named `<sha256 hex>.json` holding `data`; the seconds it took."""
    started = time.monotonic()
    cassette.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for i in range(size):
        name = hashlib.sha256(b"tapeproxy-bench-%d" % i).hexdigest() + ".json"
        fd = os.open(cassette / name, flags, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return time.monotonic() - started


async def big_library(bench: Bench, recording: Recording, parent: Path) -> None:
    source = recording.files["json"]
    library = Path(tempfile.mkdtemp(prefix="tapeproxy-bench-library-", dir=parent))
    size = bench.budget.library_size
    try:
        cassette = library / "default"
        filled = fill(cassette, source.read_bytes(), size)
        # The real exchange under its real name, so lookups hit a real entry among the rest;
        # and alone in a cassette of one, for an interleaved comparison in the same server.
        shutil.copyfile(source, cassette / source.name)
        (library / "small").mkdir()
        shutil.copyfile(source, library / "small" / source.name)
        await _measure(bench, library, size, f"generated in {parent} in {filled:.1f} s")
    finally:
        started = time.monotonic()
        shutil.rmtree(library, ignore_errors=True)
        bench.add(
            Row(
                f"  (library of {size:,} files deleted)",
                note=f"in {time.monotonic() - started:.1f} s",
            )
        )


async def _measure(bench: Bench, library: Path, size: int, generated: str) -> None:
    label = f"{size // 1000}k" if size >= 1000 else str(size)
    with bench.tapeproxy(
        f"replay-{label}",
        "--mode",
        "replay",
        "--cassettes",
        str(library),
        "--repeat",
        "repeat-last",
    ) as server:
        row = startup_row(f"start-up, {label}-file library", server.startup_s, bench)
        small_startup = bench.replay.get("startup")
        row.note = (
            f"{generated}; small library start-up "
            f"{small_startup or 0:.0f} ms ({ratio(row.p50_ms, small_startup) or 0:.2f}x)"
        )
        bench.add(row, server)
        first = check(await one(call(server.url, JSON_BODY)), "first request, big library")
        note = (
            f"lists {size + 1:,} names, reads 1 file; small cassette: "
            f"{bench.replay.get('first') or 0:.2f} ms"
        )
        bench.add(first_row(f"first replay, {label} cassette", first, bench, note), server)
        await _lookups(bench, server, label)


async def _lookups(bench: Bench, server: Server, label: str) -> None:
    big, one_file = await _interleaved(bench, server.url)
    vs_one = ratio(big.p50_ms(), one_file.p50_ms())
    vs_replay = ratio(big.p50_ms(), bench.replay.get("c1"))
    rss, _ = server.memory_mb()
    note = (
        f"p50 {vs_one or 0:.2f}x a 1-file cassette in the same server (interleaved, "
        f"{one_file.p50_ms() or 0:.2f} ms), {vs_replay or 0:.2f}x the replay JSON c=1 row; "
        f"RSS now {rss or 0:.0f} MB"
    )
    row = bench.add(Row.of(f"replay JSON, {label} cassette", big, bench.base(1), note), server)
    row.warning = row.warning or (vs_one is not None and vs_one > LOOKUP_SLOWDOWN)


async def _interleaved(bench: Bench, url: str) -> tuple[Sample, Sample]:
    """Lookups in the big cassette and in a 1-file one, alternating request by request (which
    goes first alternates too), so machine noise hits both alike."""
    budget = bench.budget
    targets = [call(url, JSON_BODY), call(url, JSON_BODY, ("x-tapeproxy-cassette", "small"))]
    big, small = Sample(), Sample()
    async with client(1) as session:
        for target in targets:  # warm-up; the first request also lists the folder
            for _ in range(budget.warmup):
                check(await send(session, target), "warm-up of the lookup comparison")
        deadline = time.perf_counter() + budget.cap_s
        for i in range(budget.latency_count):
            if time.perf_counter() > deadline:
                big.capped = small.capped = True
                break
            order = [(big, targets[0]), (small, targets[1])]
            for pooled, target in order if i % 2 else order[::-1]:
                reply = check(await send(session, target), "lookup comparison")
                pooled.latencies_s.append(reply.total_s)
    for pooled in (big, small):  # sequential at concurrency 1: req/s is 1 / mean latency
        pooled.wall_s = sum(pooled.latencies_s)
        pooled.requests = len(pooled.latencies_s)
    return big, small
