"""Limits and exposure: request bodies over --max-body, answers over --max-record, the admin
token, paths that climb above an upstream's base, paths sent byte for byte, userinfo."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request

from tapeproxy.app import create_app
from tapeproxy.cli.server import uvicorn_config
from tapeproxy.doors.control import refusal
from tapeproxy.engine.runs import MAX_OPEN_RUNS
from tapeproxy.settings import Settings
from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import ProxyServer

TOKEN = "an-admin-token-0123456789"
EMBED = {"model": "m", "input": "hello"}


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


def test_a_body_over_max_body_is_a_413_before_anything_is_forwarded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record", max_body=1024)
    url = proxy.url + "/openai/v1/embeddings"
    told = httpx.post(url, content=b"x" * 2048, headers={"content-type": "application/json"})

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused once 1 KiB has come
        yield from (b"y" * 512 for _ in range(8))

    streamed = httpx.post(url, content=chunks())
    for response in (told, streamed):
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["type"] == "request_too_large" and "--max-body" in error["message"]
    assert fake.count() == 0 and not cassettes.exists()
    assert httpx.post(url, json={"model": "m", "input": "ok"}).status_code == 200


def test_the_body_cap_holds_in_replay_too(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay", max_body=100)
    response = httpx.post(proxy.url + "/anthropic/v1/messages", content=b"{" + b" " * 200)
    assert response.status_code == 413
    assert response.json()["type"] == "error", "in the provider's error shape"


def test_an_answer_over_max_record_reaches_the_client_but_is_not_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    big = "z" * (3 * 1024 * 1024)
    fake.script("/big", Reply(body=big, headers={"content-type": "text/plain"}, chunked=True))
    proxy = make_proxy(mode="record", max_record="1MiB", upstream={"tool": fake.url})
    response = httpx.get(proxy.url + "/tool/big", timeout=30)
    assert response.status_code == 200 and response.text == big
    stats = proxy.stats
    assert (stats["too_large"], stats["recorded"]) == (1, 0)
    assert not list(cassettes.rglob("*.json"))


def test_state_changing_control_requests_need_the_admin_token(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay", admin_token=TOKEN)
    url = proxy.url + "/__tapeproxy/cassette"
    body = {"cassette": "other"}
    assert httpx.put(url, json=body).status_code == 401
    wrong = httpx.put(url, json=body, headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401 and TOKEN not in wrong.text
    right = httpx.put(url, json=body, headers={"authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 200 and right.json()["cassette"] == "other"
    assert httpx.get(proxy.url + "/__tapeproxy/health").status_code == 200, "health stays open"


def put_request(headers: list[tuple[bytes, bytes]]) -> Request:
    return Request(
        {"type": "http", "method": "PUT", "path": "/__tapeproxy/cassette", "headers": headers}
    )


def test_off_loopback_without_a_token_state_changing_control_requests_are_refused() -> None:
    exposed = Settings.model_validate({"host": "0.0.0.0"})
    refused = refusal(put_request([]), exposed)
    assert refused is not None and refused.status_code == 403
    assert b"--admin-token" in refused.body
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert refusal(put_request([]), Settings.model_validate({"host": host})) is None
    guarded = Settings.model_validate({"host": "0.0.0.0", "admin_token": TOKEN})
    auth = [(b"authorization", f"Bearer {TOKEN}".encode())]
    assert refusal(put_request(auth), guarded) is None


@pytest.mark.parametrize(
    "path",
    [
        "/api/../../admin",
        "/api/%2e%2e/%2e%2e/admin",
        "/api/.%2E/admin",
        "/api/a\\b",
        "/api/a%5Cb",
        "/v1/../admin",
        "/api/..;/admin",
        "/api/%2e%2e;/admin",
        "/api/..%2f..%2fadmin",
        "/api/%252e%252e/x",
    ],
)
def test_a_path_that_could_climb_above_the_upstream_base_is_a_400(
    make_proxy: MakeProxy, fake: FakeUpstream, path: str
) -> None:
    proxy = make_proxy(mode="record", upstream={"api": fake.url + "/api/v2"})
    answer = raw_get(proxy.url, path)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"bad_path" in answer
    assert fake.count() == 0


def test_a_path_goes_upstream_byte_for_byte(make_proxy: MakeProxy, raw: RawUpstream) -> None:
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
    raw.answer(ok, ok)
    proxy = make_proxy(mode="passthrough", upstream={"tool": raw.url})
    for path in ("/tool/v1/%zz?q=%zz", "/tool/v1/a%0ab"):
        raw_get(proxy.url, path)
    sent = [request.split(b"\r\n")[0] for request in raw.requests]
    assert sent == [b"GET /v1/%zz?q=%zz HTTP/1.1", b"GET /v1/a%0ab HTTP/1.1"]


def test_userinfo_in_an_upstream_url_is_basic_auth_unless_the_client_sends_its_own(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    url = fake.url.replace("http://", "http://svc:s3cret@")
    proxy = make_proxy(mode="passthrough", upstream={"tool": url})
    assert httpx.get(proxy.url + "/tool/x").status_code != 500
    assert (
        httpx.get(proxy.url + "/tool/y", headers={"authorization": "Bearer mine"}).status_code
        != 500
    )
    seen = [hit.headers.get("authorization") for hit in fake.hits]
    assert seen == ["Basic c3ZjOnMzY3JldA==", "Bearer mine"]


def test_runs_under_way_are_bounded_however_many_cassettes_clients_name(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="auto")
    with httpx.Client(base_url=proxy.url) as client:
        for n in range(MAX_OPEN_RUNS + 40):
            headers = {"x-tapeproxy-cassette": f"many/c{n}"}
            answer = client.post("/openai/v1/embeddings", json=EMBED, headers=headers)
            assert answer.status_code == 200
        again = client.post(
            "/openai/v1/embeddings", json=EMBED, headers={"x-tapeproxy-cassette": "many/c0"}
        )
    assert again.status_code == 200, "an ended run's cassette starts a new run"
    stats = proxy.stats
    assert len(stats["runs"]) <= MAX_OPEN_RUNS
    assert stats["recorded"] == MAX_OPEN_RUNS + 40 and stats["replayed"] == 1


def test_past_the_cap_the_run_asked_longest_ago_ends_not_the_one_in_use(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    """A client on the start-up cassette throughout, while others name many by header: its
    run goes on whole (ending it would restart its replay positions mid-sequence)."""
    proxy = make_proxy(mode="auto")
    with httpx.Client(base_url=proxy.url) as client:
        for n in range(MAX_OPEN_RUNS + 40):
            headers = {"x-tapeproxy-cassette": f"many/c{n}"}
            assert client.post("/openai/v1/embeddings", json=EMBED, headers=headers).is_success
            assert client.post("/openai/v1/embeddings", json=EMBED).is_success
    runs = {run["cassette"]: run for run in proxy.stats["runs"]}
    assert runs["default"]["requests"] == MAX_OPEN_RUNS + 40


def test_a_gzip_bomb_is_cut_neither_inflated_nor_held_nor_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    inflated = 100 * 1024 * 1024
    bomb = gzip.compress(b"\0" * inflated, compresslevel=9)  # about 100 KB
    headers = {"content-encoding": "gzip", "content-type": "application/octet-stream"}
    fake.script("/bomb", Reply(body=bomb, headers=headers))
    proxy = make_proxy(mode="record", max_record="1MiB", upstream={"tool": fake.url})
    before, peak = rss_mb(), [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            peak[0] = max(peak[0], rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    received = 0
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("GET", proxy.url + "/tool/bomb", timeout=60) as response,
    ):
        for chunk in response.iter_raw():
            received += len(chunk)
    stop.set()
    sampler.join()
    assert received <= 2 * 1024 * 1024, "cut just past 1 MiB inflated (100:1), as an upstream cut"
    assert peak[0] - before < 48, f"RSS grew {peak[0] - before:.0f} MB for a 100 MB bomb"
    assert proxy.stats["bombs"] == 1 and not list(cassettes.rglob("*.json"))


def raw_get(url: str, path: str) -> bytes:
    """A GET with `path` exactly as written (no client re-quotes it), and the whole answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_the_control_api_holds_no_large_body_and_takes_any_case_of_bearer(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(mode="replay", admin_token=TOKEN)
    url = proxy.url + "/__tapeproxy/cassette"
    auth = {"authorization": f"bearer {TOKEN}"}
    big = httpx.put(url, content=b"{" + b" " * (1024 * 1024) + b"}", headers=auth)
    assert big.status_code == 413
    assert httpx.put(url, json={"cassette": "x"}, headers=auth).status_code == 200


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(cassettes: Path) -> None:
    settings = Settings.model_validate({"port": 0})
    assert uvicorn_config(create_app(settings), settings).timeout_keep_alive == 5
    settings = Settings.model_validate({"port": 0, "cassettes": cassettes, "mode": "replay"})
    with ProxyServer(settings, keep_alive=1) as proxy:  # the real config path, a short wait
        host, port = proxy.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\n\r\n")
            answer = sock.recv(65536)
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):  # the whole JSON answer
                more = sock.recv(65536)
                assert more, answer
                answer += more
            assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" not in answer.lower()
            idle = time.monotonic()
            assert sock.recv(65536) == b"", "closed by the server, not by the client"
            waited = time.monotonic() - idle
    assert 0.8 <= waited <= 4, f"closed after {waited:.1f} s idle, not about 1 s"


def deep_json(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("depth", [700, 5000])
def test_a_request_nested_too_deep_to_key_is_a_400_and_nothing_is_forwarded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, depth: int
) -> None:
    proxy = make_proxy(mode="record")
    response = httpx.post(
        proxy.url + "/openai/v1/chat/completions",
        content=deep_json(depth),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "bad_body" and "nests too deeply" in error["message"]
    assert "\n" not in error["message"]
    assert fake.count() == 0 and not cassettes.exists()


def test_an_answer_nested_too_deep_to_parse_is_recorded_and_replayed_byte_for_byte(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    body = deep_json(5000)
    fake.script("/v1/embeddings", Reply(body=body, headers={"content-type": "application/json"}))
    recorder = make_proxy(mode="record")
    assert httpx.post(recorder.url + "/openai/v1/embeddings", json=EMBED).content == body
    recorder.stop()
    replayed = httpx.post(make_proxy(mode="replay").url + "/openai/v1/embeddings", json=EMBED)
    assert replayed.status_code == 200 and replayed.content == body
