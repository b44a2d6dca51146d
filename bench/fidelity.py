"""Scenario 6: replay timing fidelity. A stream recorded with 50 ms between its 10 frames is
replayed with `x-tapeproxy-timing: recorded`; the gaps the client sees are compared with the
gaps in the cassette (`response.frames[i].ms`). `none` must take far less than the span."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

from bench.context import TIMED_BODY, Bench, call, check
from bench.load import Reply, client, send
from bench.procs import BenchError, Server
from bench.report import Row, ratio

TIMING_HEADER = "x-tapeproxy-timing"


def recorded_ms(cassette_file: Path) -> list[int]:
    exchange = json.loads(cassette_file.read_bytes())
    frames = exchange["response"].get("frames") or []
    if not frames:
        raise BenchError(f"{cassette_file} holds no stream frames")
    return [int(frame["ms"]) for frame in frames]


def frame_times_ms(reply: Reply) -> list[float]:
    """When each SSE frame was complete at the client, in ms since the request was sent."""
    times: list[float] = []
    pending = b""
    for at, data in reply.chunks:
        pending += data
        while (end := pending.find(b"\n\n")) >= 0:
            times.append(at * 1000)
            pending = pending[end + 2 :]
    return times


def gaps(values: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(values)]


async def timing_fidelity(bench: Bench, server: Server, cassette_file: Path) -> None:
    stamps = recorded_ms(cassette_file)
    span = float(stamps[-1])
    want = gaps([float(ms) for ms in stamps])
    errors: list[float] = []  # seen - recorded, per gap
    totals: dict[str, list[float]] = {"recorded": [], "none": []}
    mismatched = 0
    async with client(1) as session:
        for _ in range(bench.budget.timing_reps):
            for mode in ("recorded", "none"):
                target = call(server.url, TIMED_BODY, (TIMING_HEADER, mode))
                reply = check(await send(session, target), f"replay with timing {mode}")
                totals[mode].append(reply.total_s * 1000)
                if mode != "recorded":
                    continue
                seen = gaps(frame_times_ms(reply))
                mismatched += len(seen) != len(want)
                errors += [s - w for s, w in zip(seen, want, strict=False)]
    recorded_p50 = statistics.median(totals["recorded"])
    none_p50 = statistics.median(totals["none"])
    absolute = [abs(e) for e in errors]
    mae = statistics.fmean(absolute) if errors else float("nan")
    bias = statistics.fmean(errors) if errors else float("nan")
    note = (
        f"gap MAE {mae:.2f} ms (bias {bias:+.2f}, max {max(absolute, default=0):.2f}) over "
        f"{len(errors)} gaps; recorded span {span:.0f} ms"
    )
    if mismatched:
        note += f"; {mismatched} replays had a different frame count than the cassette"
    reps = bench.budget.timing_reps
    bench.add(
        Row(
            "replay timing=recorded (10x50ms)",
            requests=reps,
            concurrency=1,
            p50_ms=recorded_p50,
            ratio=ratio(recorded_p50, bench.base(1)),
            note=note,
            warning=bool(mismatched) or not mae < 5,
        ),
        server,
    )
    share = none_p50 / span if span else float("nan")
    bench.add(
        Row(
            "replay timing=none (same stream)",
            requests=reps,
            concurrency=1,
            p50_ms=none_p50,
            ratio=ratio(none_p50, bench.base(1)),
            note=f"{share:.1%} of the recorded span",
            warning=not share < 0.2,
        ),
        server,
    )
