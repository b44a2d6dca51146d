"""The two servers the benchmark runs beside tapeproxy, each in its own process: the bare
starlette baseline and the fake provider upstream. Each prints `... ready on URL`.

    python bench/apps.py baseline     # uvicorn + starlette, same settings as tapeproxy
    python bench/apps.py fake         # aiohttp: chat completions, JSON or SSE
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

CREATED = 1_700_000_000
SSE_PATH = "/v1/sse"  # the baseline's stream: the frames the fake sends for a 100-frame model
SSE_FRAMES = 100
STREAM_MODEL = re.compile(r"^bench-sse-(\d+)x(\d+)ms$")
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "the",
    "proxy",
    "replays",
    "it",
]


def stream_model(frames: int, gap_ms: int) -> str:
    """The model name that asks the fake for `frames` SSE frames `gap_ms` apart."""
    return f"bench-sse-{frames}x{gap_ms}ms"


def chat_completion(model: str) -> bytes:
    """A ~1 KB chat completion, laid out like OpenAI's (2-space indent)."""
    content = " ".join(WORDS[i % len(WORDS)] for i in range(110))
    body = {
        "id": "chatcmpl-bench0000000000000000000001",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 110, "total_tokens": 122},
        "system_fingerprint": "fp_bench0001",
    }
    return json.dumps(body, indent=2).encode()


def chat_frames(model: str, count: int) -> list[bytes]:
    """`count` SSE frames of a streamed chat completion, the last one `data: [DONE]`."""
    frames = []
    for i in range(max(count - 1, 1)):
        last = i == count - 2
        chunk = {
            "id": "chatcmpl-bench0000000000000000000002",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {} if last else {"content": WORDS[i % len(WORDS)] + " "},
                    "finish_reason": "stop" if last else None,
                }
            ],
        }
        frames.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return frames


def listening_socket() -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto
    # says TCP, and without it Nagle + delayed ACK add ~40 ms to a response written twice.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def run_baseline() -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    body = chat_completion("bench-json")
    frames = chat_frames(stream_model(SSE_FRAMES, 0), SSE_FRAMES)

    async def completion(request: Request) -> Response:
        await request.body()
        return Response(body, media_type="application/json")

    async def stream(request: Request) -> Response:
        await request.body()

        async def each() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame

        return StreamingResponse(each(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", completion, methods=["POST"]),
            Route(SSE_PATH, stream, methods=["POST"]),
        ]
    )

    class ReadyServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"baseline ready on http://127.0.0.1:{port}", flush=True)

    # The uvicorn settings of tapeproxy's cli/server.py: one worker bound by uvicorn itself on
    # port 0, no access log, warnings only, no server header, no X-Forwarded-* middleware.
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
        proxy_headers=False,
    )
    ReadyServer(config).run()


async def serve_fake() -> None:
    from aiohttp import web

    async def completion(request: web.Request) -> web.StreamResponse:
        payload: dict[str, Any] = await request.json()
        model = str(payload.get("model", "bench-json"))
        match = STREAM_MODEL.match(model)
        if not payload.get("stream") or match is None:
            return web.Response(body=chat_completion(model), content_type="application/json")
        count, gap = int(match.group(1)), int(match.group(2)) / 1000
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i, frame in enumerate(chat_frames(model, count)):
            if i and gap:
                await asyncio.sleep(gap)
            await response.write(frame)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completion)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = listening_socket()
    await web.SockSite(runner, sock).start()
    print(f"fake ready on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str]) -> int:
    if argv == ["baseline"]:
        run_baseline()
    elif argv == ["fake"]:
        asyncio.run(serve_fake())
    else:
        print("usage: apps.py baseline|fake", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
