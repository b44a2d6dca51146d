"""A library of 100,000 recordings built in seconds (issue 45's table): exchange files written
directly in the on-disk format, keyed as tapeproxy keys them, of realistic sizes (chat
completions, a fifth of them streamed), in 1,000 cassettes, the largest holding 10,000 and
one holding 99 (for `show`). `python bench/big_library.py DIR` builds one."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from tapeproxy.engine.keying import request_key, stored_request
from tapeproxy.exchange.layout import render
from tapeproxy.exchange.model import StoredRequest
from tapeproxy.providers import Rulebook, provider_table
from tapeproxy.store.protocol import exchange_file

BIG, SHOW = "big", "show99"  # the 10,000-exchange cassette; the 99-exchange one
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
    "agents",
    "ask",
    "for",
    "more",
    "tokens",
]


def plan(exchanges: int, cassettes: int, largest: int) -> dict[str, int]:
    """Cassette name -> how many exchanges: one of `largest`, one of 99, the rest shared."""
    rest = exchanges - largest - 99
    others = cassettes - 2
    sizes = {BIG: largest, SHOW: 99}
    for n in range(others):
        sizes[f"suite/test_{n:04d}"] = rest // others + (1 if n < rest % others else 0)
    return sizes


def text(n: int, words: int) -> str:
    return " ".join(WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(words))


def request(cassette: str, n: int) -> dict[str, Any]:
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a careful assistant. " + text(n, 20)},
            {"role": "user", "content": f"{cassette} #{n}: " + text(n + 1, 60)},
        ],
        "temperature": 0,
    }
    return {
        "method": "POST",
        "upstream": "openai",
        "path": "/v1/chat/completions",
        "headers": {"content-type": "application/json"},
        "body": {"json": body},
    }


def response(n: int, streamed: bool) -> dict[str, Any]:
    answer = text(n + 2, 120)
    usage = {"prompt_tokens": 110 + n % 50, "completion_tokens": 120, "total_tokens": 230}
    head = {"content-type": "text/event-stream" if streamed else "application/json"}
    if not streamed:
        message = {"role": "assistant", "content": answer, "refusal": None}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1764000000}
        body |= {"model": "gpt-4o-mini-2024-07-18", "choices": [choice], "usage": usage}
        return {"status": 200, "headers": head, "body": {"json": body, "style": "compact"}}
    frames = []
    for i, word in enumerate(answer.split(" ")[:40]):
        delta = {"content": word + " "}
        chunk: dict[str, Any] = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk"}
        chunk["model"] = "gpt-4o-mini"
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
        frames.append({"ms": 20 * i, "text": f"data: {json.dumps(chunk)}\n\n"})
    final = {"id": f"chatcmpl-{n}", "choices": [], "usage": usage, "model": "gpt-4o-mini"}
    frames.append({"ms": 900, "text": f"data: {json.dumps(final)}\n\n"})
    frames.append({"ms": 901, "text": "data: [DONE]\n\n"})
    return {"status": 200, "headers": head, "dialect": "sse", "frames": frames}


def build(root: Path, exchanges: int, cassettes: int, largest: int) -> dict[str, Any]:
    """Write the library under `root`; what a benchmark needs to know about it."""
    rules = Rulebook.build(provider_table({}), ()).for_upstream("openai")
    fingerprint = rules.fingerprint()
    sample: dict[str, Any] = {}
    for cassette, size in plan(exchanges, cassettes, largest).items():
        folder = root / cassette
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(size):
            asked = request(cassette, n)
            key = request_key(stored_request(StoredRequest.model_validate(asked)), rules)
            record = {"schema_version": 1, "key": key, "ordinal": 1, "seq": n}
            record |= {"rules": fingerprint, "outcome": "complete"}
            record |= {"request": asked, "response": response(n, streamed=n % 5 == 4)}
            _write(folder / exchange_file(key, 1), render(record))
            if cassette == BIG and n == 0:
                sample = {"cassette": BIG, "body": asked["body"]["json"]}
    return sample


def _write(path: Path, data: bytes) -> None:
    """No temp file, no fsync: a benchmark's library, built once."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path, help="where to build it (made; must be empty)")
    parser.add_argument("--exchanges", type=int, default=100_000)
    parser.add_argument("--cassettes", type=int, default=1_000)
    parser.add_argument("--largest", type=int, default=10_000)
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    if any(args.root.iterdir()):
        parser.error(f"{args.root} is not empty")
    started = time.monotonic()
    sample = build(args.root, args.exchanges, args.cassettes, args.largest)
    (args.root.parent / f"{args.root.name}.sample.json").write_text(json.dumps(sample))
    print(f"built {args.exchanges:,} exchanges in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
