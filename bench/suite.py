"""A test suite's wall time, as users feel tapeproxy's speed: N generated tests (3 calls each
with the official openai SDK: 2 JSON, 1 stream of 20 chunks) against a fake provider, run by
pytest under the tapeproxy plugin, under pytest-recording (VCR.py, matching on the body too)
and with no tool, in interleaved rounds, at -n 0 and -n 2, replaying and recording. Each row
gives the ms per test each tool adds over no tool and tapeproxy's over VCR.py's (each the
median over rounds of the paired difference), and the issue-29 target, judged on the latter.
It also gives tapeproxy's CPU time over VCR.py's, per test: the pytest process and its xdist
workers, from start to end (imports included), not the fake provider's. On a shared machine
CPU time swings less than wall time; at -n 2, with both cores busy, it is what wall time
follows.

    .venv/bin/python bench/suite.py [--tests 200] [--rounds 5] [--workers 0,2]
                                    [--modes replay,record] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from bench.procs import BenchError, start_app
from bench.suite_project import TOOLS, Project, make_project, recordings

RUN_CAP_S = 600.0  # one pytest run, however slow the machine
MODES = ("replay", "record")
# (mode, workers) -> the most the plugin may add per test over what VCR.py adds, in ms.
TARGETS = {("replay", 0): 3.0, ("replay", 2): 0.0, ("record", 0): 5.0, ("record", 2): 5.0}
ADDED = re.compile(r"tapeproxy: the plugin added ([0-9.]+) s")
PASSED = re.compile(r"(\d+) passed.* in ([0-9.]+)s")

Times = dict[tuple[str, int, str], list[float]]  # (mode, workers, tool) -> seconds per round


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=200, metavar="N", help="tests in the suite")
    parser.add_argument("--rounds", type=int, default=5, metavar="R", help="interleaved rounds")
    parser.add_argument("--workers", default="0,2", help="xdist workers to run at (0: no xdist)")
    parser.add_argument("--modes", default="replay,record", help="replay, record or both")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the times as JSON")
    return parser.parse_args(argv)


def progress(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", file=sys.stderr, flush=True)


def run_once(project: Project, mode: str, workers: int, fake_url: str) -> tuple[float, float, str]:
    """One pytest run's session time as pytest gives it; the CPU time it and its workers
    used; its output. Every test must pass.
    Left out at -n 0: the interpreter's start and the plugins' imports (each run loads only
    its own tool's plugin; tapeproxy's imports its server when the first test needs it, so
    that import is counted). At -n 2 the session time holds the workers' start, each with
    its own plugin imports."""
    before = _children_cpu()
    done = subprocess.run(
        project.argv(mode, workers),
        cwd=project.folder,
        env=project.env(fake_url),
        capture_output=True,
        text=True,
        timeout=RUN_CAP_S,
    )
    passed = PASSED.search(done.stdout)
    if done.returncode != 0 or passed is None or int(passed.group(1)) != project.tests:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise BenchError(f"{project.tool} {mode} -n {workers} did not pass:\n{tail}")
    return float(passed.group(2)), _children_cpu() - before, done.stdout


def _children_cpu() -> float:
    """User and system CPU seconds of every child process waited for so far (their own
    waited-for children included: pytest waits for its xdist workers)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def rounds(projects: list[Project], args: argparse.Namespace, fake_url: str) -> Times:
    """Every (mode, workers, tool) once a round, the tools' order turned each time so that
    none is always first after a record run's writes."""
    workers = [int(w) for w in args.workers.split(",")]
    times: Times = defaultdict(list)
    started = time.monotonic()
    for project in projects:  # unmeasured: each tool records its cassettes once
        run_once(project, "record", 0, fake_url)
        if not recordings(project) and project.tool != "none":
            raise BenchError(f"{project.tool} recorded nothing")
    for number in range(args.rounds):
        progress(started, f"round {number + 1} of {args.rounds}")
        turn = projects[number % len(projects) :] + projects[: number % len(projects)]
        for mode in [m for m in MODES if m in args.modes.split(",")]:
            for n in workers:
                for project in turn:
                    took, cpu, output = run_once(project, mode, n, fake_url)
                    times[(mode, n, project.tool)].append(took)
                    times[(mode, n, f"{project.tool} cpu")].append(cpu)
                    if project.tool == "tapeproxy" and (said := ADDED.search(output)):
                        times[(mode, n, "said")].append(float(said.group(1)))
    return times


