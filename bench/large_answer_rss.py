"""Peak RSS of `tapeproxy serve` recording one large answer (issue 45's blobs): a JSON
answer holding one huge base64 string (`images.generate(response_format="b64_json")`), an
SSE stream of 2 MB `image_generation.partial_image` frames, or JSON lines of many short
strings (a batch's output file: a double quote every few bytes, no blob). Prints the
server's peak RSS (VmHWM) before and after the request, the time (to the answer's last
byte, and to the server stopped: its recording written), and what the cassette holds.

    python -m bench.large_answer_rss --mb 200 --kind json
    python -m bench.large_answer_rss --mb 200 --kind sse --pythonpath /tmp/older-build

`--pythonpath` runs another build of tapeproxy (a folder holding a `tapeproxy` package):
the one before, to compare."""

from __future__ import annotations

import argparse
import base64
import json
import os
import tempfile
import time
from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream, Reply
from tests.support.serve import Serve, peak_rss_mb

FRAME = 2 * 1024 * 1024  # base64 bytes an SSE frame's image


def answer(kind: str, size: int) -> tuple[bytes, str]:
    """The answer's bytes (about `size`), and its content type."""
    if kind == "jsonl":
        line = json.dumps({"id": "batch_req_1", "custom_id": "r", "words": ["ab", "cd"] * 20})
        return ((line + "\n") * (size // (len(line) + 1))).encode(), "text/plain"
    raw = os.urandom(size * 3 // 4)
    if kind == "json":
        image = base64.b64encode(raw).decode()
        body = {"created": 1, "data": [{"b64_json": image}], "usage": {"total_tokens": 9}}
        return json.dumps(body, indent=2).encode(), "application/json"
    frames = []
    step = FRAME * 3 // 4
    for index, start in enumerate(range(0, len(raw), step)):
        image = base64.b64encode(raw[start : start + step]).decode()
        event = {"type": "image_generation.partial_image", "b64_json": image, "index": index}
        frames.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    return b"".join(frames), "text/event-stream"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--kind", choices=["json", "sse", "jsonl"], default="json")
    parser.add_argument("--pythonpath", default="")
    args = parser.parse_args()
    body, content_type = answer(args.kind, args.mb * 1024 * 1024)
    with FakeUpstream() as fake, tempfile.TemporaryDirectory() as folder:
        fake.script("/v1/big", Reply(body=body, headers={"content-type": content_type}))
        cassettes = Path(folder) / "cassettes"
        options = ["--mode", "record", "--cassettes", str(cassettes), "--max-record", "1GiB"]
        env = {"PYTHONPATH": args.pythonpath} if args.pythonpath else None
        server = Serve([*options, "--upstream", f"tool={fake.url}"], Path(folder), env)
        try:
            before = peak_rss_mb(server.process.pid)
            started = time.monotonic()
            with httpx.stream("GET", server.url + "/tool/v1/big", timeout=600) as response:
                received = sum(len(chunk) for chunk in response.iter_bytes())
            took = time.monotonic() - started
            peak = peak_rss_mb(server.process.pid)
        finally:
            server.stop()
        written = time.monotonic() - started
        files = [p for p in cassettes.rglob("*") if p.is_file()]
        blobs = [p for p in files if p.parent.name == "blobs"]
        exchange = max((p.stat().st_size for p in files if p not in blobs), default=0)
        stored = sum(p.stat().st_size for p in blobs)
    print(
        f"{args.kind} answer {received / 2**20:.0f} MB: peak RSS {before:.0f} -> {peak:.0f} MB "
        f"(+{peak - before:.0f}), {took:.1f} s ({written:.1f} s written); exchange file "
        f"{exchange / 1024:.1f} KB, {len(blobs)} blob(s) {stored / 2**20:.0f} MB"
    )


if __name__ == "__main__":
    main()
