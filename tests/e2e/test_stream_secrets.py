"""Secrets split across stream frames, through the real server, for every stream dialect: a
recording with a --redact-pattern (or `tapeproxy redact --pattern` afterwards) leaves no
8-character piece of the secret in the library, `verify` passes, and the official SDK (or
a raw client) replays the stream and reads the scrubbed text. And well-known keys are
scrubbed with no option given, in a JSON answer and in a stream, unless opted out."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.engine.spool import SPOOL_AFTER
from tapeproxy.redaction.secrets import MARKER
from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.support import library_files, wait_for

# Built here, not written whole: a secret scanner looking at the repository finds no key.
SECRET = "sk-" + "proj-" + "ABCDEF" + "GHIJKLMNOPQRSTUVWXYZ" + "0123456789"
PATTERN = r"sk-proj-[A-Za-z0-9]+"
BEFORE, AFTER = "Your key is ", " ok"
SPLITS = [(1,), (len(SECRET) // 2,), (len(SECRET) - 1,), (5, 30)]


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sse(event: str | None, payload: Any) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {compact(payload)}\n\n"


def http(frames: list[str], content_type: str) -> bytes:
    """A whole HTTP/1.1 answer sending each frame as its own chunk."""
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n"
        "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    ).encode()
    chunks = [b"%x\r\n%s\r\n" % (len(f.encode()), f.encode()) for f in frames]
    return head + b"".join(chunks) + b"0\r\n\r\n"


def pieces(cuts: tuple[int, ...], secret: str = SECRET) -> list[str]:
    out = [secret[a:b] for a, b in itertools.pairwise([0, *cuts, len(secret)])]
    out[0], out[-1] = BEFORE + out[0], out[-1] + AFTER
    return out


def chat_answer(texts: list[str]) -> bytes:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    frames = [
        sse(None, {**base, "choices": [{"index": 0, "delta": {"content": t}}]}) for t in texts
    ]
    end = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return http([*frames, sse(None, end), "data: [DONE]\n\n"], "text/event-stream")


def chat_call(url: str, n: int) -> str:
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": f"case {n}"}]
    chunks = client.chat.completions.create(model="m", messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def responses_answer(texts: list[str]) -> bytes:
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    kind = "response.output_text.delta"
    frames = [sse(kind, {"type": kind, **where, "delta": t, "sequence_number": 1}) for t in texts]
    done = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
    final = {"type": "response.completed", "response": done, "sequence_number": 9}
    return http([*frames, sse("response.completed", final)], "text/event-stream")


def responses_call(url: str, n: int) -> str:
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key="unused", max_retries=0)
    events = client.responses.create(model="m", input=f"case {n}", stream=True)
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def anthropic_answer(texts: list[str]) -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    frames = [
        sse("message_start", {"type": "message_start", "message": message}),
        sse("content_block_start", block),
    ]
    for t in texts:
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": t},
        }
        frames.append(sse("content_block_delta", delta))
    end = {"stop_reason": "end_turn", "stop_sequence": None}
    frames += [
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse(
            "message_delta", {"type": "message_delta", "delta": end, "usage": {"output_tokens": 5}}
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return http(frames, "text/event-stream")


def anthropic_call(url: str, n: int) -> str:
    client = anthropic.Anthropic(base_url=url + "/anthropic", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": f"case {n}"}]
    events = client.messages.create(model="m", max_tokens=9, messages=messages, stream=True)
    return "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


GEMINI = "/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent"


def gemini_answer(texts: list[str]) -> bytes:
    chunks: list[dict[str, Any]] = [
        {"candidates": [{"content": {"parts": [{"text": t}], "role": "model"}}]} for t in texts
    ]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    return http([f"data: {compact(c)}\r\n\r\n" for c in chunks], "text/event-stream")


def gemini_call(url: str, n: int) -> str:
    body = {"contents": [{"parts": [{"text": f"case {n}"}]}]}
    answer = httpx.post(url + GEMINI, params={"alt": "sse"}, json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    payloads = [
        json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")
    ]
    return "".join(p["candidates"][0]["content"]["parts"][0]["text"] for p in payloads)


def ollama_answer(texts: list[str]) -> bytes:
    lines = [
        compact({"model": "m", "message": {"role": "assistant", "content": t}, "done": False})
        for t in texts
    ]
    lines.append(
        compact({"model": "m", "message": {"role": "assistant", "content": ""}, "done": True})
    )
    return http([line + "\n" for line in lines], "application/x-ndjson")


def ollama_call(url: str, n: int) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": f"case {n}"}]}
    answer = httpx.post(url + "/ollama/api/chat", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return "".join(json.loads(line)["message"]["content"] for line in answer.text.splitlines())


@dataclass(frozen=True)
class Case:
    name: str
    upstream: str
    answer: Callable[[list[str]], bytes]
    call: Callable[[str, int], str]


CASES = [
    Case("openai-chat", "openai", chat_answer, chat_call),
    Case("openai-responses", "openai", responses_answer, responses_call),
    Case("anthropic", "anthropic", anthropic_answer, anthropic_call),
    Case("gemini", "gemini", gemini_answer, gemini_call),
    Case("ollama", "ollama", ollama_answer, ollama_call),
]
USER_RULES: dict[str, Any] = {"redact_pattern": (PATTERN,), "redact_keep": ("all",)}


def leftovers(library: Path, secret: str = SECRET) -> list[str]:
    """Every 8-character piece of `secret` found in a file of the library."""
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in library_files(library)]
    every = "\n".join(texts)
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in every]


def record(make_proxy: MakeProxy, case: Case, splits: list[tuple[int, ...]], **rules: Any) -> None:
    with RawUpstream() as raw:
        raw.answer(*(case.answer(pieces(cuts)) for cuts in splits))
        recorder = make_proxy(mode="record", upstream={case.upstream: raw.url}, **rules)
        for n in range(len(splits)):  # live, the client reads what the upstream sent
            assert case.call(recorder.url, n) == BEFORE + SECRET + AFTER
        wait_for(lambda: recorder.stats["recorded"] == len(splits))
    recorder.stop()


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_split_secret_is_scrubbed_when_recorded_and_replays_scrubbed(
    case: Case, make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, case, SPLITS, **USER_RULES)
    assert len(library_files(cassettes)) == len(SPLITS)
    assert leftovers(cassettes) == []
    assert cli("verify", "--cassettes", str(cassettes))[0] == 0
    player = make_proxy(mode="replay", **USER_RULES)
    for n in range(len(SPLITS)):
        assert case.call(player.url, n) == BEFORE + MARKER + AFTER


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_redact_pattern_scrubs_a_split_secret_from_an_existing_cassette(
    case: Case, make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, case, SPLITS[1:2], redact_keep=("all",))
    assert leftovers(cassettes), "recorded as it came: the test must see the secret first"
    where = ["--cassettes", str(cassettes)]
    code, out = cli("redact", "default", "--pattern", PATTERN, "--keep", "all", *where)
    assert code == 0, out
    assert leftovers(cassettes) == []
    assert cli("verify", *where)[0] == 0
    player = make_proxy(mode="replay", **USER_RULES)
    assert case.call(player.url, 0) == BEFORE + MARKER + AFTER


def a_key() -> str:
    """A realistic OpenAI key, made up at runtime."""
    return "sk-" + "proj-" + "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zC" * 2


def json_answer(text: str) -> bytes:
    body = compact(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"connection: close\r\n\r\n" + body


def ask(url: str, question: str, stream: bool) -> str:
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": question}]
    if not stream:
        answer = client.chat.completions.create(model="m", messages=messages)
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="m", messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("keep", [(), ("openai",), ("all",)], ids=["default", "openai", "all"])
def test_a_well_known_key_is_scrubbed_with_no_option_and_kept_when_opted_out(
    keep: tuple[str, ...], make_proxy: MakeProxy, cassettes: Path
) -> None:
    key = a_key()
    question = f"is {key} still valid?"  # a key in the request body too
    split = pieces((7, 40), key)
    with RawUpstream() as raw:
        raw.answer(json_answer(f"{BEFORE}{key}{AFTER}"), chat_answer(split))
        recorder = make_proxy(mode="record", redact_keep=keep, upstream={"openai": raw.url})
        assert ask(recorder.url, question, stream=False) == BEFORE + key + AFTER
        assert ask(recorder.url, question, stream=True) == BEFORE + key + AFTER
        wait_for(lambda: recorder.stats["recorded"] == 2)
    recorder.stop()
    kept = [f"--keep={name}" for name in keep]  # else verify flags the keys left, rightly
    assert cli("verify", "--cassettes", str(cassettes), *kept)[0] == 0
    player = make_proxy(mode="replay", redact_keep=keep)
    seen = BEFORE + (key if keep else MARKER) + AFTER
    assert ask(player.url, question, stream=False) == seen  # keyed the same: a hit
    assert ask(player.url, question, stream=True) == seen
    assert bool(leftovers(cassettes, key)) == bool(keep)


def test_a_key_in_a_stream_too_large_to_hold_is_scrubbed_a_window_at_a_time(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """Past SPOOL_AFTER, with only the key formats to scrub, the frames are scrubbed a window
    at a time as they are written (the answer is not read back whole): a key within one
    frame is caught, and one split across two frames."""
    key = a_key()
    texts = ["filler " * 60] * 3_000
    texts[1_500] = f"here: {key} "
    texts[2_000], texts[2_001] = f"split: {key[:20]}", f"{key[20:]} there"
    with RawUpstream() as raw:
        raw.answer(chat_answer(texts))
        recorder = make_proxy(mode="record", upstream={"openai": raw.url})
        assert key in ask(recorder.url, "long", stream=True)
        wait_for(lambda: recorder.stats["recorded"] == 1)
    recorder.stop()
    [stored] = [p for p in library_files(cassettes) if p.suffix == ".json"]
    assert stored.stat().st_size > SPOOL_AFTER
    assert leftovers(cassettes, key) == []
    player = make_proxy(mode="replay")
    answer = ask(player.url, "long", stream=True)
    assert f"here: {MARKER} " in answer and len(answer) > SPOOL_AFTER
    assert f"split: {MARKER} there" in answer


def test_redact_with_no_rule_scrubs_the_key_formats_and_rekeys_an_older_cassette(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """A cassette recorded without the key formats (as before they were scrubbed) holds a
    key in a request and an answer: a bare `tapeproxy redact NAME` scrubs both and re-keys
    the recording, which a replay with the defaults then finds."""
    key = a_key()
    question = f"is {key} still valid?"
    with RawUpstream() as raw:
        raw.answer(chat_answer(pieces((12,), key)))
        recorder = make_proxy(mode="record", redact_keep=("all",), upstream={"openai": raw.url})
        assert ask(recorder.url, question, stream=True) == BEFORE + key + AFTER
        wait_for(lambda: recorder.stats["recorded"] == 1)
    recorder.stop()
    [before] = library_files(cassettes)
    where = ["--cassettes", str(cassettes)]
    code, out = cli("redact", "default", *where)
    assert code == 0, out
    [after] = library_files(cassettes)
    assert after.name != before.name, "the request changed: re-keyed"
    assert leftovers(cassettes, key) == []
    assert cli("verify", *where)[0] == 0
    player = make_proxy(mode="replay")
    assert ask(player.url, question, stream=True) == BEFORE + MARKER + AFTER