def per_test_ms(
    times: Times, mode: str, workers: int, tool: str, tests: int, other: str = "none"
) -> float:
    """The median over rounds of (tool - other) / tests, in ms: paired within each round."""
    pairs = zip(times[(mode, workers, tool)], times[(mode, workers, other)], strict=True)
    return statistics.median((ours - theirs) * 1000 / tests for ours, theirs in pairs)


def render(times: Times, args: argparse.Namespace, title: str) -> list[dict[str, object]]:
    table = Table(title=title, title_justify="left")
    for name in ("run", "no tool s", "tapeproxy s", "VCR.py s", "tapeproxy ms/test",
                 "VCR.py ms/test", "tapeproxy - VCR.py", "CPU: tapeproxy - VCR.py",
                 "plugin's own ms/test", "target", "met"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("run", "target") else "right")
    rows = []
    for mode, n in sorted({(m, w) for m, w, _ in times}, key=lambda k: (MODES.index(k[0]), k[1])):
        ours = per_test_ms(times, mode, n, "tapeproxy", args.tests)
        vcr = per_test_ms(times, mode, n, "vcr", args.tests)
        # The target is judged on the two tools' own paired difference: pairing each with no
        # tool first adds that run's noise twice (a round's time swings by seconds here).
        apart = per_test_ms(times, mode, n, "tapeproxy", args.tests, other="vcr")
        cpu = per_test_ms(times, mode, n, "tapeproxy cpu", args.tests, other="vcr cpu")
        said = times.get((mode, n, "said"))
        own = statistics.median(said) * 1000 / args.tests if said else None
        bound = TARGETS.get((mode, n), 0.0)
        seconds = [statistics.median(times[(mode, n, tool)]) for tool in TOOLS]
        rows.append({"mode": mode, "workers": n, "seconds": dict(zip(TOOLS, seconds, strict=True)),
                     "tapeproxy_ms": ours, "vcr_ms": vcr, "apart_ms": apart,
                     "apart_cpu_ms": cpu, "plugin_said_ms": own})  # fmt: skip
        table.add_row(
            f"{mode} -n {n}",
            *(f"{s:.2f}" for s in seconds),
            f"{ours:+.1f}",
            f"{vcr:+.1f}",
            f"{apart:+.1f}",
            f"{cpu:+.1f}",
            "" if own is None else f"{own:.1f}",
            f"<= {bound:+.0f}",
            "yes" if apart <= bound else "NO",
        )
    Console(width=200).print(table)
    return rows


def main(argv: list[str]) -> int:
    args = parse(argv)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="tapeproxy-suite-"))
    fake = start_app("fake", workdir)
    try:
        projects = [make_project(workdir, tool, args.tests) for tool in TOOLS]
        progress(started, f"{args.tests} tests x {len(TOOLS)} tools, {args.rounds} round(s)")
        times = rounds(projects, args, fake.url)
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"BENCHMARK STOPPED: {exc}", file=sys.stderr)
        return 1
    finally:
        fake.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    title = (
        f"a suite of {args.tests} tests x 3 calls, {args.rounds} round(s), "
        f"{time.monotonic() - started:.0f} s, {time.strftime('%Y-%m-%d')}"
    )
    rows = render(times, args, title)
    if args.json is not None:
        data = {"tests": args.tests, "rounds": args.rounds, "rows": rows,
                "times": {"|".join(map(str, k)): v for k, v in times.items()}}  # fmt: skip
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
