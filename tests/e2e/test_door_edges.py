"""The door's edges through the real server: raw header names, the bare /v1 route, the
replay fast path, compressed answers inflated in bounded pieces, a stream cut by shutdown."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
import time
import zlib
from pathlib import Path

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.socket_upstream import PLAIN, SocketUpstream, gzip_stream, whole
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import files_under, library_files
from tests.support.streams import stream_through_shutdown

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
    [stored] = [p for p in library_files(cassettes) if p.suffix == ".json"]
    assert json.loads(stored.read_text())["outcome"] == "upstream_cut"


def raw_request(url: str, head: bytes, body: bytes = b"") -> bytes:
    """One request written byte for byte (header names in any case, repeated, non-ASCII)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


CHAT_BYTES = json.dumps(CHAT).encode()


def test_the_door_reads_its_headers_in_any_case_and_the_first_of_two(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    head = (
        b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"content-type: application/json\r\nX-TAPEPROXY-CASSETTE: Upper\r\n"
        b"x-tapeproxy-cassette: lower\r\nX-Odd: caf\xc3\xa9 \xff\r\n"
    )
    answer = raw_request(proxy.url, head, CHAT_BYTES)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    proxy.stop()
    assert [p.parent.name for p in cassettes.rglob("*.json")] == ["Upper"]
    replay = make_proxy(mode="replay")
    again = raw_request(replay.url, head, CHAT_BYTES)
    assert again.startswith(b"HTTP/1.1 200"), again[:300]
    assert replay.stats["replayed"] == 1


@pytest.mark.parametrize("sent", [b"caf\xc3\xa9", b"caf\xe9"], ids=["utf-8", "latin-1"])
def test_a_non_ascii_cassette_header_is_a_clear_400_that_echoes_the_name_as_sent(
    make_proxy: MakeProxy, cassettes: Path, sent: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(mode="record")
    head = (
        b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"content-type: application/json\r\nx-tapeproxy-cassette: " + sent + b"\r\n"
    )
    with caplog.at_level(logging.WARNING, logger="tapeproxy"):
        answer = raw_request(proxy.url, head, CHAT_BYTES)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["type"] == "bad_cassette_name"
    # Echoed as the user typed it (UTF-8, as curl sends it; else latin-1), not as mojibake.
    assert "'café' is not allowed" in error["message"] and "ASCII" in error["message"]
    assert "Ã" not in error["message"]
    assert "'café' is not allowed" in caplog.text and "Ã" not in caplog.text
    proxy.stop()
    assert files_under(cassettes) == {}


@pytest.mark.parametrize("name", [b"anthropic-version", b"Anthropic-Version", b"ANTHROPIC-VERSION"])
def test_a_bare_v1_path_with_anthropic_version_in_any_case_goes_to_anthropic(
    make_proxy: MakeProxy, cassettes: Path, name: bytes
) -> None:
    proxy = make_proxy(mode="record")
    body = json.dumps({"model": "claude", "max_tokens": 5, "messages": CHAT["messages"]})
    head = (
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        + name
        + b": 2023-06-01\r\nx-api-key: sk-ant-test\r\n"
    )
    answer = raw_request(proxy.url, head, body.encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    proxy.stop()
    [stored] = [p for p in library_files(cassettes) if p.suffix == ".json"]
    assert json.loads(stored.read_text())["request"]["upstream"] == "anthropic"


@pytest.mark.parametrize(
    "path",
    [
        "/tool/v1/a;b=c/x",
        "/tool/v1/a%2Fb",
        "/tool/v1/a%2fb%2E",
        "/tool/v1/x..json",
        "/tool/v1/.../x",
        "/tool/v1/x?next=../../etc&p=%2e%2e",
        "/tool/v1/x;..?q=..",
    ],
)
def test_paths_that_do_not_climb_go_upstream_as_they_came(make_proxy: MakeProxy, path: str) -> None:
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
    with RawUpstream() as raw:
        raw.answer(ok)
        proxy = make_proxy(mode="passthrough", upstream={"tool": raw.url})
        answer = raw_request(proxy.url, b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        [sent] = raw.requests
    assert sent.split(b"\r\n")[0] == b"GET " + path.removeprefix("/tool").encode() + b" HTTP/1.1"


def test_a_cassette_reached_by_header_before_a_put_names_it_is_not_untouched(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(mode="record", cassette="a", fail_on_unused=True)
    assert post(proxy.url, headers={"x-tapeproxy-cassette": "b"}).status_code == 200
    assert proxy.put_cassette(cassette="c", mode="replay").status_code == 200  # ends every run
    assert proxy.put_cassette(cassette="b").status_code == 200
    assert proxy.stats["untouched"] == ["c"], "a request reached b: it was touched"


def test_a_gzip_answer_padded_with_zeros_passes_as_gzip_tools_read_it(
    make_proxy: MakeProxy,
) -> None:
    with SocketUpstream(whole(gzip.compress(PLAIN) + bytes(16), "gzip")) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        response = post(proxy.url)
    assert response.status_code == 200 and response.content == PLAIN


def test_two_content_encoding_lines_are_not_inflated_once_and_passed_as_plain(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    def answer(conn: socket.socket) -> None:
        body = gzip.compress(gzip.compress(PLAIN))
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
            + f"content-encoding: gzip\r\ncontent-length: {len(body)}\r\n".encode()
            + b"connection: close\r\n\r\n"
            + body
        )

    with SocketUpstream(answer) as upstream:
        proxy = make_proxy(mode="record", upstream={"openai": upstream.url})
        response = post(proxy.url)
        proxy.stop()
    assert response.status_code == 502 or response.content == PLAIN, response.content[:40]


def test_a_live_gzip_stream_cut_by_shutdown_is_a_quiet_cut_and_not_recorded(
    make_proxy: MakeProxy, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate, opened = threading.Event(), list[bool]()
    with SocketUpstream(gzip_stream(gate, opened)) as upstream:
        proxy = make_proxy(mode="record", shutdown_timeout=0.5, upstream={"openai": upstream.url})
        ends = stream_through_shutdown(proxy, caplog)
        gate.set()
    assert ends == ["RemoteProtocolError"]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert files_under(cassettes) == {}


def test_a_shutdown_while_a_request_body_is_coming_is_quiet(
    make_proxy: MakeProxy, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(mode="replay", shutdown_timeout=0.5)
    host, port = proxy.url.removeprefix("http://").split(":")
    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(caplog.handler)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b'content-length: 1000\r\n\r\n{"model":'
            )
            time.sleep(0.3)
            started = time.monotonic()
            proxy.stop()
            assert time.monotonic() - started < 10
    finally:
        server_log.removeHandler(caplog.handler)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert fake.count() == 0
