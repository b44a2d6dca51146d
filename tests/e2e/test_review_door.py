"""Review of the replay door (raw header names, the bare /v1 route, the fast path check) and of
llmtape.inflate, through the real server: what held and what broke."""

from __future__ import annotations

import gzip
import json
import socket
import zlib
from pathlib import Path

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.e2e.test_inflate import PLAIN, SocketUpstream, whole
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import files_under

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def post(url: str, **kwargs: object) -> httpx.Response:
    return httpx.post(url + "/openai/v1/chat/completions", json=CHAT, timeout=10, **kwargs)  # type: ignore[arg-type]


def until_close(body: bytes, encoding: str) -> SocketUpstream:
    """An answer with no length and no chunks: its body ends when the upstream closes."""

    def answer(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-encoding: {encoding}\r\nconnection: close\r\n\r\n".encode()
            + body
        )

    return SocketUpstream(answer)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize("framing", ["length", "close"])
def test_a_compressed_answer_cut_short_is_a_cut_not_a_complete_recording(
    make_proxy: MakeProxy, cassettes: Path, encoding: str, framing: str
) -> None:
    packed = gzip.compress(PLAIN, mtime=0) if encoding == "gzip" else zlib.compress(PLAIN)
    cut = packed[: len(packed) // 2]
    upstream = (
        SocketUpstream(whole(cut, encoding)) if framing == "length" else until_close(cut, encoding)
    )
    with upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        with pytest.raises(httpx.RemoteProtocolError):
            post(proxy.url)
        proxy.stop()
    assert files_under(cassettes) == {}, "half an answer was recorded as a whole one"


def test_a_twice_gzipped_answer_is_a_clear_502(make_proxy: MakeProxy) -> None:
    body = gzip.compress(gzip.compress(PLAIN))
    with SocketUpstream(whole(body, "gzip, gzip")) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        response = post(proxy.url)
    assert response.status_code == 502, response.text
    assert "gzip, gzip" in response.text


def test_brotli_is_the_same_clear_502(make_proxy: MakeProxy, cassettes: Path) -> None:
    with SocketUpstream(whole(b"\x0b\x02\x80hi\x03", "br")) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        response = post(proxy.url)
        proxy.stop()
    assert response.status_code == 502 and "brotli (br)" in response.text
    assert files_under(cassettes) == {}


@pytest.mark.parametrize("body", [b"", gzip.compress(b"", mtime=0)])
def test_an_empty_gzip_body_is_an_empty_answer(make_proxy: MakeProxy, body: bytes) -> None:
    with SocketUpstream(whole(body, "gzip")) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        response = post(proxy.url)
    assert response.status_code == 200 and response.content == b""


@pytest.mark.parametrize("status", [204, 304])
def test_bodiless_answers_marked_gzip_pass(make_proxy: MakeProxy, status: int) -> None:
    def answer(conn: socket.socket) -> None:
        conn.sendall(
            f"HTTP/1.1 {status} X\r\ncontent-encoding: gzip\r\nconnection: close\r\n\r\n".encode()
        )

    with SocketUpstream(answer) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        response = post(proxy.url)
        replay = make_proxy(mode="replay", upstream={"openai": upstream.url})
        again = post(replay.url)
    assert response.status_code == status and again.status_code == status


def test_head_marked_gzip_and_brotli_pass(make_proxy: MakeProxy) -> None:
    def answer(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 40\r\n"
            b"connection: close\r\n\r\n"
        )

    with SocketUpstream(answer) as upstream:
        proxy = make_proxy(mode="record", upstream={"tool": upstream.url})
        response = httpx.head(proxy.url + "/tool/x", timeout=10)
    assert response.status_code == 200


def test_a_gzipped_error_answer_replays_byte_identical(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    error = json.dumps({"error": {"message": "nope", "type": "invalid_request_error"}}).encode()
    fake.script(
        "/v1/chat/completions",
        Reply(
            status=400,
            body=gzip.compress(error),
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        ),
    )
    proxy = make_proxy(mode="record")
    first = post(proxy.url)
    proxy.stop()
    replay = make_proxy(mode="replay")
    second = post(replay.url)
    assert first.status_code == second.status_code == 400
    assert first.content == second.content == error
    assert "content-encoding" not in second.headers


def test_a_gzip_answer_cut_short_is_kept_as_a_cut_with_record_failures(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    packed = gzip.compress(PLAIN, mtime=0)
    with until_close(packed[: len(packed) // 2], "gzip") as upstream:
        proxy = make_proxy(mode="record", record_failures=True, upstream={"openai": upstream.url})
        with pytest.raises(httpx.RemoteProtocolError):
            post(proxy.url)
        proxy.stop()
    [stored] = cassettes.rglob("*.json")
    assert json.loads(stored.read_text())["outcome"] == "upstream_cut"
