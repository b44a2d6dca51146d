"""Answers of every kind recorded and replayed byte for byte, and an answer whose write fails
still reaching its client whole. Through a real server, a raw socket upstream and real files."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream

MIB = 2**20


def call(url: str, method: str, path: str) -> tuple[int, bytes]:
    """One request (the answer's body decoded from its transfer coding only: no
    Content-Encoding is undone)."""
    with httpx.Client(timeout=20) as client:
        request = client.build_request(method, url + path, content=b'{"q": 1}')
        response = client.send(request, stream=True)
        try:
            return response.status_code, b"".join(response.iter_raw())
        finally:
            response.close()


def answer(status: str, headers: list[str], body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\n{''.join(h + chr(13) + chr(10) for h in headers)}\r\n".encode()
        + (body)
    )


# status line, headers, body, method; what the client must get: the body as sent (but HEAD)
ANSWERS = {
    "json-200": ("200 OK", ["content-type: application/json"], b'{"ok": true}', "POST"),
    "empty-200": ("200 OK", ["content-type: application/json"], b"", "POST"),
    "no-content-204": ("204 No Content", [], b"", "DELETE"),
    "head": ("200 OK", ["content-type: application/json", "content-length: 42"], b"", "HEAD"),
    "not-found-404": ("404 Not Found", ["content-type: application/json"], b'{"e": 1}', "POST"),
    "rate-429": ("429 Too Many", ["content-type: application/json"], b'{"e": "slow"}', "POST"),
    "server-500": ("500 Oops", ["content-type: text/plain"], b"boom", "POST"),
    "not-utf8": ("200 OK", ["content-type: text/plain"], bytes(range(256)) * 4, "POST"),
    "one-mib": ("200 OK", ["content-type: application/octet-stream"], b"\xff" * MIB, "POST"),
    "one-mib-json": (
        "200 OK",
        ["content-type: application/json"],
        b'{"x": "' + b"a" * (MIB - 10) + b'"}',
        "POST",
    ),
}


@pytest.mark.parametrize("failures", [False, True], ids=["plain", "record-failures"])
def test_every_kind_of_answer_reaches_the_client_byte_for_byte_and_replays_so(
    make_proxy: MakeProxy, cassettes: Path, failures: bool
) -> None:
    """Every kind of answer that is all in at once (its end waits for the write): the client
    gets the status and body the upstream sent, and the replay gives the same."""
    with RawUpstream() as raw:
        proxy = make_proxy(mode="record", upstream={"tools": raw.url}, record_failures=failures)
        lives = {}
        for name, (status, headers, body, method) in ANSWERS.items():
            length = [] if method == "HEAD" else [f"content-length: {len(body)}"]
            raw.answer(answer(status, [*headers, *length], body))
            code, got = call(proxy.url, method, f"/tools/{name}")
            assert code == int(status.split()[0]), name
            assert got == (b"" if method == "HEAD" else body), name
            lives[name] = (code, got)
        proxy.stop()
    replay = make_proxy(mode="replay", record_failures=failures, upstream={"tools": "http://x"})
    for name, (_, _, _, method) in ANSWERS.items():
        failure = name.startswith(("rate", "server"))
        code, got = call(replay.url, method, f"/tools/{name}")
        if failure and not failures:
            assert b"cassette_miss" in got, name
            continue
        assert (code, got) == lives[name], name


def test_an_answer_whose_write_fails_still_reaches_the_client_whole(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    proxy = make_proxy(mode="record")
    cassettes.mkdir(exist_ok=True)
    (cassettes / "nowhere").symlink_to(tmp_path / "gone" / "nowhere")
    body = {"model": "m", "input": "x"}
    headers = {"x-tapeproxy-cassette": "nowhere"}
    live = httpx.post(proxy.url + "/openai/v1/embeddings", json=body, headers=headers, timeout=30)
    direct = httpx.post(fake.url + "/v1/embeddings", json=body, timeout=30)
    assert live.status_code == 200
    assert live.content == direct.content
    stats = proxy.stats
    assert (stats["recorded"], stats["write_failures"]) == (0, 1)
