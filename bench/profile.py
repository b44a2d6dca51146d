"""Where tapeproxy's time goes: py-spy samples `tapeproxy serve` while wrk drives it, and the
hottest frames (own time and time including callees) are printed.

    .venv/bin/python bench/profile.py replay|record [--seconds S] [--connections N] [--idle | --gil]

Needs py-spy (`pip install py-spy`; reading another process's stack may need root or
`kernel.yama.ptrace_scope=0`) and wrk.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.context import OPENAI_PATH, QUICK, Bench
from bench.peers import BODIES, record_library
from bench.procs import start_app
from bench.wrk import run_wrk

TOP = 25


def top_frames(collapsed: Path, top: int = TOP) -> str:
    """The frames with the most samples: own (leaf) and inclusive, as text."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        frames = stack.split(";")
        total += samples
        own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    lines = [f"{total} samples"]
    for title, counter in (("own time", own), ("including callees", inclusive)):
        lines.append(f"\n{title}:")
        for frame, samples in counter.most_common(top):
            lines.append(f"{100 * samples / max(total, 1):5.1f}%  {frame}")
    return "\n".join(lines)


def profile(pid: int, seconds: float, out: Path, idle: bool = False, gil: bool = False) -> None:
    """py-spy on `pid` for `seconds`: collapsed stacks to `out`."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    base = [spy, "record", "--pid", str(pid), "--duration", f"{seconds:.0f}", "--rate", "250"]
    base += ["--nonblocking", *(["--idle", "--threads"] if idle else [])]
    base += ["--gil"] if gil else []
    subprocess.run([*base, "--format", "raw", "--output", str(out)], check=True)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", choices=["replay", "record"])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--idle", action="store_true", help="wall-clock: idle and waiting threads sampled too"
    )
    parser.add_argument(
        "--gil", action="store_true", help="only the thread holding the GIL: who uses the CPU"
    )
    parser.add_argument("--keep", type=Path, metavar="FILE", help="also keep the raw stacks")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tapeproxy-profile-"))
    bench = Bench(QUICK, workdir)
    fake = start_app("fake", workdir)
    bench.fake_url = fake.url
    library = workdir / "library"
    upstream = f"openai={fake.url}"
    try:
        with bench.tapeproxy(
            "record", "--mode", "record", "--cassettes", str(library), "--upstream", upstream
        ) as server:
            if args.path == "replay":
                await record_library(bench, server.url, OPENAI_PATH, "tapeproxy")
            else:
                await drive(server.pid, server.url, args, workdir / "profile.txt")
        if args.path == "replay":
            with bench.tapeproxy(
                "replay", "--mode", "replay", "--cassettes", str(library), "--repeat", "repeat-last"
            ) as server:
                await drive(server.pid, server.url, args, workdir / "profile.txt")
        print(top_frames(workdir / "profile.txt"))
        if args.keep is not None:
            shutil.copy(workdir / "profile.txt", args.keep)
    finally:
        fake.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


async def drive(pid: int, url: str, args: argparse.Namespace, out: Path) -> None:
    """wrk on `url` for the whole profile, which starts after a second of warm-up."""
    load = threading.Thread(
        target=run_wrk, args=(url, OPENAI_PATH, BODIES, args.connections, args.seconds + 2)
    )
    load.start()
    await asyncio.sleep(1)
    await asyncio.to_thread(profile, pid, args.seconds, out, args.idle, args.gil)
    load.join()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
