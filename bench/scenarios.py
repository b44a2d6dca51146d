"""Scenarios 1-4: the bare starlette baseline, the fake upstream hit directly, recording,
passthrough, and replay of a JSON answer and of a 50-frame SSE stream."""

from __future__ import annotations

from pathlib import Path

from bench.context import (
    DIRECT_PATH,
    JSON_BODY,
    PACED_BODY,
    SSE_BODY,
    TIMED_BODY,
    Bench,
    Recording,
    call,
    check,
    first_row,
    startup_row,
)
from bench.fidelity import timing_fidelity
from bench.load import measure, one
from bench.procs import BenchError, start_app
from bench.report import Row


def _plus(value: float | None, reference: float | None) -> str:
    if value is None or reference is None:
        return "n/a"
    return f"{value - reference:+.2f} ms"


async def baseline(bench: Bench, label: str = "baseline") -> None:
    """Scenario 1. The first call sets the run's reference figures; a later one (`label`
    differs) shows how much the machine drifted meanwhile."""
    budget, first = bench.budget, label == "baseline"
    server = start_app("baseline", bench.workdir)
    try:
        if first:
            bench.baseline["startup"] = server.startup_s * 1000
        target = call(server.url, JSON_BODY, path=DIRECT_PATH)
        size = len(check(await one(target), "baseline").body)
        note = f"bare starlette, {size} B JSON" if first else "the first rows again: drift"
        for conc, count in [(1, budget.latency_count), (budget.concurrency, budget.count)]:
            sample = await measure(target, count, conc, budget.cap_s, budget.warmup)
            if first:
                bench.baseline[f"c{conc}"] = sample.p50_ms() or 0.0
            bench.add(Row.of(f"{label} JSON", sample, bench.base(conc), note), server)
    finally:
        server.stop()
        if first:
            bench.baseline["stop"] = server.stop_s or 0.0


async def direct(bench: Bench) -> None:
    """The fake upstream hit directly: what passthrough and record add to."""
    budget = bench.budget
    target = call(bench.fake_url, JSON_BODY, path=DIRECT_PATH)
    sample = await measure(target, budget.latency_count, 1, budget.cap_s, budget.warmup)
    bench.direct["json"] = sample.p50_ms() or 0.0
    bench.add(Row.of("upstream direct JSON", sample, bench.base(1), "the fake (aiohttp)"))
    paced = call(bench.fake_url, PACED_BODY, path=DIRECT_PATH)
    sample = await measure(paced, budget.slow_count, 1, budget.cap_s * 2, 3)
    bench.direct["paced_ttfb"] = sample.ttfb_p50_ms() or 0.0
    bench.direct["paced"] = sample.p50_ms() or 0.0
    bench.add(
        Row.of(
            "upstream direct SSE 10x20ms",
            sample,
            bench.base(1),
            f"TTFB p50 {sample.ttfb_p50_ms() or 0:.2f} ms",
        )
    )


async def record(bench: Bench, library: Path) -> Recording:
    """Record the exchanges the replay scenarios use, then time record mode itself."""
    upstream = f"openai={bench.fake_url}"
    files: dict[str, Path] = {}
    with bench.tapeproxy(
        "record", "--mode", "record", "--cassettes", str(library), "--upstream", upstream
    ) as server:
        for name, body in [("json", JSON_BODY), ("sse", SSE_BODY), ("timed", TIMED_BODY)]:
            reply = check(await one(call(server.url, body)), f"recording the {name} exchange")
            key = reply.headers.get("x-tapeproxy-key", "")
            files[name] = library / "default" / f"{key}.json"
            if not files[name].is_file():
                raise BenchError(f"record mode answered {name} but wrote no {files[name]}")
        budget = bench.budget
        # A cassette of its own: every request is a new ordinal, one fsync'd file each.
        target = call(server.url, JSON_BODY, ("x-tapeproxy-cassette", "record-load"))
        sample = await measure(target, budget.record_count, 1, budget.cap_s, 5)
        note = f"{_plus(sample.p50_ms(), bench.direct.get('json'))} p50 over upstream direct"
        bench.add(Row.of("record JSON (1 file each)", sample, bench.base(1), note), server)
        # A stream's first byte while it is recorded: target <= the upstream's + 3 ms.
        paced = call(server.url, PACED_BODY, ("x-tapeproxy-cassette", "record-paced"))
        sample = await measure(paced, budget.slow_count, 1, budget.cap_s * 2, 3)
        ttfb = sample.ttfb_p50_ms()
        note = (
            f"TTFB p50 {ttfb or 0:.2f} ms ({_plus(ttfb, bench.direct.get('paced_ttfb'))} "
            "over direct; target +3 ms)"
        )
        bench.add(Row.of("record SSE 10x20ms", sample, bench.base(1), note), server)
    return Recording(library, files)


