"""The load generator: a pooled aiohttp client at fixed concurrency, bounded by a request
count and a wall-clock cap, warm-up excluded; per request the full time and the time to the
first body byte."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp

REQUEST_TIMEOUT_S = 30.0
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, sock_connect=5)


@dataclass(frozen=True)
class Call:
    """One HTTP request, sent the same way every time."""

    url: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    chunks: tuple[tuple[float, bytes], ...]  # (seconds since the request was sent, bytes)
    ttfb_s: float
    total_s: float


@dataclass
class Sample:
    """What one measured load run saw."""

    requests: int = 0
    concurrency: int = 1
    wall_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    ttfb_s: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    capped: bool = False

    @property
    def rate(self) -> float:
        return len(self.latencies_s) / self.wall_s if self.wall_s > 0 else 0.0

    def p50_ms(self) -> float | None:
        return percentile_ms(self.latencies_s, 0.50)

    def p99_ms(self) -> float | None:
        return percentile_ms(self.latencies_s, 0.99)

    def ttfb_p50_ms(self) -> float | None:
        return percentile_ms(self.ttfb_s, 0.50)


def percentile_ms(values: list[float], q: float) -> float | None:
    """The q-quantile in ms, linearly interpolated; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return (ordered[low] + (ordered[high] - ordered[low]) * (position - low)) * 1000


def client(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    return aiohttp.ClientSession(
        connector=connector, timeout=REQUEST_TIMEOUT, auto_decompress=False
    )


async def send(session: aiohttp.ClientSession, call: Call) -> Reply:
    """POST `call`, reading the body chunk by chunk as it arrives."""
    started = time.perf_counter()
    chunks: list[tuple[float, bytes]] = []
    async with session.post(call.url, data=call.body, headers=dict(call.headers)) as response:
        async for data in response.content.iter_any():
            chunks.append((time.perf_counter() - started, data))
        total = time.perf_counter() - started
        return Reply(
            status=response.status,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=b"".join(data for _, data in chunks),
            chunks=tuple(chunks),
            ttfb_s=chunks[0][0] if chunks else total,
            total_s=total,
        )


async def one(call: Call) -> Reply:
    """A single request on a fresh connection."""
    async with client(1) as session:
        return await send(session, call)


async def measure(
    call: Call, count: int, concurrency: int, cap_s: float, warmup: int = 0
) -> Sample:
    """`count` requests (fewer if `cap_s` runs out) at `concurrency`, after `warmup` unmeasured
    ones. Only status 200 counts as a success."""
    sample = Sample(concurrency=concurrency)
    async with client(concurrency) as session:
        if warmup:
            await _loop(session, call, warmup, concurrency, cap_s, Sample())
        started = time.perf_counter()
        await _loop(session, call, count, concurrency, cap_s, sample)
        sample.wall_s = time.perf_counter() - started
    sample.requests = len(sample.latencies_s) + sample.errors
    sample.capped = sample.requests < count
    return sample


async def _loop(
    session: aiohttp.ClientSession,
    call: Call,
    count: int,
    concurrency: int,
    cap_s: float,
    sample: Sample,
) -> None:
    deadline = time.perf_counter() + cap_s
    issued = 0

    async def worker() -> None:
        nonlocal issued
        while issued < count and time.perf_counter() < deadline:
            issued += 1
            try:
                reply = await send(session, call)
            except (aiohttp.ClientError, TimeoutError) as exc:
                _error(sample, f"{type(exc).__name__}: {exc}")
                continue
            if reply.status != 200:
                _error(sample, f"status {reply.status}: {reply.body[:300]!r}")
                continue
            sample.latencies_s.append(reply.total_s)
            sample.ttfb_s.append(reply.ttfb_s)

    # Each request is bounded by REQUEST_TIMEOUT, so this outer bound is never the normal path.
    await asyncio.wait_for(
        asyncio.gather(*(worker() for _ in range(concurrency))),
        timeout=cap_s + REQUEST_TIMEOUT_S + 5,
    )


def _error(sample: Sample, text: str) -> None:
    sample.errors += 1
    if not sample.first_error:
        sample.first_error = text
