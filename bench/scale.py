"""Issue 45's table on a library `bench/big_library.py` built: serve ready and the first
replayed answer (vs a library holding only that cassette), `ls` cold and warm, `show`, the
verify rate, the viewer's pages, peak RSS, and a 20-turn conversation re-sending a 1 MB
image, on disk. `--python` runs another checkout's tapeproxy (its venv's python) for the
"before" column: `python bench/scale.py LIB --python /work/main/.venv/bin/python`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.big_library import BIG, SHOW
from bench.wrk import run_wrk, wrk_path

# Runs a command and prints its children's peak RSS (KiB) on stderr's last line.
PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code, file=sys.stderr)\n"
)
IMAGE_SIZES = """
import base64, hashlib, json, os, sys
from tapeproxy.store.files import FileStore
from tapeproxy.exchange.model import Exchange
picture = base64.b64encode(hashlib.sha256(b"x").digest() * (750 * 1024 // 32)).decode()
store = FileStore(sys.argv[1])
image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + picture}}
messages = []
for turn in range(20):  # the image in the first message, re-sent with every turn
    parts = [image] if turn == 0 else []
    messages.append({"role": "user", "content": [*parts, {"type": "text", "text": f"{turn}"}]})
    store.write("vision", Exchange.model_validate({
        "key": hashlib.sha256(json.dumps(messages).encode()).hexdigest(), "ordinal": 1,
        "seq": turn, "rules": "r",
        "request": {"method": "POST", "upstream": "openai", "path": "/v1/chat/completions",
                    "body": {"json": {"model": "gpt-4o", "messages": messages}}},
        "response": {"status": 200, "body": {"json": {"answer": turn}, "style": "compact"}}}))
    messages.append({"role": "assistant", "content": f"answer {turn}"})
print(sum(p.stat().st_size for p in __import__("pathlib").Path(sys.argv[1]).rglob("*")
          if p.is_file()))
