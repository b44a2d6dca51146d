"""The viewer's page for a huge exchange (issue 45): a cassette of (a) a 60 MB SSE answer of
many small frames, (b) a request holding ~60 MB of text in its messages, (c) a WebSocket
session of many frames; `tapeproxy view` started as a user starts it (a fresh one for each
page, so each peak is its own), each exchange page fetched, and its time (and the server's
CPU time), HTML size and the server's peak RSS (VmHWM) printed; then its whole request
body, as the page's link gives it. `python bench/huge_exchange.py [--mb 60]`; on demand."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from tapeproxy.exchange.model import (
    Exchange,
    Frame,
    Session,
    SessionEnd,
    SocketFrame,
    StoredRequest,
    StoredResponse,
)
from tapeproxy.store.files import FileStore
from tapeproxy.store.protocol import exchange_file

CASSETTE = "huge"
WORD = "tokens "  # each SSE frame's delta


def sse(mb: int) -> Exchange:
    """A chat completion streamed as many ~110-byte frames, `mb` MB in all."""
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini"}
    line = json.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": WORD}}]})
    text = f"data: {line}\n\n"
    count = mb * 1_000_000 // len(text)
    frames = [Frame(ms=n // 100, text=text) for n in range(count)]
    frames.append(Frame(ms=count // 100, text="data: [DONE]\n\n"))
    body = {"json": {"model": "gpt-4o-mini", "stream": True, "messages": [_user("Go on.")]}}
    return _exchange("a", body, StoredResponse(status=200, dialect="sse", frames=frames))


def asked(mb: int) -> Exchange:
    """A request of `mb` MB of text in 1 MB messages (each one a blob), a short answer."""
    messages = [_user(f"part {n}: " + "lorem ipsum " * 87_000) for n in range(mb)]
    body = {"json": {"model": "gpt-4o-mini", "messages": messages}}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Read."}}]}
    return _exchange("b", body, StoredResponse(status=200, body={"json": answer}))


def socket(frames: int) -> Exchange:
    """A Realtime session: the client's turn, then `frames` transcript deltas."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
    sent = [{"type": "conversation.item.create", "item": item}, {"type": "response.create"}]
    heard = {"type": "response.audio_transcript.delta", "delta": "word "}
    shown = [SocketFrame(direction="client", type="text", ms=0, json=e) for e in sent]
    shown += [
        SocketFrame(direction="server", type="text", ms=n // 50, json=heard) for n in range(frames)
    ]
    session = Session(frames=shown, end=SessionEnd(ms=frames // 50, by="client", code=1000))
    request = StoredRequest(method="GET", upstream="openai", path="/v1/realtime")
    return Exchange(
        key="c" * 64,
        ordinal=1,
        seq=2,
        rules="r",
        request=request,
        response=StoredResponse(status=101),
        kind="websocket",
        session=session,
    )


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _exchange(letter: str, body: dict[str, Any], response: StoredResponse) -> Exchange:
    request = StoredRequest(method="POST", upstream="openai", path="/v1/chat/completions")
    request = request.model_copy(update={"body": body})
    return Exchange(
        key=letter * 64,
        ordinal=1,
        seq=ord(letter) - 97,
        rules="r",
        request=request,
        response=response,
    )


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system): on a shared machine, steadier than the
    wall clock."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(library: Path, name: str, file: str) -> None:
    """A fresh `tapeproxy view`, its peak at rest, then the exchange's page: time, size, peak."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    command = [sys.executable, "-m", "tapeproxy", "view", "--port", "0"]
    server = subprocess.Popen(
        [*command, "--cassettes", str(library)], stdout=subprocess.PIPE, text=True, env=environ
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" on ")[-1].strip()
        at_rest = peak_mb(server.pid)
        started, cpu = time.perf_counter(), cpu_s(server.pid)
        page = httpx.get(f"{url}exchange?cassette={CASSETTE}&file={file}", timeout=600)
        took, cpu = time.perf_counter() - started, cpu_s(server.pid) - cpu
        size = (library / CASSETTE / file).stat().st_size
        print(
            f"{name:<28} file {size / 1e6:6.1f} MB  page {took:6.2f} s (CPU {cpu:5.2f} s)  "
            f"HTML {len(page.content) / 1e3:9.1f} kB  status {page.status_code}  "
            f"peak RSS {peak_mb(server.pid):6.0f} MB (at rest {at_rest:.0f} MB)"
        )
        started = time.perf_counter()  # then the whole request body, as its link downloads it
        whole = f"{url}text?cassette={CASSETTE}&file={file}&part=request"
        with httpx.stream("GET", whole, timeout=600) as answer:
            got = sum(len(piece) for piece in answer.iter_bytes())
        took = time.perf_counter() - started
        print(
            f"{'':<28} whole request body {got / 1e6:6.1f} MB in {took:5.2f} s, "
            f"peak RSS since start {peak_mb(server.pid):6.0f} MB"
        )
    finally:
        server.terminate()
        server.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=60, help="size of (a) and (b), MB")
    parser.add_argument("--socket-frames", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        library = Path(folder) / "cassettes"
        store = FileStore(library)
        files = {}
        builds: list[tuple[str, Callable[[], Exchange]]] = [
            (f"(a) SSE answer, {args.mb} MB", partial(sse, args.mb)),
            (f"(b) request, {args.mb} MB text", partial(asked, args.mb)),
            (f"(c) WebSocket, {args.socket_frames} frames", partial(socket, args.socket_frames)),
        ]
        for name, build in builds:
            exchange = build()  # one at a time: the bench's own memory stays small
            store.write(CASSETTE, exchange, fresh=True)
            files[name] = exchange_file(exchange.key, exchange.ordinal)
            del exchange
        for name, file in files.items():
            measure(library, name, file)


if __name__ == "__main__":
    main()
