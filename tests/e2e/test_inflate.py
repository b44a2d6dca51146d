"""Compressed answers through the real server: gzip and deflate answers reach the client and
the cassette exactly as the same answer sent plain; a gzip stream still streams frame by
frame; a gzip bomb is cut just past 1 MiB, counted, and not recorded."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import MakeProxy
from tests.fakes.socket_upstream import (
    EVENTS,
    PLAIN,
    Answer,
    SocketUpstream,
    gzip_stream,
    sse,
    whole,
)
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, files_under

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def deflated(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


ENCODED = {
    "gzip": gzip.compress(PLAIN, mtime=0),
    "x-gzip": gzip.compress(PLAIN, mtime=0),
    "two gzip members": gzip.compress(PLAIN[:700], mtime=0) + gzip.compress(PLAIN[700:]),
    "deflate": deflated(PLAIN, zlib.MAX_WBITS),
    "raw deflate": deflated(PLAIN, -zlib.MAX_WBITS),
}


def record(make_proxy: MakeProxy, answer: Answer, cassette: str) -> bytes:
    with SocketUpstream(answer) as upstream:
        proxy = make_proxy(mode="record", cassette=cassette, upstream={"openai": upstream.url})
        response = httpx.post(proxy.url + "/openai/v1/chat/completions", json=CHAT, timeout=10)
        proxy.stop()
    assert response.status_code == 200 and "content-encoding" not in response.headers
    return response.content


@pytest.mark.parametrize("variant", sorted(ENCODED))
def test_a_compressed_answer_reaches_client_and_cassette_as_the_plain_one_does(
    make_proxy: MakeProxy, cassettes: Path, variant: str
) -> None:
    encoding = variant.split()[-1] if variant != "two gzip members" else "gzip"
    encoding = "deflate" if variant == "raw deflate" else encoding
    assert record(make_proxy, whole(PLAIN, None), "plain") == PLAIN
    assert record(make_proxy, whole(ENCODED[variant], encoding), "packed") == PLAIN
    assert files_under(cassettes / "packed") == files_under(cassettes / "plain")


def test_a_gzip_stream_still_reaches_the_sdk_frame_by_frame_and_records_its_frames(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    gate, opened = threading.Event(), list[bool]()
    with SocketUpstream(gzip_stream(gate, opened)) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        client = openai.OpenAI(base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI)
        words = []
        for part in client.chat.completions.create(model="m", messages=[], stream=True):
            if part.choices and part.choices[0].delta.content:
                words.append(part.choices[0].delta.content)
                gate.set()  # the first word came while the upstream held back the rest
        proxy.stop()
    assert opened == [True], "the first frame reached the client before the next was sent"
    assert "".join(words) == "Hello there!"
    [stored] = [json.loads(p.read_text()) for p in cassettes.rglob("*.json")]
    assert stored["outcome"] == "complete"
    assert [f["text"] for f in stored["response"]["frames"]] == [
        sse(e).decode() for e in [*EVENTS, None]
    ]


def gzip_bomb(inflated: int) -> bytes:
    """`inflated` zero bytes as gzip, built 64 KiB at a time: about 1,000:1."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(64 * 1024)
    return b"".join(packer.compress(block) for _ in range(inflated // len(block))) + packer.flush()


BOMB = 64 * 1024 * 1024


@pytest.mark.parametrize("record_failures", [False, True])
def test_a_gzip_bomb_is_cut_just_past_1_mib_counted_and_not_recorded(
    make_proxy: MakeProxy,
    fake: FakeUpstream,
    cassettes: Path,
    caplog: pytest.LogCaptureFixture,
    record_failures: bool,
) -> None:
    headers = {"content-encoding": "gzip", "content-type": "application/octet-stream"}
    fake.script("/bomb", Reply(body=gzip_bomb(BOMB), headers=headers))
    proxy = make_proxy(mode="record", record_failures=record_failures, upstream={"tool": fake.url})
    received = 0
    with (
        caplog.at_level("INFO", logger="tapeproxy"),
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("GET", proxy.url + "/tool/bomb", timeout=30) as response,
    ):
        assert response.status_code == 200
        for data in response.iter_raw():
            received += len(data)
    assert received <= 2 * 1024 * 1024, "cut just past the 1 MiB floor, not inflated"
    stats = proxy.stats
    assert (stats["bombs"], stats["recorded"], stats["errors"]) == (1, 0, 1)
    assert files_under(cassettes) == {}
    [line] = [r.getMessage() for r in caplog.records if "compression bomb" in r.getMessage()]
    assert "/bomb" in line and "not recorded" in line and "100:1" in line


def test_the_sdk_sees_a_gzip_bomb_as_a_dropped_connection(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    fake.script("/v1/chat/completions", Reply(body=gzip_bomb(BOMB), headers=headers))
    proxy = make_proxy(mode="record")
    client = openai.OpenAI(
        base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0, timeout=30
    )
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert proxy.stats["bombs"] == 1 and files_under(cassettes) == {}