"""


def tapeproxy(python: str, *args: str) -> list[str]:
    return [python, "-m", "tapeproxy", *args]


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Seconds, peak RSS (MB) and exit status of a command, in a process of its own."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *command], stderr=subprocess.PIPE, text=True, env=env
    )
    took = time.perf_counter() - started
    peak, code = done.stderr.strip().splitlines()[-1].split()
    return took, int(peak) / 1024, int(code)


def served(python: str, library: Path, sample: dict[str, object]) -> tuple[float, float, float]:
    """Start-up to the ready line, the first replayed answer, and the server's RSS (MB)."""
    started = time.perf_counter()
    args = ["serve", "--port", "0", "--mode", "replay", "--cassettes", str(library)]
    process = subprocess.Popen(
        tapeproxy(python, *args, "--cassette", BIG),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        up = time.perf_counter() - started
        url = ready.split(" on ")[-1].strip()
        asked = time.perf_counter()
        answer = httpx.post(f"{url}/openai/v1/chat/completions", json=sample["body"], timeout=60)
        first = time.perf_counter() - asked
        assert answer.status_code == 200, answer.text[:300]
        rss = _rss(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return up, first, rss


def replayed(python: str, library: Path, bodies: list[bytes], seconds: float = 5) -> float:
    """Replays `seconds` at 32 connections (wrk, keep-alive, the bodies round-robin) from
    the BIG cassette of `library`, after a second of warm-up."""
    args = ["serve", "--port", "0", "--mode", "replay", "--cassettes", str(library)]
    process = subprocess.Popen(
        tapeproxy(python, *args, "--cassette", BIG, "--repeat", "repeat-last"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(" on ")[-1].strip()
        path = "/openai/v1/chat/completions"
        run_wrk(url, path, bodies, 32, 1)
        result = run_wrk(url, path, bodies, 32, seconds)
        assert result.errors == 0, f"{result.errors} errors: a body missed?"
        return result.rate
    finally:
        process.terminate()
        process.wait(timeout=30)


def fifty(library: Path, into: Path) -> tuple[Path, list[bytes]]:
    """A library whose BIG cassette holds 50 of the big one's exchanges, and their requests'
    bodies (what both servers are sent)."""
    (into / BIG).mkdir(parents=True)
    bodies = []
    for path in sorted((library / BIG).glob("*.json"))[:50]:
        shutil.copy2(path, into / BIG / path.name)
        bodies.append(json.dumps(json.loads(path.read_bytes())["request"]["body"]["json"]).encode())
    return into, bodies


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def viewer(python: str, library: Path) -> tuple[float, float, float]:
    """The library page and the 10,000-exchange cassette's page (seconds; -1 past 120 s),
    and SIGTERM to exit (seconds)."""
    process = subprocess.Popen(
        tapeproxy(python, "view", "--port", "0", "--cassettes", str(library)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        ready = process.stdout.readline()
        if " on " not in ready:
            process.wait(timeout=60)
            raise RuntimeError(f"view did not start: {process.stderr.read()[-2000:]}")
        url = ready.split(" on ")[-1].strip().rstrip("/")
        pages = []
        for path in ("/", f"/cassette?name={BIG}"):
            started = time.perf_counter()
            try:
                httpx.get(url + path, timeout=120).raise_for_status()
                pages.append(time.perf_counter() - started)
            except httpx.TimeoutException:
                pages.append(-1.0)
    finally:
        stopping = time.perf_counter()
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return pages[0], pages[1], time.perf_counter() - stopping


def only(library: Path, cassette: str, into: Path) -> Path:
    """A library holding only `cassette` (a link to its folder)."""
    (into / cassette).parent.mkdir(parents=True, exist_ok=True)
    (into / cassette).symlink_to(library / cassette)
    return into


def note(rows: list[tuple[str, str]], more: list[tuple[str, str]]) -> None:
    """Rows of the table, each printed as it is measured (a long run shows its progress)."""
    for name, value in more:
        print(f"  {name:34} {value}", flush=True)
        rows.append((name, value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("library", type=Path)
    parser.add_argument("--python", default=sys.executable, help="the tapeproxy to measure")
    args = parser.parse_args()
    lib, py = args.library, args.python
    sample = json.loads((lib.parent / f"{lib.name}.sample.json").read_text())
    count = sum(1 for _ in lib.rglob("*.json") if ".tapeproxy" not in _.parts)
    print(f"{count:,} exchanges; tapeproxy of {py}", flush=True)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        alone, show_alone = only(lib, BIG, Path(tmp, "a")), only(lib, SHOW, Path(tmp, "b"))
        up, first, rss = served(py, lib, sample)
        up1, first1, _ = served(py, alone, sample)
        note(rows, [("serve ready", f"{up:.2f} s (alone {up1:.2f} s, +{up - up1:.2f} s)")])
        answered = f"{first * 1000:.0f} ms (alone {first1 * 1000:.0f})"
        note(rows, [("first replayed answer", answered)])
        note(rows, [("server RSS after it", f"{rss:.0f} MB")])
        if wrk_path() is not None:
            small, bodies = fifty(lib, Path(tmp, "fifty"))
            rates = [replayed(py, where, bodies) for where in (lib, small, lib, small)]
            big_rate, small_rate = max(rates[0], rates[2]), max(rates[1], rates[3])
            ratio = f"{big_rate:,.0f} vs {small_rate:,.0f} req/s, {big_rate / small_rate:.2f}x"
            note(rows, [("replay at 32 conns vs 50 exchanges", ratio)])
        shutil.rmtree(lib / ".tapeproxy" / "summaries", ignore_errors=True)
        # The folder walk's cache too (store/folders.py): a library kept from an earlier run
        # holds one, and a cold `ls` that used it would not be cold.
        (lib / ".tapeproxy" / "folders.json").unlink(missing_ok=True)
        cold = timed(tapeproxy(py, "ls", "--cassettes", str(lib), "--json"))
        warm = timed(tapeproxy(py, "ls", "--cassettes", str(lib), "--json"))
        note(rows, [("ls cold", f"{cold[0]:.1f} s, peak {cold[1]:.0f} MB")])
        note(rows, [("ls warm", f"{warm[0]:.1f} s, peak {warm[1]:.0f} MB")])
        show = timed(tapeproxy(py, "show", SHOW, "--cassettes", str(lib)))
        show1 = timed(tapeproxy(py, "show", SHOW, "--cassettes", str(show_alone)))
        note(rows, [("show (99)", f"{show[0]:.2f} s (alone {show1[0]:.2f} s)")])
        shutil.rmtree(lib / ".tapeproxy" / "verified", ignore_errors=True)
        for state in ("cold", "warm"):
            verify = timed(tapeproxy(py, "verify", "--cassettes", str(lib), "--json"))
            # ru_maxrss of the children is the largest one's, not their sum: verify's
            # workers (tools/verifyall.py, one a core) each hold about that much.
            rate = f"{count / verify[0]:,.0f} exchanges/s, peak {verify[1]:.0f} MB a process"
            note(rows, [(f"verify {state}", rate)])
        library_page, big_page, stop = viewer(py, lib)
        note(rows, [("viewer library page", f"{library_page * 1000:.0f} ms (-1: timed out)")])
        note(rows, [("viewer 10,000 cassette page", f"{big_page * 1000:.0f} ms")])
        note(rows, [("viewer SIGTERM to exit", f"{stop:.1f} s")])
        image = subprocess.run(
            [py, "-c", IMAGE_SIZES, str(Path(tmp, "img"))], capture_output=True, text=True
        )
        size = int(image.stdout.strip() or 0)
        note(rows, [("20 turns re-sending a 1 MB image", f"{size / 2**20:.1f} MB on disk")])


if __name__ == "__main__":
    os.environ.pop("TAPEPROXY_CASSETTES", None)
    main()
