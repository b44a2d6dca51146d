"""Cassettes per test: the x-tapeproxy-cassette header and the control API."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from tapeproxy.app import create_app
from tapeproxy.cli.server import ReadyServer, uvicorn_config
from tapeproxy.settings import Settings
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import wait_for

EMBED = {"model": "m", "input": "hello"}


def embed(url: str, cassette: str | None = None, text: str = "hello") -> httpx.Response:
    headers = {"authorization": "Bearer sk-test-fake"}
    if cassette:
        headers["x-tapeproxy-cassette"] = cassette
    return httpx.post(url + "/openai/v1/embeddings", json={**EMBED, "input": text}, headers=headers)


def test_header_picks_the_cassette_for_one_request(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    assert embed(proxy.url, cassette="suite/test_one").status_code == 200
    assert embed(proxy.url).status_code == 200
    assert len(list((cassettes / "suite" / "test_one").glob("*.json"))) == 1
    assert len(list((cassettes / "default").glob("*.json"))) == 1


def test_control_api_switches_cassette_and_mode_without_restart(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    assert proxy.get("/__tapeproxy/cassette") == {"cassette": "default", "mode": "record"}
    switched = proxy.put_cassette(cassette="test_a")
    assert switched.json() == {"cassette": "test_a", "mode": "record"}
    embed(proxy.url, text="only in a")
    assert proxy.put_cassette(mode="replay").json() == {"cassette": "test_a", "mode": "replay"}
    assert embed(proxy.url, text="only in a").status_code == 200
    proxy.put_cassette(cassette="test_b")
    miss = embed(proxy.url, text="only in a")
    assert miss.status_code == 422 and "'test_b'" in miss.json()["error"]["message"]
    stats = proxy.stats
    assert (stats["recorded"], stats["replayed"], stats["misses"]) == (1, 1, 1)
    assert stats["upstream_calls"] == 1
    assert proxy.get("/__tapeproxy/health")["status"] == "ok"


def test_a_put_starts_a_new_run_so_repeated_requests_replay_from_the_first(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="record")
    embed(proxy.url)
    proxy.put_cassette(mode="replay")
    assert embed(proxy.url).status_code == 200
    assert embed(proxy.url).status_code == 422, "the one recording is used up in this run"
    proxy.put_cassette(mode="replay")
    assert embed(proxy.url).status_code == 200


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", ".hidden", "a//b"])
def test_a_path_traversal_cassette_name_is_refused_and_nothing_is_written(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path, name: str
) -> None:
    proxy = make_proxy(mode="record")
    response = embed(proxy.url, cassette=name)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "bad_cassette_name"
    assert proxy.put_cassette(cassette=name).status_code == 400
    assert proxy.get("/__tapeproxy/cassette")["cassette"] == "default"
    assert fake.hits == []
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_put_with_a_bad_mode_or_body_is_a_400_that_lists_the_modes(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy()
    for body in ({"mode": "rewind"}, {"cassete": "typo"}):
        response = proxy.put_cassette(**body)
        assert response.status_code == 400
        assert "record, replay, auto, once, passthrough" in response.json()["error"]["message"]
    bad_json = httpx.put(proxy.url + "/__tapeproxy/cassette", content=b"{not json")
    assert bad_json.status_code == 400


def test_a_bad_control_body_is_one_line_without_pydantics_noise(make_proxy: MakeProxy) -> None:
    proxy = make_proxy()
    cassette = proxy.put_cassette(mode="rewind").json()["error"]["message"]
    assert cassette.endswith(
        ": mode: Input should be 'record', 'replay', 'auto', 'once' or 'passthrough'"
    )
    faults = httpx.put(proxy.url + "/__tapeproxy/faults", json={"faults": "reset"})
    message = faults.json()["error"]["message"]
    assert message.endswith(">= 0): faults: Input should be a valid list"), message
    for said in (cassette, message):
        assert "\n" not in said and "[type=" not in said and "pydantic.dev" not in said


def test_a_control_body_that_is_no_object_or_no_json_says_so_in_plain_words(
    make_proxy: MakeProxy,
) -> None:
    """A body that is not a JSON object names no model class of ours; one that is not JSON
    (or too deeply nested to read) says the body is not JSON: a 400 in the JSON error
    shape, never a bare 500."""
    proxy = make_proxy()
    deep = "[" * 30_000 + "]" * 30_000  # under the control body cap
    for endpoint in ("cassette", "faults"):
        url = f"{proxy.url}/__tapeproxy/{endpoint}"
        for body, said in (
            ("[]", ": the body must be a JSON object"),
            ('"x"', ": the body must be a JSON object"),
            ("nope", ": the body is not JSON: Expecting value: line 1 column 1 (char 0)"),
            (deep, ": the body is not JSON: it is nested too deeply"),
        ):
            answer = httpx.put(url, content=body)
            assert answer.status_code == 400, (endpoint, body[:10], answer.text[:200])
            message = answer.json()["error"]["message"]
            assert message.endswith(said), message
            assert "CassetteSwitch" not in message and "FaultsChange" not in message


def test_an_unknown_control_endpoint_is_a_404_listing_the_real_ones(
    make_proxy: MakeProxy,
) -> None:
    response = httpx.get(make_proxy().url + "/__tapeproxy/stat")
    assert response.status_code == 404
    assert "/__tapeproxy/stats" in response.json()["error"]["message"]


def test_a_put_also_starts_a_new_run_of_cassettes_picked_by_header(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="record")
    assert embed(proxy.url, cassette="suite/test_a").status_code == 200
    proxy.put_cassette(mode="replay")
    assert embed(proxy.url, cassette="suite/test_a").status_code == 200, (
        "asked once in record mode, then once in the new replay run: served"
    )


def test_recordings_a_run_left_unused_still_count_after_a_put_ends_it(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="record")
    embed(proxy.url, text="used")
    embed(proxy.url, text="never asked")
    proxy.put_cassette(mode="replay")
    assert embed(proxy.url, text="used").status_code == 200
    proxy.put_cassette(cassette="other")
    stats = proxy.stats
    assert stats["unused_total"] == 1
    [ended] = [run for run in stats["ended_runs"] if run["unused_count"]]
    assert ended["cassette"] == "default" and ended["served"] == 1


def test_a_cassette_switch_leaves_another_clients_header_picked_run_alone(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.script(
        "/v1/embeddings",
        *(Reply(body={"object": "list", "data": [], "model": f"answer-{n}"}) for n in range(3)),
    )
    recorder = make_proxy(mode="record")
    for _ in range(3):
        embed(recorder.url, cassette="worker1/test_a")
    recorder.stop()
    replayer = make_proxy(mode="replay")
    first = embed(replayer.url, cassette="worker1/test_a").json()
    replayer.put_cassette(cassette="worker2/test_b")  # another worker moves on to its next test
    rest = [embed(replayer.url, cassette="worker1/test_a").json() for _ in range(2)]
    assert [answer["model"] for answer in (first, *rest)] == [f"answer-{n}" for n in range(3)]
    assert embed(replayer.url, cassette="worker1/test_a").status_code == 422


def test_a_client_that_hangs_up_mid_upload_is_one_quiet_line(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(mode="replay")
    host, port = proxy.url.removeprefix("http://").split(":")
    for path in ("/openai/v1/embeddings", "/__tapeproxy/cassette"):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                f"PUT {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: 100000\r\n"
                'content-type: application/json\r\n\r\n{"a": 1'.encode()
            )
    wait_for(lambda: proxy.stats["aborted"] >= 2)
    assert proxy.stats["aborted"] == 2
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


def test_once_mode_records_a_new_cassette_then_replays_it_after_a_put(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="once", cassette="suite/test_new")
    assert [embed(proxy.url, text=t).status_code for t in ("a", "b")] == [200, 200]
    assert len(list((cassettes / "suite" / "test_new").glob("*.json"))) == 2
    assert proxy.put_cassette(cassette="suite/test_new").json()["mode"] == "once"
    assert embed(proxy.url, text="a").status_code == 200
    miss = embed(proxy.url, text="c")
    assert miss.status_code == 422, "a cassette with recordings replays: no new episodes"
    stats = proxy.stats
    assert (stats["recorded"], stats["replayed"], stats["upstream_calls"]) == (2, 1, 2)
    # Another test's empty cassette, picked by the control API, records on its first run.
    proxy.put_cassette(cassette="suite/test_other")
    assert embed(proxy.url, text="c").status_code == 200
    assert proxy.stats["upstream_calls"] == 3


def test_a_loopback_client_sending_x_forwarded_for_is_still_seen_at_its_own_address(
    cassettes: Path,
) -> None:
    # tapeproxy's own uvicorn settings, with a look at the scope its app is handed: a client
    # must not pick the address it is judged by (uvicorn's proxy headers would make this
    # loopback client 8.8.8.8, since it trusts X-Forwarded-For from 127.0.0.1).
    settings = Settings.model_validate({"port": 0, "cassettes": cassettes, "shutdown_timeout": 2})
    app = create_app(settings)
    clients: list[str] = []

    async def seen(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            clients.append(scope["client"][0])
        await app(scope, receive, send)

    urls: list[str] = []
    ready = threading.Event()

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    server = ReadyServer(uvicorn_config(seen, settings), on_ready)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        assert ready.wait(timeout=20), "tapeproxy did not start"
        forged = {"x-forwarded-for": "8.8.8.8", "x-forwarded-proto": "https"}
        answer = httpx.put(
            urls[0] + "/__tapeproxy/cassette", json={"cassette": "forged"}, headers=forged
        )
        assert answer.status_code == 200, answer.text
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert clients == ["127.0.0.1"]


def test_a_loopback_server_without_a_token_takes_control_requests_only_at_its_own_names(
    make_proxy: MakeProxy,
) -> None:
    """A web page elsewhere whose host name now points at 127.0.0.1 (DNS rebinding) sends
    its own name as the Host: it may not switch the cassette or read the misses."""
    proxy = make_proxy(mode="replay")
    port = proxy.url.rsplit(":", 1)[1]
    rebound = {"Host": f"evil.example:{port}"}
    switch = {"cassette": "theirs", "mode": "record"}
    for method, path in [("PUT", "cassette"), ("GET", "misses"), ("GET", "stats"), ("GET", "ui/")]:
        answer = httpx.request(
            method, f"{proxy.url}/__tapeproxy/{path}", json=switch, headers=rebound
        )
        assert answer.status_code == 403, (method, path)
        message = answer.json()["error"]["message"]
        assert "\n" not in message and "--admin-token" in message
    assert httpx.get(proxy.url + "/__tapeproxy/health", headers=rebound).status_code == 200
    assert httpx.get(proxy.url + "/__tapeproxy/cassette").json()["mode"] == "replay"
    for name in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        answer = httpx.put(proxy.url + "/__tapeproxy/cassette", json=switch, headers={"Host": name})
        assert answer.status_code == 200, name


def test_with_an_admin_token_a_rebound_host_needs_the_token_for_reads_too(
    make_proxy: MakeProxy,
) -> None:
    token = "a-token-0123456789abcdef"
    proxy = make_proxy(mode="replay", admin_token=token)
    rebound = {"Host": "tapeproxy.internal"}
    assert httpx.get(proxy.url + "/__tapeproxy/misses", headers=rebound).status_code == 403
    assert httpx.get(proxy.url + "/__tapeproxy/misses").status_code == 200  # its own name
    bearer = {**rebound, "Authorization": f"Bearer {token}"}
    answer = httpx.put(proxy.url + "/__tapeproxy/cassette", json={"cassette": "x"}, headers=bearer)
    assert answer.status_code == 200
    assert httpx.get(proxy.url + "/__tapeproxy/misses", headers=bearer).status_code == 200


def test_the_proxy_routes_answer_any_host(make_proxy: MakeProxy, fake: FakeUpstream) -> None:
    """A container reaches a loopback tapeproxy as host.docker.internal."""
    proxy = make_proxy(mode="record")
    headers = {"Host": "host.docker.internal:8787", "authorization": "Bearer sk-test-fake"}
    answer = httpx.post(proxy.url + "/openai/v1/embeddings", json=EMBED, headers=headers)
    assert answer.status_code == 200