async def passthrough(bench: Bench) -> None:
    """Scenario 4: what forwarding adds, for a JSON answer and for a paced stream's TTFB."""
    budget = bench.budget
    with bench.tapeproxy(
        "passthrough", "--mode", "passthrough", "--upstream", f"openai={bench.fake_url}"
    ) as server:
        target = call(server.url, JSON_BODY)
        sample = await measure(target, budget.latency_count, 1, budget.cap_s, budget.warmup)
        note = f"{_plus(sample.p50_ms(), bench.direct.get('json'))} p50 over upstream direct"
        bench.add(Row.of("passthrough JSON", sample, bench.base(1), note), server)
        sample = await measure(
            call(server.url, PACED_BODY), budget.slow_count, 1, budget.cap_s * 2, 3
        )
        ttfb = sample.ttfb_p50_ms()
        note = (
            f"TTFB p50 {ttfb or 0:.2f} ms ({_plus(ttfb, bench.direct.get('paced_ttfb'))} "
            f"over direct); full stream {_plus(sample.p50_ms(), bench.direct.get('paced'))}"
        )
        bench.add(Row.of("passthrough SSE 10x20ms", sample, bench.base(1), note), server)


async def replay(bench: Bench, recording: Recording) -> None:
    """Scenarios 2 and 3: replay of the recorded JSON answer and 50-frame stream."""
    budget = bench.budget
    with bench.tapeproxy(
        "replay",
        "--mode",
        "replay",
        "--cassettes",
        str(recording.library),
        "--repeat",
        "repeat-last",
    ) as server:
        bench.replay["startup"] = server.startup_s * 1000
        bench.add(startup_row("start-up, small library", server.startup_s, bench), server)
        first = check(await one(call(server.url, JSON_BODY)), "first replayed request")
        bench.replay["first"] = first.total_s * 1000
        live = await one(call(bench.fake_url, JSON_BODY, path=DIRECT_PATH))
        same = first.body == live.body
        note = "byte-identical to upstream" if same else "BODY DIFFERS from upstream"
        bench.add(
            first_row("first replay, small cassette", first, bench, note), server
        ).warning = not same
        for conc, count in [(1, budget.latency_count), (budget.concurrency, budget.count)]:
            sample = await measure(
                call(server.url, JSON_BODY), count, conc, budget.cap_s, budget.warmup
            )
            bench.replay[f"c{conc}"] = sample.p50_ms() or 0.0
            bench.add(Row.of("replay JSON", sample, bench.base(conc)), server)
        for conc in (1, budget.concurrency):
            sample = await measure(
                call(server.url, SSE_BODY),
                budget.stream_count,
                conc,
                budget.cap_s,
                budget.warmup // 2,
            )
            note = f"50 frames; p50 = full stream; TTFB p50 {sample.ttfb_p50_ms() or 0:.2f} ms"
            bench.add(Row.of("replay SSE", sample, bench.base(conc), note), server)
        await timing_fidelity(bench, server, recording.files["timed"])
