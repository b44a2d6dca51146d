"""The tapeproxy benchmark: starts a bare starlette baseline, a fake provider, Talkback and
tapeproxy in each mode as subprocesses on 127.0.0.1; first a head-to-head driven by wrk (ratios
to the baseline and to Talkback), then the scenarios driven by a pooled aiohttp client, each
p50 as a ratio to the baseline measured in the same run.

    .venv/bin/python bench/run.py [--quick] [--head-to-head] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.context import DIRTY_S, FULL, QUICK, SETTLE_S, Bench, Budget
from bench.library import big_library, library_parent
from bench.peers import (
    Contest,
    as_json,
    head_to_head,
    mark_cleaned,
    render_contest,
    settle,
)
from bench.procs import ROOT, BenchError, start_app
from bench.report import Row, render, write_json
from bench.scenarios import baseline, direct, passthrough, record, replay
from bench.wrk import wrk_path


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests: under 60 s")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    parser.add_argument(
        "--head-to-head", action="store_true", help="only the wrk head-to-head (about 1 min)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        metavar="S",
        help="length of each wrk run (default 3 with --quick, else 8)",
    )
    parser.add_argument(
        "--library-size",
        type=int,
        metavar="N",
        help="exchange files in the big-library scenario (default 100000)",
    )
    parser.add_argument(
        "--library-dir",
        type=Path,
        metavar="DIR",
        help="where to build it (default /dev/shm if usable, else the temp dir)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=SETTLE_S,
        metavar="S",
        help=(
            "seconds since a previous run deleted its files to wait before the record loads "
            f"(default {SETTLE_S:.0f}; {DIRTY_S:.0f} for an ext4 without a journal at rest)"
        ),
    )
    return parser.parse_args(argv)


def progress(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", file=sys.stderr, flush=True)


async def run(bench: Bench, started: float, seconds: float, only_wrk: bool) -> Contest:
    fake = start_app("fake", bench.workdir)
    bench.fake_url = fake.url
    try:
        progress(started, f"head-to-head with wrk ({seconds:.0f} s a load)")
        contest = await head_to_head(bench, seconds)
        if only_wrk:
            return contest
        progress(started, "baseline")
        await baseline(bench)
        progress(started, "fake upstream, direct")
        await direct(bench)
        if wrk_path() is None:  # no head-to-head: its wait comes here
            settle(contest, bench.settle_s)
        progress(started, "record")
        recording = await record(bench, bench.workdir / "library")
        progress(started, "passthrough")
        await passthrough(bench)
        progress(started, "replay")
        await replay(bench, recording)
        progress(started, f"big library ({bench.budget.library_size:,} files)")
        await big_library(bench, recording, library_parent(bench.library_dir))
        progress(started, "baseline again")
        await baseline(bench, "baseline (end)")
    finally:
        fake.stop()
    return contest


def exit_row(bench: Bench) -> Row:
    if not bench.exits:
        return Row("SIGTERM exits", note="no tapeproxy process ran", warning=True)
    bad = [f"{name}={code}" for name, code, _ in bench.exits if code != 0]
    verdict = f"NOT 0: {', '.join(bad)}" if bad else "all exited 0"
    took = ", ".join(f"{name} {seconds:.2f}" for name, _, seconds in bench.exits)
    return Row(
        "SIGTERM exits",
        requests=len(bench.exits),
        warning=bool(bad),
        note=f"{len(bench.exits)} tapeproxy processes: {verdict}; SIGTERM to exit (s): "
        f"{took}; baseline {bench.baseline.get('stop', 0):.2f}",
    )


def meta(budget: Budget, quick: bool, seconds: float) -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "quick": quick,
        "seconds": round(seconds, 1),
        "budget": dataclasses.asdict(budget),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "commit": commit,
    }


def main(argv: list[str]) -> int:
    args = parse(argv)
    budget = QUICK if args.quick else FULL
    if args.library_size is not None:
        budget = dataclasses.replace(budget, library_size=max(args.library_size, 1))
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="tapeproxy-bench-"))
    bench = Bench(budget, workdir, library_dir=args.library_dir, settle_s=max(args.settle, 0.0))
    failure = ""
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    contest = Contest()
    try:
        contest = asyncio.run(run(bench, started, seconds, args.head_to_head))
    except BenchError as exc:
        failure = str(exc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        mark_cleaned()
    bench.rows.append(exit_row(bench))
    if failure:
        bench.rows.append(Row("BENCHMARK STOPPED", note=failure, warning=True))
    took = time.monotonic() - started
    info = meta(budget, args.quick, took)
    load = ", ".join(f"{x:.2f}" for x in info["loadavg"])
    where = f"{info['cpus']} CPUs, load {load}, {info['commit']}, {time.strftime('%Y-%m-%d')}"
    render_contest(contest, f"head-to-head, wrk, 1 thread ({where})")
    render(
        bench.rows,
        f"tapeproxy benchmark ({'quick' if args.quick else 'full'}, {took:.0f} s, {where})",
    )
    if args.json is not None:
        write_json(args.json, bench.rows, {**info, "head_to_head": as_json(contest)})
    return 1 if failure or any(row.warning for row in bench.rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
