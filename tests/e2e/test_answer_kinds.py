"""Answers of every kind recorded and replayed byte for byte, and an answer whose write fails
still reaching its client whole. Through a real server, a raw socket upstream and real files."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream, Reply

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


def strict_json(raw: bytes) -> object:
    """`raw` read as JSON is (RFC 8259, `jq`): no NaN, Infinity or -Infinity."""

    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(raw, parse_constant=refuse)


# What Python's json module (and so many a fake or a quick server) writes for a float that is
# not finite, and numbers too large for a float, which Python reads as infinite.
NOT_FINITE = [
    b'{"score": NaN, "n": 1}',
    b'{"max":Infinity,"min":-Infinity}',
    b'{"big": 1e999999}',
    b"[1e400, -1" + b"0" * 400 + b".5]",
]


@pytest.mark.parametrize("raw", NOT_FINITE)
def test_nan_and_infinity_in_bodies_are_kept_as_text_strict_json_and_replay_byte_exact(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, raw: bytes
) -> None:
    json_type = {"content-type": "application/json"}
    fake.script("/v1/scores", Reply(body=raw, headers=json_type))
    recorder = make_proxy(mode="record")
    live = httpx.post(recorder.url + "/openai/v1/scores", content=raw, headers=json_type)
    assert live.content == raw
    recorder.stop()
    [stored] = (cassettes / "default").glob("*.json")
    data = strict_json(stored.read_bytes())  # the file stays JSON that jq reads as written
    assert isinstance(data, dict)
    assert data["request"]["body"] == {"text": raw.decode()}
    assert data["response"]["body"] == {"text": raw.decode()}
    replayer = make_proxy(mode="replay")
    again = httpx.post(replayer.url + "/openai/v1/scores", content=raw, headers=json_type)
    assert (again.status_code, again.content) == (200, raw)
    assert (replayer.stats["replayed"], replayer.stats["upstream_calls"]) == (1, 0)


def test_a_credential_in_a_json_body_kept_as_text_for_its_nan_never_reaches_the_disk(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    # Python's json writes NaN by default: a client that sends a key in the body (Tavily's
    # `api_key`) and a NaN from its data sends a body that is no strict JSON, kept as text.
    raw = b'{"api_key": "tvly-body-secret-0123456789", "query": "q", "score": NaN}'
    json_type = {"content-type": "application/json"}
    fake.script("/v1/search", Reply(body=b'{"ok": true}', headers=json_type))
    recorder = make_proxy(mode="record")
    live = httpx.post(recorder.url + "/openai/v1/search", content=raw, headers=json_type)
    assert live.status_code == 200
    recorder.stop()
    assert fake.hits[-1].body == raw  # the upstream gets the key as sent
    [stored] = (cassettes / "default").glob("*.json")
    text = stored.read_text()
    assert "tvly-body-secret" not in text
    body = strict_json(stored.read_bytes())["request"]["body"]  # type: ignore[index]
    assert "[redacted]" in body["text"] and "NaN" in body["text"]
    # Another developer's own key replays the same recording.
    other = raw.replace(b"tvly-body-secret-0123456789", b"tvly-another-developer-key")
    replayer = make_proxy(mode="replay")
    again = httpx.post(replayer.url + "/openai/v1/search", content=other, headers=json_type)
    assert (again.status_code, again.content) == (200, b'{"ok": true}')
    assert (replayer.stats["replayed"], replayer.stats["upstream_calls"]) == (1, 0)
