"""Faults through the real server, driven by the official SDKs and raw HTTP: a 429 an SDK
retries, an overload, dropped connections, seeded faults over concurrent requests, and a
record run that writes nothing faulted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import anthropic
import httpx
import openai
import pytest

from tapeproxy.providers import BUILTIN
from tapeproxy.store.files import FileStore
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_OPENAI, library_files
from tests.support.serve import ROOT, TAPEPROXY, Serve

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def chat(url: str, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=max_retries
    )


def record_chat(make_proxy: MakeProxy, fake: FakeUpstream) -> str:
    """One chat completion recorded in cassette `default`, the upstream stopped: its text."""
    recorder = make_proxy(mode="record")
    text = chat(recorder.url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    recorder.stop()
    fake.stop()
    return text.choices[0].message.content or ""


def test_openai_sdk_retries_a_rate_limit_after_its_retry_after_and_gets_the_recording(
    make_proxy: MakeProxy, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    recorded = record_chat(make_proxy, fake)
    proxy = make_proxy(mode="replay", fault=("rate_limit@1",))
    caplog.set_level(logging.INFO, logger="openai")
    answer = chat(proxy.url, max_retries=2).chat.completions.create(
        model="gpt-4o-mini",
        messages=MESSAGES,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content == recorded
    retries = [r.getMessage() for r in caplog.records if "Retrying request" in r.getMessage()]
    # One retry, after the 429's retry-after of 1 second (the SDK's own back-off is shorter).
    assert retries == ["Retrying request in 1.000000 seconds (retry 1 of 2)"]
    stats = proxy.stats
    assert (stats["faults"], stats["faults_by_kind"]) == (1, {"rate_limit": 1})
    assert (stats["replayed"], stats["misses"]) == (1, 0)  # the fault used up no recording


def test_a_rate_limit_carries_the_providers_headers_and_error_shape(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="passthrough", fault=("rate_limit:retry_after=7",))
    answer = httpx.post(proxy.url + "/openai/v1/chat/completions", json={"model": "m"})
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "7"
    assert answer.headers["x-ratelimit-remaining-requests"] == "0"
    assert answer.headers["x-ratelimit-reset-tokens"] == "7s"
    assert answer.json()["error"]["code"] == "rate_limit_exceeded"
    ant = httpx.post(proxy.url + "/anthropic/v1/messages", json={"model": "m"})
    assert ant.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert ant.json()["error"]["type"] == "rate_limit_error"
    assert fake.count() == 0  # a stand-in answer never calls the upstream


def test_anthropic_sdk_gets_a_529_overloaded_error(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="passthrough", fault=("overloaded@1",))
    client = anthropic.Anthropic(
        base_url=proxy.url + "/anthropic", api_key=SECRET_ANTHROPIC, max_retries=0
    )
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model="claude-test-1", max_tokens=64, messages=MESSAGES)  # type: ignore[arg-type]
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    # The second request of the run is not faulted: it reaches the upstream.
    message = client.messages.create(model="claude-test-1", max_tokens=64, messages=MESSAGES)  # type: ignore[arg-type]
    assert message.content


def test_a_recorded_rate_limit_is_served_as_it_was(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    body = {"error": {"message": "Rate limit reached for gpt-4o-mini", "type": "requests"}}
    fake.script("/v1/chat/completions", Reply(status=429, body=body))
    recorder = make_proxy(mode="record", record_failures=True)
    failed = httpx.post(recorder.url + "/openai/v1/chat/completions", json={"a": 1})
    assert failed.status_code == 429
    recorder.stop()
    proxy = make_proxy(mode="replay", fault=("rate_limit",))
    answer = httpx.post(proxy.url + "/openai/v1/chat/completions", json={"other": 2})
    assert (answer.status_code, answer.json()) == (429, body)
    assert answer.headers["retry-after"] == "1"  # a recording keeps none: it is added


@pytest.mark.parametrize("edit", ["header", "body"])
def test_a_recorded_error_a_hand_edit_left_unsendable_is_passed_over_for_the_providers_shape(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, edit: str
) -> None:
    """Before, a recorded 429 whose header held a line break stood in as it was (the server
    closed the connection with no answer), and one whose body was no base64 was a 500."""
    body = {"error": {"message": "Rate limit reached for gpt-4o-mini", "type": "requests"}}
    fake.script("/v1/chat/completions", Reply(status=429, body=body))
    recorder = make_proxy(mode="record", record_failures=True)
    assert httpx.post(recorder.url + "/openai/v1/chat/completions", json={"a": 1}).is_error
    recorder.stop()
    [stored] = (cassettes / "default").glob("*.json")
    data = json.loads(stored.read_text())
    if edit == "header":
        data["response"]["headers"]["x-note"] = "a\r\nx-injected: 1"
    else:  # a body no base64 decodes: the same check a replay makes
        data["response"]["body"] = {"base64": "@@@ not base64"}
    stored.write_text(json.dumps(data))
    proxy = make_proxy(mode="replay", fault=("rate_limit",))
    answer = httpx.post(proxy.url + "/openai/v1/chat/completions", json={"other": 2})
    assert answer.status_code == 429
    assert answer.json()["error"]["code"] == "rate_limit_exceeded"  # the provider's shape
    assert "x-injected" not in answer.headers


def test_reset_and_timeout_close_the_connection_with_nothing_sent(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    proxy = make_proxy(mode="passthrough")
    url = proxy.url + "/openai/v1/chat/completions"
    with pytest.raises(httpx.RemoteProtocolError, match="without sending"):
        httpx.post(url, json={"a": 1}, headers={"x-tapeproxy-fault": "reset"})
    with pytest.raises(httpx.RemoteProtocolError, match="without sending"):
        httpx.post(url, json={"a": 1}, headers={"x-tapeproxy-fault": "timeout:after=0.2"})
    with pytest.raises(httpx.ReadTimeout):  # the client gives up first: the wait ends with it
        httpx.post(url, json={}, headers={"x-tapeproxy-fault": "timeout"}, timeout=0.3)
    stats = proxy.stats
    assert stats["faults_by_kind"] == {"reset": 1, "timeout": 2}
    assert stats["errors"] == 0 and fake.count() == 0
    assert httpx.post(url, json={"a": 1}).status_code == 200  # the header was for one request


def test_a_bad_fault_header_is_a_400_in_the_providers_shape(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="passthrough")
    answer = httpx.post(
        proxy.url + "/anthropic/v1/messages", json={}, headers={"x-tapeproxy-fault": "flood@1"}
    )
    assert answer.status_code == 400
    assert answer.json()["type"] == "error"  # Anthropic's shape
    assert answer.json()["error"]["type"] == "bad_fault"
    assert "'flood@1'" in answer.json()["error"]["message"]


def test_faults_are_put_cleared_and_a_bad_one_refused(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="passthrough", fault_seed=5)
    faults = proxy.url + "/__tapeproxy/faults"
    url = proxy.url + "/openai/v1/chat/completions"
    put = httpx.put(faults, json={"faults": ["server_error:status=503@2"]})
    assert put.json() == {"faults": ["server_error:status=503@2"], "seed": 5}
    assert [httpx.post(url, json={}).status_code for _ in range(3)] == [200, 503, 200]
    bad = httpx.put(faults, json={"faults": ["cut@p=1.5"]})
    assert bad.status_code == 400
    assert "outside [0, 1]" in bad.json()["error"]["message"]
    assert httpx.get(faults).json()["faults"] == ["server_error:status=503@2"]  # unchanged
    assert httpx.put(faults, json={"faults": []}).json()["faults"] == []
    assert httpx.post(url, json={}).status_code == 200


def faulted_in(url: str, order: list[int]) -> set[int]:
    """Send request i for each i in `order`, all at once: the ones that got a 429."""

    async def send_all() -> set[int]:
        async with httpx.AsyncClient(timeout=30) as client:

            async def one(i: int) -> tuple[int, int]:
                answer = await client.post(url, json={"n": i})
                return i, answer.status_code

            done = await asyncio.gather(*(one(i) for i in order))
        return {i for i, status in done if status == 429}

    return asyncio.run(send_all())


def test_the_same_seed_fails_the_same_requests_in_any_order(make_proxy: MakeProxy) -> None:
    forward, backward = list(range(50)), list(range(49, -1, -1))
    interleaved = [*range(0, 50, 2), *range(1, 50, 2)]
    proxy = make_proxy(mode="passthrough", fault=("rate_limit@p=0.3",), fault_seed=11)
    url = proxy.url + "/openai/v1/chat/completions"
    first = faulted_in(url, forward)
    assert 0 < len(first) < 50
    httpx.put(proxy.url + "/__tapeproxy/faults", json={"faults": ["rate_limit@p=0.3"]})
    assert faulted_in(url, backward) == first
    httpx.put(proxy.url + "/__tapeproxy/faults", json={"faults": ["rate_limit@p=0.3"]})
    assert faulted_in(url, interleaved) == first
    other = make_proxy(mode="passthrough", fault=("rate_limit@p=0.3",), fault_seed=12)
    assert faulted_in(other.url + "/openai/v1/chat/completions", forward) != first


def test_a_put_of_the_seed_decides_which_requests_fault_as_the_option_does(
    make_proxy: MakeProxy,
) -> None:
    order = list(range(40))
    started = make_proxy(mode="passthrough", fault=("rate_limit@p=0.3",), fault_seed=21)
    with_21 = faulted_in(started.url + "/openai/v1/chat/completions", order)
    proxy = make_proxy(mode="passthrough", fault=("rate_limit@p=0.3",), fault_seed=5)
    faults, url = proxy.url + "/__tapeproxy/faults", proxy.url + "/openai/v1/chat/completions"
    with_5 = faulted_in(url, order)
    assert with_5 != with_21
    put = httpx.put(faults, json={"seed": 21})  # the faults in force are kept
    assert put.json() == {"faults": ["rate_limit@p=0.3"], "seed": 21}
    assert faulted_in(url, order) == with_21
    put = httpx.put(faults, json={"faults": ["rate_limit@p=0.3"], "seed": 5})
    assert (put.status_code, faulted_in(url, order)) == (200, with_5)
    assert httpx.get(faults).json()["seed"] == 5 == proxy.stats["fault_seed"]
    for bad in (-1, "7", True, 1.5):
        refused = httpx.put(faults, json={"seed": bad})
        assert refused.status_code == 400, bad
        assert "seed: " in refused.json()["error"]["message"]
    assert httpx.get(faults).json() == {"faults": ["rate_limit@p=0.3"], "seed": 5}


def test_record_mode_writes_nothing_faulted_and_the_rest(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record", fault=("malformed@1", "cut:after=5@2", "overloaded@3"))
    url = proxy.url + "/openai/v1/chat/completions"
    spoiled = httpx.post(url, json={"n": 1})
    assert spoiled.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        spoiled.json()
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(url, json={"n": 2})
    assert httpx.post(url, json={"n": 3}).status_code == 503
    kept = httpx.post(url, json={"n": 4})
    proxy.stop()
    files = library_files(cassettes)
    assert len(files) == 1 and b'"n": 4' in files[0].read_bytes().replace(b'"n":4', b'"n": 4')
    assert kept.status_code == 200 and fake.count() == 3  # n=1, 2 went live, unwritten


def test_a_replay_run_notes_the_faults_it_served(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    record_chat(make_proxy, fake)
    proxy = make_proxy(mode="replay", fault=("slow:ttfb=1@1", "malformed@2"))
    client = chat(proxy.url)
    for _ in range(2):
        with contextlib.suppress(openai.APIError, json.JSONDecodeError):
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    proxy.stop()
    note = FileStore(cassettes).read_last_run("default")
    assert note is not None and note.faults == {"slow": 1, "malformed": 1}


def streamed(client: openai.OpenAI) -> list[str | None]:
    create: Any = client.chat.completions.create  # (MESSAGES is a plain list of dicts)
    stream = create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    return [c.choices[0].delta.content for c in stream if c.choices]


def test_a_slow_stream_is_the_recording_and_a_malformed_one_fails_the_sdk(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    recorded = streamed(chat(recorder.url))
    recorder.stop()
    fake.stop()

    proxy = make_proxy(mode="replay", fault=("slow:ttfb=20,gap=5@1", "malformed@2"))
    client = chat(proxy.url)
    assert streamed(client) == recorded
    with pytest.raises(json.JSONDecodeError):
        streamed(client)
    assert proxy.stats["faults_by_kind"] == {"slow": 1, "malformed": 1}


def test_a_live_stream_is_cut_after_its_frames_and_nothing_is_recorded(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record", fault=("cut:after=2@1",))
    client = chat(proxy.url)
    create: Any = client.chat.completions.create
    got = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in create(model="gpt-4o-mini", messages=MESSAGES, stream=True):
            got.append(chunk)
    assert len(got) == 2
    assert len(streamed(client)) > 2  # the second request is not faulted, and is recorded
    proxy.stop()
    assert len(library_files(cassettes)) == 1


@pytest.mark.parametrize("upstream", sorted(BUILTIN))
def test_every_provider_fails_in_its_own_shape(make_proxy: MakeProxy, upstream: str) -> None:
    proxy = make_proxy(mode="passthrough")
    url = f"{proxy.url}/{upstream}/v1/anything"
    limited = httpx.post(url, json={}, headers={"x-tapeproxy-fault": "rate_limit:retry_after=3"})
    overloaded = httpx.post(url, json={}, headers={"x-tapeproxy-fault": "overloaded"})
    failed = httpx.post(url, json={}, headers={"x-tapeproxy-fault": "server_error:status=502"})
    provider = BUILTIN[upstream]
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
    assert overloaded.status_code == provider.overload[0]
    assert failed.status_code == 502
    for answer, kind in (
        (limited, provider.rate_limit_type),
        (overloaded, provider.overload[1]),
        (failed, provider.server_error_type),
    ):
        assert answer.json() == provider.error_body(kind, ANY, answer.status_code)  # any message
        assert answer.headers["x-tapeproxy-fault"]


def test_serve_prints_the_seed_it_drew_and_the_faults_it_served(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    args = ["--mode", "passthrough", "--upstream", f"openai={fake.url}", "--fault", "reset@p=1"]
    server = Serve([*args, "--fault", "overloaded@p=0"], tmp_path)
    url = server.url + "/openai/v1/chat/completions"
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(url, json={})
    seed = httpx.get(server.url + "/__tapeproxy/stats").json()["fault_seed"]
    code, err = server.stop()
    assert code == 0
    assert f"faults: reset@p=1, overloaded@p=0 (--fault-seed {seed})" in err
    assert f"faults served: 1 (1 reset), --fault-seed {seed}" in err
    assert "fault=reset@p=1" in err  # the exchange's own log line


def test_each_dropping_or_cutting_fault_logs_what_really_happened(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """No 504 went out for a reset or a timeout (the connection closed with nothing sent),
    and a cut client did not go away: the fault cut its answer."""
    fake.frame_delay = 0.05  # the stream is still coming when the fault cuts it
    args = ["--mode", "record", "--cassettes", str(tmp_path / "c"), "--upstream"]
    server = Serve([*args, f"openai={fake.url}"], tmp_path)
    url = server.url + "/openai/v1/chat/completions"
    for fault in ("reset", "timeout:after=0.2"):
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(url, json={}, headers={"x-tapeproxy-fault": fault})
    client = chat(server.url).with_options(default_headers={"x-tapeproxy-fault": "cut:after=2"})
    with pytest.raises(openai.APIConnectionError):
        streamed(client)
    assert httpx.get(server.url + "/__tapeproxy/stats").json()["aborted"] == 0
    code, err = server.stop()
    assert code == 0, err
    lines = {line.rpartition(" fault=")[2]: line for line in err.splitlines() if " fault=" in line}
    assert "-> connection closed at once by the fault, nothing sent (" in lines["reset"]
    timeout = lines["timeout:after=0.2"]
    assert "-> connection closed after 0.2 s by the fault, nothing sent (" in timeout
    assert int(timeout.rpartition("(")[2].split()[0]) >= 200  # logged when it happened
    assert "-> cut by the fault after 2 frame(s), nothing recorded 200 (" in lines["cut:after=2"]
    assert "504" not in err and "client went away" not in err


def test_a_bad_fault_stops_the_start_with_one_line_naming_it(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    result = subprocess.run(
        [*TAPEPROXY, "serve", "--port", "0", "--fault", "cut:after=x@2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**environ, "PYTHONPATH": str(ROOT)},
        timeout=30,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "fault 'cut:after=x@2': after needs a number" in result.stderr


def test_a_slow_fault_ends_its_wait_when_the_client_leaves(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    """A header may ask for a wait of years: the client that leaves ends it, and the live
    answer it held (its upstream connection) is closed then, as for a timeout."""
    proxy = make_proxy(mode="passthrough")
    url = proxy.url + "/openai/v1/chat/completions"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json={}, headers={"x-tapeproxy-fault": "slow:ttfb=99999999"}, timeout=0.3)
    for _ in range(100):  # the server sees the hang-up a moment later
        if proxy.stats["aborted"] == 1:
            break
        time.sleep(0.02)
    assert proxy.stats["aborted"] == 1  # the answer was closed, not left waiting
    assert proxy.stats["faults_by_kind"] == {"slow": 1}


@pytest.mark.parametrize("fault", ["rate_limit", "server_error", "reset"])
def test_a_recording_a_fault_stood_in_for_is_not_pruned_as_unused(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, fault: str
) -> None:
    """A request answered by a fault in place of its recording asked for that recording:
    the run did not use it up (a retry gets it), but prune must not delete it as unused. A
    replay run under `--fault rate_limit` (every request) left every recording unused, and
    prune deleted the whole cassette."""
    record_chat(make_proxy, fake)
    proxy = make_proxy(mode="replay", fault=(fault,))
    with pytest.raises((openai.APIStatusError, openai.APIConnectionError)):
        chat(proxy.url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert proxy.stats["replayed"] == 0
    proxy.stop()
    note = FileStore(cassettes).read_last_run("default")
    assert note is not None and note.faults == {fault: 1}
    assert (len(note.used), note.unused, note.served) == (1, [], 0)


def test_a_recording_served_under_a_fault_that_spoils_it_is_not_pruned_as_unused(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    """A slow, cut or malformed answer is its recording's: the run used it (`prune` must not
    delete what the same faulted test serves next time), though not up (a retry gets it)."""
    record_chat(make_proxy, fake)
    proxy = make_proxy(mode="replay", fault=("slow:ttfb=1",))
    chat(proxy.url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    proxy.stop()
    note = FileStore(cassettes).read_last_run("default")
    assert note is not None and note.faults == {"slow": 1}
    assert (len(note.used), note.unused) == (1, [])
