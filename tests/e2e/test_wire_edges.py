"""What real upstreams and clients do at the edges: bodies cut short, empty answers,
repeated and non-ASCII headers, re-records, retries, cassettes that are not folders."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, files_under


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


def test_a_body_cut_short_is_recorded_with_record_failures_and_replays_cut(
    make_proxy: MakeProxy, raw: RawUpstream
) -> None:
    raw.answer(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b'content-length: 100\r\nconnection: close\r\n\r\n{"partial": tr'
    )
    recorder = make_proxy(mode="record", record_failures=True, upstream={"tools": raw.url})
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(recorder.url + "/tools/item")
    recorder.stop()
    replayer = make_proxy(mode="replay", upstream={"tools": raw.url})
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(replayer.url + "/tools/item")


def test_repeated_and_non_latin1_headers_pass_through_and_replay_unchanged(
    make_proxy: MakeProxy, raw: RawUpstream, cassettes: Path
) -> None:
    raw.answer(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"link: <a>; rel=next\r\nlink: <b>; rel=last\r\n"
        b"x-note: caf\xc3\xa9 \xe2\x82\xac\r\ncontent-length: 2\r\n\r\n{}"
    )
    recorder = make_proxy(mode="record", upstream={"tools": raw.url})
    live = httpx.get(recorder.url + "/tools/page", headers=[(b"x-title", "Café".encode())])
    recorder.stop()
    assert b"x-title: Caf\xc3\xa9\r\n" in raw.requests[-1], "UTF-8 header sent as sent"
    [stored] = files_under(cassettes).values()
    assert json.loads(stored)["response"]["headers"]["link"] == ["<a>; rel=next", "<b>; rel=last"]
    replayer = make_proxy(mode="replay", upstream={"tools": raw.url})
    again = httpx.get(replayer.url + "/tools/page", headers=[(b"x-title", "Café".encode())])
    for response in (live, again):
        assert response.headers.get_list("link") == ["<a>; rel=next", "<b>; rel=last"]
        assert response.headers.raw.count((b"x-note", b"caf\xc3\xa9 \xe2\x82\xac")) == 1
    assert len(live.headers.get_list("date")) <= 1


@pytest.mark.parametrize("method", ["HEAD", "DELETE"])
def test_answers_without_a_body_are_recorded_and_not_counted_as_aborts(
    make_proxy: MakeProxy, fake: FakeUpstream, method: str
) -> None:
    fake.script("/thing", Reply(status=204))
    proxy = make_proxy(mode="record", upstream={"tools": fake.url})
    response = httpx.request(method, proxy.url + "/tools/thing")
    assert response.status_code in {200, 204}
    stats = proxy.stats
    assert (stats["recorded"], stats["aborted"]) == (1, 0)


def test_a_re_record_with_fewer_repeats_leaves_no_stale_repeat_to_replay(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    body = {"model": "m", "input": "same"}
    first = make_proxy(mode="record")
    for _ in range(3):
        httpx.post(first.url + "/openai/v1/embeddings", json=body)
    first.stop()
    assert len(files_under(cassettes)) == 3
    second = make_proxy(mode="record")
    httpx.post(second.url + "/openai/v1/embeddings", json=body)
    second.stop()
    assert [Path(name).name.count(".") for name in files_under(cassettes)] == [1]
    replayer = make_proxy(mode="replay")
    assert httpx.post(replayer.url + "/openai/v1/embeddings", json=body).status_code == 200
    assert httpx.post(replayer.url + "/openai/v1/embeddings", json=body).status_code == 422


def test_a_429_that_the_sdk_retried_leaves_the_recording_under_its_first_name(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.script(
        "/v1/chat/completions",
        Reply(
            status=429,
            body={"error": {"type": "rate_limit", "message": "slow down"}},
            headers={"retry-after-ms": "10"},
        ),
    )
    proxy = make_proxy(mode="record")
    client = openai.OpenAI(base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=2)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert answer.choices[0].message.content == "echo: x"
    proxy.stop()
    [name] = files_under(cassettes)
    assert name.endswith(".json") and Path(name).name.count(".") == 1


def test_a_cassette_that_is_a_file_is_a_clear_error(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    cassettes.mkdir(parents=True)
    (cassettes / "notes").write_text("not a cassette")
    proxy = make_proxy(mode="record", cassette="notes")
    response = httpx.get(proxy.url + "/openai/v1/models")
    assert response.status_code == 422  # not a 5xx, which an SDK would retry to no avail
    assert response.json()["error"]["type"] == "cassette_corrupt"
    assert "is a file, not a folder" in response.json()["error"]["message"]
    assert (cassettes / "notes").read_text() == "not a cassette"


def test_frames_that_arrive_with_the_cut_still_reach_the_client_and_the_cassette(
    make_proxy: MakeProxy, raw: RawUpstream, cassettes: Path
) -> None:
    frames = [b'data: {"n": %d}\n\n' % n for n in range(3)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in frames)
    # Everything in one write, then the connection closes without the chunked terminator.
    raw.answer(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunked
    )
    recorder = make_proxy(mode="record", record_failures=True, upstream={"tools": raw.url})
    got = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("GET", recorder.url + "/tools/events") as response,
    ):
        for chunk in response.iter_raw():
            got += chunk
    recorder.stop()
    assert got == b"".join(frames)
    [stored] = (cassettes / "default").glob("*.json")
    exchange = json.loads(stored.read_text())
    assert exchange["outcome"] == "upstream_cut"
    assert [f["text"] for f in exchange["response"]["frames"]] == [f.decode() for f in frames]


def test_a_replayed_answer_reaches_its_client_in_one_read_head_and_body_together(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    """uvicorn writes a head and a body apart; Coalescing (doors/head_limits.py) sends them in
    one write, so a client waiting for its answer reads it whole at once."""
    body = json.dumps({"model": "m", "input": "x"}).encode()
    request = (
        b"POST /openai/v1/embeddings HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    recorder = make_proxy(mode="record")
    assert httpx.post(recorder.url + "/openai/v1/embeddings", content=body).status_code == 200
    player = make_proxy(mode="replay")
    port = int(player.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        first = sock.recv(65536)  # the client waits here before the server writes anything
    head, _, rest = first.partition(b"\r\n\r\n")
    length = int(
        next(
            v
            for k, _, v in (h.partition(b": ") for h in head.split(b"\r\n"))
            if k.lower() == b"content-length"
        )
    )
    assert head.startswith(b"HTTP/1.1 200") and len(rest) == length > 0


def test_a_cassette_folder_that_cannot_be_listed_is_a_clear_422_not_a_500(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    # A symlink loop stops even root (permission denied, the usual case, does not).
    cassettes.mkdir(parents=True)
    (cassettes / "loop").symlink_to("loop")
    proxy = make_proxy(mode="replay", cassette="loop")
    client = openai.OpenAI(base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.embeddings.create(model="text-embedding-3-small", input="x")
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "cassette_corrupt"
    message = error["message"]
    assert f"cannot list the cassette folder {cassettes / 'loop'}: " in message, message
    assert "symbolic links" in message and "\n" not in message
    assert proxy.stats["errors"] == 1
    assert fake.count() == 0
