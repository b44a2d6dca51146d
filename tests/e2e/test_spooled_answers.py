"""Answers too large to hold (past SPOOL_AFTER), recorded through a spool: replayed byte
for byte, their outcomes, concurrency, failure paths, leftovers, memory."""

from __future__ import annotations

import base64
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tapeproxy.engine.spool import SPOOL_AFTER
from tapeproxy.exchange.blobs import unpack
from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import wait_for
from tests.support.serve import record_in_serve

CHAT = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
ROOT = Path(__file__).resolve().parents[2]


def chunked(body: bytes, content_type: str, sizes: Iterator[int]) -> bytes:
    """A whole HTTP/1.1 answer with `body` sent in chunks of the given sizes."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type.encode() + b"\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    out = [head]
    at = 0
    while at < len(body):
        size = next(sizes)
        piece = body[at : at + size]
        out.append(b"%x\r\n" % len(piece) + piece + b"\r\n")
        at += size
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def cycling(*sizes: int) -> Iterator[int]:
    while True:
        yield from sizes


def exchanges(cassettes: Path) -> list[dict[str, object]]:
    """Each exchange file's data, its blobs (a long body's runs) joined back."""
    return [joined(path) for path in sorted(cassettes.rglob("[0-9a-f]*.json"))]


def joined(path: Path) -> dict[str, object]:
    def blob(digest: str) -> bytes:
        return (path.parent / "blobs" / digest).read_bytes()

    return unpack(json.loads(path.read_bytes()), blob)


def every_file(cassettes: Path) -> list[Path]:
    return sorted(p for p in cassettes.rglob("*") if p.is_file())


def openai_events(count: int, sep: bytes = b"\n", text: str = "x\u00e9\u4e2d\U0001f600 ") -> bytes:
    """An OpenAI chat stream of `count` content events, line ends `sep`, ending in [DONE]."""
    events = []
    for i in range(count):
        chunk = {"choices": [{"index": 0, "delta": {"content": f"{i} {text}"}}]}
        events.append(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + sep + sep)
    return b"".join(events) + b"data: [DONE]" + sep + sep


def record_and_replay(
    make_proxy: MakeProxy, cassettes: Path, raw_answer: bytes, path: str, body: object
) -> tuple[bytes, bytes, dict[str, object]]:
    """Record `raw_answer` from a raw upstream through tapeproxy, then replay it."""
    with RawUpstream() as raw:
        raw.answer(raw_answer)
        recorder = make_proxy(mode="record", upstream={"openai": raw.url, "gemini": raw.url})
        live = httpx.post(recorder.url + path, json=body, timeout=60)
        wait_for(lambda: recorder.stats["recorded"] == 1)
    [stored] = exchanges(cassettes)
    player = make_proxy(mode="replay", repeat="repeat-last")
    again = httpx.post(player.url + path, json=body, timeout=60)
    return live.content, again.content, stored


SSE_CASES = {
    "lf": openai_events(20_000),
    "crlf": openai_events(20_000, b"\r\n"),
    "cr-only": openai_events(20_000, b"\r"),
    # a comment, an empty event and stray blank lines between events
    "empty-frames": openai_events(14_000).replace(b"\n\n", b"\n\n:\n\n\n\n", 3000),
    # one event larger than SPOOL_AFTER, among ordinary ones
    "one-huge-frame": openai_events(50)
    .replace(b"data: [DONE]\n\n", b"")
    .__add__(
        b"data: "
        + json.dumps(
            {"choices": [{"index": 0, "delta": {"content": "z" * (SPOOL_AFTER + 77)}}]}
        ).encode()
        + b"\n\n"
    )
    .__add__(openai_events(50)),
    # bytes that are no UTF-8 inside frames (kept as base64 frames)
    "invalid-utf8": openai_events(20_000).replace(b"\xc3\xa9", b"\xff\xfe", 500),
}


@pytest.mark.parametrize("case", list(SSE_CASES))
def test_a_spooled_sse_stream_replays_byte_for_byte(
    make_proxy: MakeProxy, cassettes: Path, case: str
) -> None:
    body = SSE_CASES[case]
    assert len(body) > SPOOL_AFTER
    # chunk sizes that split lines, CRLFs and UTF-8 characters at many positions
    answer = chunked(body, "text/event-stream", cycling(1, 2, 3, 5, 7, 4093, 1, 65_537, 13))
    live, again, stored = record_and_replay(
        make_proxy, cassettes, answer, "/openai/v1/chat/completions", CHAT
    )
    assert live == body
    assert again == body, "byte for byte"
    assert stored["outcome"] == "complete"


def test_a_spooled_ndjson_stream_replays_byte_for_byte(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    lines = [
        json.dumps({"model": "m", "message": {"content": f"{i} \u00e9\u4e2d"}, "done": False})
        for i in range(20_000)
    ]
    lines.append(json.dumps({"model": "m", "done": True, "prompt_eval_count": 3, "eval_count": 9}))
    body = ("\n".join(lines) + "\n").encode()
    answer = chunked(body, "application/x-ndjson", cycling(7, 1, 3, 8191))
    ollama = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with RawUpstream() as raw:
        raw.answer(answer)
        recorder = make_proxy(mode="record", upstream={"ollama": raw.url})
        live = httpx.post(recorder.url + "/ollama/api/chat", json=ollama, timeout=60)
        wait_for(lambda: recorder.stats["recorded"] == 1)
    assert live.content == body
    [stored] = exchanges(cassettes)
    assert stored["outcome"] == "complete"
    assert stored["usage"] == {"input_tokens": 3, "output_tokens": 9}
    player = make_proxy(mode="replay")
    assert httpx.post(player.url + "/ollama/api/chat", json=ollama).content == body


def gemini_array(items: int, last: object) -> bytes:
    chunk = {"candidates": [{"content": {"parts": [{"text": "abc \u00e9 " * 20}]}}]}
    parts = [json.dumps(chunk) for _ in range(items)] + [json.dumps(last)]
    return ("[" + ",\r\n".join(parts) + "]").encode()


GEMINI_PATH = "/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent"
GEMINI_BODY = {"contents": [{"parts": [{"text": "hi"}]}]}
GEMINI_END = {
    "candidates": [{"content": {"parts": [{"text": "."}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 5},
}


def test_a_spooled_gemini_json_stream_replays_byte_for_byte(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    body = gemini_array(6_000, GEMINI_END)
    assert len(body) > SPOOL_AFTER
    answer = chunked(body, "application/json; charset=UTF-8", cycling(1, 5, 4099, 2))
    live, again, stored = record_and_replay(make_proxy, cassettes, answer, GEMINI_PATH, GEMINI_BODY)
    assert live == body and again == body
    assert stored["outcome"] == "complete"


@pytest.mark.parametrize("items", [100, 6_000], ids=["small", "spooled"])
def test_an_in_band_error_ends_a_gemini_json_stream_whatever_its_size(
    make_proxy: MakeProxy, cassettes: Path, items: int
) -> None:
    """A Gemini stream (JSON array) ending in an `{"error": ...}` item is a stream error, not
    a complete answer: with --record-failures off it is not recorded. Below SPOOL_AFTER it is
    caught; past it the spooled path skips every JSON-dialect frame and records it as
    complete, to be replayed as a good answer."""
    error = {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
    body = gemini_array(items, error)
    answer = chunked(body, "application/json; charset=UTF-8", cycling(65_536))
    with RawUpstream() as raw:
        raw.answer(answer)
        recorder = make_proxy(mode="record", upstream={"gemini": raw.url})
        live = httpx.post(recorder.url + GEMINI_PATH, json=GEMINI_BODY, timeout=60)
        assert live.content == body
    assert exchanges(cassettes) == [], "an errored stream is not recorded as complete"
    assert recorder.stats["recorded"] == 0


def test_a_spooled_gemini_json_stream_keeps_its_usage(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """Usage is read from the first and last payloads of a spooled stream; a Gemini JSON
    stream past SPOOL_AFTER gets none (its usage sits in its last item)."""
    body = gemini_array(6_000, GEMINI_END)
    answer = chunked(body, "application/json", cycling(65_536))
    _, _, stored = record_and_replay(make_proxy, cassettes, answer, GEMINI_PATH, GEMINI_BODY)
    assert stored["usage"] == {"input_tokens": 4, "output_tokens": 5}


def test_a_request_with_a_lone_surrogate_and_a_spooled_answer_replays(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """The exchange file falls back to ASCII escapes: the spooled frames must follow."""
    body = openai_events(20_000)
    answer = chunked(body, "text/event-stream", cycling(65_536))
    request = json.dumps({**CHAT, "user": "\ud800"}).encode()
    with RawUpstream() as raw:
        raw.answer(answer)
        recorder = make_proxy(mode="record", upstream={"openai": raw.url})
        url = recorder.url + "/openai/v1/chat/completions"
        live = httpx.post(url, content=request, headers={"content-type": "application/json"})
        wait_for(lambda: recorder.stats["recorded"] == 1)
    assert live.content == body
    [path] = every_file(cassettes)
    path.read_bytes().decode("ascii")  # escaped whole
    player = make_proxy(mode="replay")
    url = player.url + "/openai/v1/chat/completions"
    again = httpx.post(url, content=request, headers={"content-type": "application/json"})
    assert again.content == body


def test_spooled_text_body_with_characters_split_across_read_pieces(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    # 4-byte characters at every offset modulo 4 around each READ_PIECE boundary
    text = ("a" + "\U0001f600" * 300_000 + "bc" + "\u00e9" * 200_000 + '\r\n\x00"\\').encode()
    fake.script("/v1/text", Reply(body=text, headers={"content-type": "text/plain"}))
    recorder = make_proxy(mode="record", upstream={"tool": fake.url})
    assert httpx.get(recorder.url + "/tool/v1/text").content == text
    [stored] = exchanges(cassettes)
    response = stored["response"]
    assert isinstance(response, dict) and response["body"] == {"text": text.decode()}
    player = make_proxy(mode="replay", upstream={"tool": fake.url})
    assert httpx.get(player.url + "/tool/v1/text").content == text


def test_spooled_invalid_utf8_text_body_is_base64(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    text = b"x" * (2 * SPOOL_AFTER) + b"\xe2\x82" + b"y" * 10
    fake.script("/v1/text", Reply(body=text, headers={"content-type": "text/plain"}))
    recorder = make_proxy(mode="record", upstream={"tool": fake.url})
    assert httpx.get(recorder.url + "/tool/v1/text").content == text
    [stored] = exchanges(cassettes)
    response = stored["response"]
    assert isinstance(response, dict)
    assert base64.b64decode(response["body"]["base64"]) == text
    player = make_proxy(mode="replay", upstream={"tool": fake.url})
    assert httpx.get(player.url + "/tool/v1/text").content == text


def limited_serve(args: list[str], cwd: Path, max_file: int) -> tuple[subprocess.Popen[str], str]:
    """`tapeproxy serve` whose files cannot grow past `max_file` bytes (RLIMIT_FSIZE, its
    SIGXFSZ ignored): every write past it fails with EFBIG, as on a full disk."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file, max_file))

    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    environ["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen(
        [sys.executable, "-m", "tapeproxy", "serve", "--port", "0", *args],
        cwd=cwd,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().split("ready on ")[-1].strip()


@pytest.mark.parametrize("where", ["spill", "finish", "exchange-file"])
def test_a_full_disk_while_recording_a_large_stream_is_reported_and_harmless(
    tmp_path: Path, where: str
) -> None:
    """The client gets the whole answer with a clean end; the log says what failed, without
    a traceback; the failure is counted; nothing is left in the cassette folder."""
    body = openai_events(40_000)  # ~3.7 MB
    limits = {
        "spill": SPOOL_AFTER + SPOOL_AFTER // 2,  # a flush mid-answer fails
        "finish": len(body) - 1,  # only the last flush (when the answer is finished) fails
        "exchange-file": len(body) + 1024,  # the spool fits, the exchange file does not
    }
    cassettes = tmp_path / "cassettes"
    with RawUpstream() as raw:
        raw.answer(chunked(body, "text/event-stream", cycling(4096)))
        args = [
            "--mode",
            "record",
            "--cassettes",
            str(cassettes),
            "--upstream",
            f"openai={raw.url}",
        ]
        process, url = limited_serve(args, tmp_path, limits[where])
        try:
            got = httpx.post(url + "/openai/v1/chat/completions", json=CHAT, timeout=60)
            stats = httpx.get(url + "/__tapeproxy/stats").json()
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
    assert got.content == body, "the client gets the answer whole"
    assert stats["recorded"] == 0 and stats["write_failures"] == 1, stats
    assert "Traceback" not in err, err
    assert "could not" in err or "not recorded" in err, err
    assert every_file(cassettes) == [], "no exchange, no temp file, no scratch file"


@pytest.mark.parametrize("mode", ["record", "auto"])
def test_many_concurrent_large_recordings_of_one_request_are_numbered_and_kept_apart(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, mode: str
) -> None:
    clients = 12
    bodies = [openai_events(14_000, text=f"answer-{n} \u00e9 ") for n in range(clients)]
    assert all(len(b) > SPOOL_AFTER for b in bodies)
    sse = {"content-type": "text/event-stream"}
    for b in bodies:
        fake.script("/v1/chat/completions", Reply(body=b, headers=sse, chunked=True))
    proxy = make_proxy(mode=mode)
    url = proxy.url + "/openai/v1/chat/completions"
    with ThreadPoolExecutor(clients) as pool:
        got = list(pool.map(lambda _: httpx.post(url, json=CHAT, timeout=120).content, range(12)))
    assert sorted(got) == sorted(bodies)
    stored = exchanges(cassettes)
    assert sorted(int(str(e["ordinal"])) for e in stored) == list(range(1, clients + 1))
    assert proxy.stats["recorded"] == clients
    texts = []
    for exchange in stored:
        response = exchange["response"]
        assert isinstance(response, dict)
        texts.append("".join(f["text"] for f in response["frames"]).encode())
    assert sorted(texts) == sorted(bodies), "each file holds one answer, whole"
    assert not [p for p in every_file(cassettes) if p.name.endswith(".tmp")]


def test_a_put_switching_cassettes_while_large_answers_are_written(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    clients = 6
    bodies = [openai_events(14_000, text=f"answer-{n} ") for n in range(clients)]
    sse = {"content-type": "text/event-stream"}
    for b in bodies:
        fake.script("/v1/chat/completions", Reply(body=b, headers=sse, chunked=True))
    fake.frame_delay = 0.0
    proxy = make_proxy(mode="record")
    proxy.put_cassette(cassette="first")
    url = proxy.url + "/openai/v1/chat/completions"
    with ThreadPoolExecutor(clients + 1) as pool:
        futures = [pool.submit(httpx.post, url, json=CHAT, timeout=120) for _ in range(clients)]
        switched = pool.submit(proxy.put_cassette, cassette="second")
        got = sorted(f.result().content for f in futures)
        assert switched.result().status_code == 200
    assert got == sorted(bodies)
    stored = exchanges(cassettes)
    assert proxy.stats["recorded"] == len(stored)
    firsts = sorted(int(str(e["ordinal"])) for e in exchanges(cassettes / "first"))
    seconds = sorted(int(str(e["ordinal"])) for e in exchanges(cassettes / "second"))
    assert firsts == list(range(1, len(firsts) + 1)), firsts
    assert seconds == list(range(1, len(seconds) + 1)), seconds
    assert len(firsts) + len(seconds) == clients
    assert not [p for p in every_file(cassettes) if p.name.endswith(".tmp")]


def test_spooled_stream_outcomes_truncated_cut_and_stream_error(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    sse = {"content-type": "text/event-stream"}
    whole = openai_events(20_000)
    truncated = whole.replace(b"data: [DONE]\n\n", b"")
    errored = truncated + b'data: {"error": {"message": "overloaded"}}\n\n'
    for body in (truncated, errored):
        fake.script("/v1/chat/completions", Reply(body=body, headers=sse, chunked=True))
    proxy = make_proxy(mode="record", record_failures=True, repeat="repeat-last")
    url = proxy.url + "/openai/v1/chat/completions"
    assert httpx.post(url, json=CHAT, timeout=60).content == truncated
    assert httpx.post(url, json=CHAT, timeout=60).content == errored
    outcomes = sorted(str(e["outcome"]) for e in exchanges(cassettes))
    assert outcomes == ["stream_error", "truncated"]


def test_a_client_that_hangs_up_after_the_final_frame_of_a_large_stream_keeps_it(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    sse = {"content-type": "text/event-stream"}
    # idle comments after [DONE] do not hide it
    body = openai_events(20_000) + b": keep-alive\n\n" * 3
    fake.script("/v1/chat/completions", Reply(body=body, headers=sse, chunked=True))
    fake.end_delay = 0.5
    proxy = make_proxy(mode="record")
    url = proxy.url + "/openai/v1/chat/completions"
    with httpx.stream("POST", url, json=CHAT, timeout=60) as response:
        got = b""
        for chunk in response.iter_raw():
            got += chunk
            if got.endswith(b": keep-alive\n\n" * 3):
                break
    wait_for(lambda: proxy.stats["recorded"] == 1)
    [stored] = exchanges(cassettes)
    assert stored["outcome"] == "complete"


@pytest.mark.parametrize("limit", [512 * 1024, 2 * SPOOL_AFTER])
def test_an_answer_over_max_record_leaves_nothing(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, limit: int
) -> None:
    sse = {"content-type": "text/event-stream"}
    body = openai_events(40_000)
    fake.script("/v1/chat/completions", Reply(body=body, headers=sse, chunked=True))
    proxy = make_proxy(mode="record", max_record=limit)
    got = httpx.post(proxy.url + "/openai/v1/chat/completions", json=CHAT, timeout=60)
    assert got.content == body
    assert proxy.stats["too_large"] == 1 and proxy.stats["recorded"] == 0
    assert every_file(cassettes) == []


def test_recording_a_stream_of_large_frames_holds_no_copy_of_it_in_memory(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """The newest 64 frames are kept to tell whether the final one came: with frames of
    2 MB (images streamed as base64) that is the whole answer, 128 MB, in memory."""
    frame = b"data: " + json.dumps({"b64": "A" * (2 * 1024 * 1024)}).encode() + b"\n\n"
    answer = frame * 48 + b"data: [DONE]\n\n"
    reply = Reply(body=answer, headers={"content-type": "text/event-stream"}, chunked=True)
    limit = str(256 * 1024 * 1024)
    received, growth = record_in_serve(fake, tmp_path, "/v1/images", reply, "--max-record", limit)
    assert received == len(answer)
    assert len(exchanges(tmp_path / "cassettes")) == 1
    assert growth < 40, f"tapeproxy's peak RSS grew {growth:.0f} MB"
