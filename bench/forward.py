"""The forward proxy's targets (issue 40), one run on this machine, single connection:

    .venv/bin/python bench/forward.py [--requests N]

- replay through a kept-alive tunnel to api.openai.com against the reverse route
  (`/openai/v1`) on the same server: the p50 added per request (target <= 1 ms);
- a new tunnel (CONNECT, then the TLS handshake with a cached leaf): p50 (target <= 5 ms);
- `tapeproxy run -- true`, start to exit: median of 5 (target <= 1.5 s).

Not here: the 32-connection comparison with mitmproxy's server-replay (mitmproxy is not in
this environment)."""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import Server, clean_env, start_app, start_tapeproxy

BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}
).encode()
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
PATH = "/v1/chat/completions"


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def post(connection: http.client.HTTPConnection, path: str) -> None:
    connection.request("POST", path, body=BODY, headers=HEADERS)
    answer = connection.getresponse()
    answer.read()
    if answer.status != 200:
        raise RuntimeError(f"{path}: {answer.status}")


def timed(work: Callable[[], None], n: int) -> list[float]:
    """Milliseconds of each of `n` calls, after 50 unmeasured ones."""
    for _ in range(50):
        work()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return times


def tunnel(host: str, port: int, trust: ssl.SSLContext) -> http.client.HTTPSConnection:
    connection = http.client.HTTPSConnection(host, port, context=trust, timeout=10)
    connection.set_tunnel("api.openai.com", 443)
    return connection


def measure(server: Server, ca_file: Path, n: int) -> dict[str, float]:
    host, port = address(server.url)
    trust = ssl.create_default_context(cafile=str(ca_file))
    reverse = http.client.HTTPConnection(host, port, timeout=10)
    forward = tunnel(host, port, trust)
    reverse_ms = statistics.median(timed(lambda: post(reverse, "/openai" + PATH), n))
    forward_ms = statistics.median(timed(lambda: post(forward, PATH), n))

    def handshake() -> None:
        fresh = tunnel(host, port, trust)
        fresh.connect()
        fresh.close()

    return {
        "reverse p50 ms": reverse_ms,
        "forward p50 ms": forward_ms,
        "forward adds p50 ms (target <= 1)": forward_ms - reverse_ms,
        "new tunnel + TLS p50 ms (target <= 5)": statistics.median(timed(handshake, n // 5)),
    }


def run_true() -> float:
    """Seconds of `tapeproxy run -- true`, start to exit, median of 5."""
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(5):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "tapeproxy", "run", "--cassettes", folder, "--", "true"],
                check=True, env=clean_env(), capture_output=True,
            )  # fmt: skip
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    n = parser.parse_args().requests
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        library, ca_file = work / "cassettes", work / "ca.pem"
        fake = start_app("fake", work)
        try:
            common = ("--cassettes", str(library), "--forward", "--ca-cert", str(ca_file))
            recorder = start_tapeproxy("record", work, *common, "--mode", "record",
                                       "--upstream", f"openai={fake.url}")  # fmt: skip
            post(http.client.HTTPConnection(*address(recorder.url)), "/openai" + PATH)
            recorder.stop()
        finally:
            fake.stop()
        replayer = start_tapeproxy("replay", work, *common, "--mode", "replay",
                                   "--repeat", "repeat-last", "--log-level", "warning",
                                   "--upstream", "openai=http://127.0.0.1:9")  # fmt: skip
        try:
            rows = measure(replayer, ca_file, n)
        finally:
            replayer.stop()
    rows["`tapeproxy run -- true` s (target <= 1.5)"] = run_true()
    for name, value in rows.items():
        print(f"{name:45} {value:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
