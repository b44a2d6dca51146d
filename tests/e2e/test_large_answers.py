"""Answers larger than SPOOL_AFTER: spooled to a scratch file while they stream, written to
the cassette piece by piece, replayed byte for byte; nothing left behind, memory bounded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import openai

from tapeproxy.engine.spool import SPOOL_AFTER
from tapeproxy.exchange.blobs import unpack
from tapeproxy.store.blobs import BLOBS
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, library_files, wait_for
from tests.support.serve import record_in_serve

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "a long one"}]}


def chat_stream(frames: int, words: str = "the quick brown fox é ") -> str:
    """A streamed chat completion of `frames` content frames, usage in the last chunk."""
    events = []
    for i in range(frames):
        chunk = {
            "id": "chatcmpl-big",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": f"{i} {words}"}, "finish_reason": None}],
        }
        events.append(f"data: {json.dumps(chunk)}\n\n")
    last = {
        "id": "chatcmpl-big",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": frames, "total_tokens": frames + 7},
    }
    return "".join(events) + f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n"


def only_exchange(cassettes: Path) -> tuple[Path, dict[str, object]]:
    """The one exchange file, and what it holds with its blobs (beside it) joined back."""
    files = [path for path in library_files(cassettes) if path.parent.name != BLOBS]
    assert len(files) == 1, f"one exchange file and nothing else (the journal aside): {files}"
    blobs = files[0].parent / BLOBS
    return files[0], unpack(json.loads(files[0].read_bytes()), lambda d: (blobs / d).read_bytes())


def test_a_large_stream_is_spooled_and_replays_frame_for_frame(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    body = chat_stream(40_000)
    assert len(body.encode()) > 3 * SPOOL_AFTER
    headers = {"content-type": "text/event-stream"}
    fake.script("/v1/chat/completions", Reply(body=body, headers=headers, chunked=True))
    recorder = make_proxy(mode="record")
    client = openai.OpenAI(base_url=recorder.url + "/openai/v1", api_key=SECRET_OPENAI)
    live = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**CHAT, stream=True)  # type: ignore[call-overload]
        if c.choices
    )
    wait_for(lambda: recorder.stats["recorded"] == 1)  # the SDK stops reading at [DONE]
    _, stored = only_exchange(cassettes)
    assert stored["usage"] == {"input_tokens": 7, "output_tokens": 40_000}
    response = stored["response"]
    assert isinstance(response, dict) and len(response["frames"]) == 40_002

    player = make_proxy(mode="replay", repeat="repeat-last")
    raw = httpx.post(player.url + "/openai/v1/chat/completions", json={**CHAT, "stream": True})
    assert raw.content == body.encode(), "byte for byte"
    client = openai.OpenAI(base_url=player.url + "/openai/v1", api_key=SECRET_OPENAI)
    replayed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**CHAT, stream=True)  # type: ignore[call-overload]
        if c.choices
    )
    assert replayed == live and live.startswith("0 the quick")


def test_a_large_json_body_is_kept_as_text_and_replays_byte_for_byte(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    vectors = [[i / 7 for i in range(1536)] for _ in range(100)]
    data = {"object": "list", "data": [{"embedding": v} for v in vectors], "usage": {}}
    answer = json.dumps(data, indent=2)
    assert len(answer) > 2 * SPOOL_AFTER
    fake.script("/v1/embeddings", Reply(body=answer, headers={"content-type": "application/json"}))
    proxy = make_proxy(mode="record")
    live = httpx.post(proxy.url + "/openai/v1/embeddings", json={"model": "m", "input": "x"})
    assert live.content == answer.encode()
    _, stored = only_exchange(cassettes)
    response = stored["response"]
    assert isinstance(response, dict) and response["body"] == {"text": answer}

    player = make_proxy(mode="replay")
    raw = httpx.post(player.url + "/openai/v1/embeddings", json={"model": "m", "input": "x"})
    assert raw.content == answer.encode()
    assert [d["embedding"] for d in raw.json()["data"]] == vectors


def test_a_large_binary_body_is_kept_as_base64_and_replays_byte_for_byte(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    audio = os.urandom(3 * SPOOL_AFTER + 1)  # not a multiple of 3: base64 pieces join right
    fake.script("/v1/audio/speech", Reply(body=audio, headers={"content-type": "audio/mpeg"}))
    proxy = make_proxy(mode="record")
    speech = {"model": "tts-1", "input": "hi", "voice": "alloy"}
    assert httpx.post(proxy.url + "/openai/v1/audio/speech", json=speech).content == audio
    _, stored = only_exchange(cassettes)
    response = stored["response"]
    assert isinstance(response, dict) and "base64" in response["body"]
    player = make_proxy(mode="replay", repeat="repeat-last")
    assert httpx.post(player.url + "/openai/v1/audio/speech", json=speech).content == audio


def test_redaction_rules_apply_to_a_large_answer_too(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    secret = "sk-live-" + "q" * 24
    answer = ("x" * 1000 + "\n") * (2 * SPOOL_AFTER // 1000) + f"token {secret} end\n"
    fake.script("/v1/files/f/content", Reply(body=answer, headers={"content-type": "text/plain"}))
    proxy = make_proxy(mode="record", redact_pattern=[r"sk-live-\w+"])
    assert httpx.get(proxy.url + "/openai/v1/files/f/content").text == answer
    # Held whole to be scrubbed, the answer's text is a blob beside its exchange file.
    files = library_files(cassettes)
    assert len(files) == 2 and files[0].parent.name == "blobs", files
    text = "".join(path.read_text() for path in files)
    assert secret not in text and "token [redacted" in text.replace("\\n", "\n")


def test_an_abandoned_large_answer_leaves_nothing_behind(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    body = chat_stream(500_000)  # 60 MB: more than the sockets between can buffer
    headers = {"content-type": "text/event-stream"}
    fake.script("/v1/chat/completions", Reply(body=body, headers=headers, chunked=True))
    proxy = make_proxy(mode="record")
    url = proxy.url + "/openai/v1/chat/completions"
    with httpx.stream("POST", url, json={**CHAT, "stream": True}) as response:
        got = 0
        for chunk in response.iter_bytes():
            got += len(chunk)
            if got > 2 * SPOOL_AFTER:
                break  # hang up mid-answer, past the spool threshold
    wait_for(lambda: proxy.stats["aborted"] == 1)
    assert proxy.stats["recorded"] == 0
    assert not [p for p in cassettes.rglob("*") if p.is_file()], "no exchange, no scratch file"


def test_recording_a_large_answer_holds_no_copy_of_it_in_memory(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """`tapeproxy serve` in its own process records a 48 MB answer: its peak RSS grows by the
    pieces it handles (a few MB), not by copies of the answer (before the spool: 300 MB)."""
    size = 48 * 1024 * 1024
    answer = b"".join(b"%07d " % i + b"y" * 56 + b"\n" for i in range(size // 64))
    reply = Reply(body=answer, headers={"content-type": "text/plain"})
    received, growth = record_in_serve(fake, tmp_path, "/v1/big", reply)
    assert received == len(answer)
    path, _ = only_exchange(tmp_path / "cassettes")
    [blob] = (path.parent / BLOBS).iterdir()  # the answer, a run of no double quote: a blob
    assert blob.stat().st_size == len(answer) and path.stat().st_size < 4096
    assert growth < 24, f"tapeproxy's peak RSS grew {growth:.0f} MB"
