"""Bedrock through tapeproxy's reverse route with boto3's `bedrock-runtime`, parsed by botocore
itself: recorded with `--resign aws` against a fake that checks each SigV4 signature for its
own host, then replayed with the fake stopped and dummy keys, to identical results."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import vcr  # type: ignore[import-untyped]
import yaml
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, EventStreamError
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.exchange.eventstream import Message, encode
from tests.conftest import MakeProxy
from tests.e2e.test_guide_recipes import RECIPE_URL, recipe
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, files_under, library_files
from tests.support.aws import CLIENT, DUMMY, MODEL, TAPE, aws_env, bedrock

__all__ = ["aws_env", "bedrock"]  # fixtures this module uses

HELLO = [{"role": "user", "content": [{"text": "hello bedrock"}]}]
INVOKE = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hello invoke"}],
}


Signed = list[str]
FAKE = "fake:"  # a URL so marked is the fake's own, with no route prefix


def client(url: str, keys: tuple[str, str, str | None], seen: Signed | None = None) -> Any:
    """A bedrock-runtime client of tapeproxy's reverse route (or of the fake itself)."""
    made = boto3.client(
        "bedrock-runtime",
        endpoint_url=url.removeprefix(FAKE) if url.startswith(FAKE) else f"{url}/bedrock",
        region_name="us-east-1",
        aws_access_key_id=keys[0],
        aws_secret_access_key=keys[1],
        aws_session_token=keys[2],
        config=Config(retries={"mode": "standard", "max_attempts": 3}),
    )
    if seen is not None:  # every signature the client made, for the scan

        def keep(request: Any, **_: Any) -> None:
            seen.append(request.headers["Authorization"].decode().rsplit("=", 1)[1])

        made.meta.events.register("before-send.bedrock-runtime.*", keep)
    return made


def calls(runtime: Any) -> dict[str, Any]:
    """The four operations, each as botocore parsed it (no response metadata)."""
    converse = runtime.converse(modelId=MODEL, messages=HELLO)
    converse.pop("ResponseMetadata")
    streamed = runtime.converse_stream(modelId=MODEL, messages=HELLO)
    invoked = runtime.invoke_model(modelId=MODEL, body=json.dumps(INVOKE))
    chunks = runtime.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(INVOKE))
    return {
        "converse": converse,
        "converse_stream": list(streamed["stream"]),
        "invoke_model": json.loads(invoked["body"].read()),
        "invoke_stream": [json.loads(event["chunk"]["bytes"]) for event in chunks["body"]],
    }


def test_boto3_records_through_resign_and_replays_offline_to_identical_results(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", resign="aws")
    live = calls(client(recorder.url, CLIENT))
    recorder.stop()
    assert bedrock.count() == 4, "each one re-signed for the fake's host and accepted"
    assert live["converse"]["output"]["message"]["content"][0]["text"] == "echo: hello bedrock"
    assert [next(iter(e)) for e in live["converse_stream"]][-2:] == ["messageStop", "metadata"]
    assert live["invoke_stream"][-1]["type"] == "message_stop"
    bedrock.stop()
    replayer = make_proxy(mode="replay")
    assert calls(client(replayer.url, DUMMY)) == live
    assert replayer.stats["replayed"] == 4
    exchanges = [json.loads(p.read_text()) for p in library_files(cassettes)]
    streams = [e for e in exchanges if e["response"].get("dialect") == "eventstream"]
    assert len(streams) == 2
    assert all("text" in frame for e in streams for frame in e["response"]["frames"])
    assert all(e["usage"]["output_tokens"] > 0 for e in exchanges)


def test_the_fake_refuses_a_signature_not_made_for_it(bedrock: FakeUpstream) -> None:
    with pytest.raises(ClientError, match="signature we calculated does not match"):
        client(FAKE + bedrock.url.replace("127.0.0.1", "localhost"), TAPE).converse(
            modelId=MODEL, messages=HELLO
        )
    with pytest.raises(ClientError, match="security token included in the request is invalid"):
        client(FAKE + bedrock.url, CLIENT).converse(modelId=MODEL, messages=HELLO)
    assert client(FAKE + bedrock.url, TAPE).converse(modelId=MODEL, messages=HELLO)["usage"]


def test_a_signed_request_without_resign_fails_in_one_line_naming_the_ways(
    make_proxy: MakeProxy, bedrock: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(mode="record")
    with caplog.at_level(logging.WARNING, logger="tapeproxy"), pytest.raises(ClientError) as raised:
        client(proxy.url, CLIENT).converse(modelId=MODEL, messages=HELLO)
    message = raised.value.response["Error"]["Message"]
    assert "--resign aws" in message and "tapeproxy run" in message and "\n" not in message
    assert any("--resign aws" in r.getMessage() for r in caplog.records)
    assert bedrock.count() == 0


def _raw_signed(url: str, when: str) -> httpx.Response:
    """One Converse request signed by botocore's signer at `when` (X-Amz-Date)."""
    body = json.dumps({"messages": HELLO}).encode()
    request = AWSRequest("POST", f"{url}/bedrock/model/{MODEL}/converse", data=body)
    request.headers["content-type"] = "application/json"
    request.context["timestamp"] = when
    request.headers["X-Amz-Date"] = when
    auth = SigV4Auth(Credentials(*CLIENT), "bedrock", "us-east-1")
    request.headers["X-Amz-Security-Token"] = CLIENT[2]
    to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    signature = auth.signature(to_sign, request)
    signed = auth.signed_headers(auth.headers_to_sign(request))
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={auth.scope(request)}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return httpx.post(request.url, content=body, headers=dict(request.headers.items()))


def test_the_same_request_signed_at_two_times_has_one_key(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record", resign="aws")
    first = _raw_signed(recorder.url, "20260101T000000Z")
    recorder.stop()
    bedrock.stop()
    replayer = make_proxy(mode="replay")
    second = _raw_signed(replayer.url, "20261127T120000Z")
    assert second.status_code == 200, second.text
    assert first.headers["x-tapeproxy-key"] == second.headers["x-tapeproxy-key"]
    assert second.content == first.content


def _recorded(make_proxy: MakeProxy, bedrock: FakeUpstream) -> Callable[..., Any]:
    recorder = make_proxy(mode="record", resign="aws")
    calls(client(recorder.url, CLIENT))
    recorder.stop()
    bedrock.stop()
    return make_proxy


def test_a_rate_limit_reaches_boto3_as_throttling_and_its_retry_gets_the_recording(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    _recorded(make_proxy, bedrock)
    once = make_proxy(mode="replay", fault=("rate_limit:retry_after=0@1",))
    answer = client(once.url, DUMMY).converse(modelId=MODEL, messages=HELLO)
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1
    assert answer["output"]["message"]["content"][0]["text"] == "echo: hello bedrock"
    always = make_proxy(mode="replay", fault=("rate_limit:retry_after=0",))
    with pytest.raises(ClientError) as raised:
        client(always.url, DUMMY).converse(modelId=MODEL, messages=HELLO)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"


def test_a_cut_bedrock_stream_reaches_botocore_as_an_error_mid_stream(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    _recorded(make_proxy, bedrock)
    proxy = make_proxy(mode="replay", fault=("cut:after=2",))
    events: list[Any] = []
    with pytest.raises(EventStreamError, match="internalServerException"):
        for event in client(proxy.url, DUMMY).converse_stream(modelId=MODEL, messages=HELLO)[
            "stream"
        ]:
            events.append(event)
    assert len(events) == 2


def test_no_key_secret_token_or_signature_reaches_a_cassette_or_a_log(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With botocore's debug logging on (its signer logs the canonical request, the session
    token in it): the lines of tapeproxy's threads hold none. The test's own boto3 client,
    on this thread, logs its own keys: those lines are not tapeproxy's."""
    signatures: Signed = []
    botocore = logging.getLogger("botocore")
    level = botocore.level
    botocore.setLevel(logging.DEBUG)  # whatever an earlier test (or tapeproxy) left
    try:
        with caplog.at_level(logging.DEBUG):
            recorder = make_proxy(mode="record", resign="aws")
            calls(client(recorder.url, CLIENT, signatures))
            recorder.stop()
    finally:
        botocore.setLevel(level)
    resigned = [h.headers["authorization"].rsplit("=", 1)[1] for h in bedrock.hits]
    secrets = [*TAPE, *CLIENT, *signatures, *resigned]
    assert len(signatures) == len(resigned) == 4
    ours = [r for r in caplog.records if r.thread != threading.get_ident()]
    assert any(r.name == "tapeproxy" for r in ours)
    recorded_logs = "\n".join(r.getMessage() for r in ours)
    for secret in secrets:
        assert secret not in recorded_logs
        for name, data in files_under(cassettes).items():
            assert secret.encode() not in data, name


def test_aws_echoing_the_session_token_in_a_signature_mismatch_writes_it_nowhere(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """AWS's 403 for a signature it computes otherwise quotes its canonical string, each
    signed header's value in it: the session token tapeproxy signed with. A 4xx is recorded."""
    assert bedrock.sigv4 is not None
    bedrock.sigv4.host = "bedrock-runtime.us-east-1.amazonaws.com"  # not what it is signed for
    with caplog.at_level(logging.DEBUG):
        recorder = make_proxy(mode="record", resign="aws")
        with pytest.raises(ClientError, match="Canonical String") as raised:
            client(recorder.url, CLIENT).converse(modelId=MODEL, messages=HELLO)
        recorder.stop()
    assert f"x-amz-security-token:{TAPE[2]}" in raised.value.response["Error"]["Message"]
    assert library_files(cassettes), "the 403 is recorded"
    for name, data in files_under(cassettes).items():
        assert TAPE[2].encode() not in data, name
    assert TAPE[2] not in "\n".join(r.getMessage() for r in caplog.records)


def test_an_eventstream_answer_that_is_no_message_is_recorded_so_that_it_replays(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    """A gateway's page labelled as an eventstream, or a message whose readable form would
    not give back its bytes (a header name twice): kept as its bytes, replayed as them."""
    path = f"/model/{MODEL}/converse"
    twice = encode(Message(((":event-type", "a"), (":event-type", "a")), b"{}"))
    bodies = [b"a gateway's page, UTF-8 text and no eventstream\n", twice]
    kind = {"content-type": "application/vnd.amazon.eventstream"}
    bedrock.sigv4 = None
    bedrock.script(path, *(Reply(body=body, headers=kind, chunked=True) for body in bodies))
    recorder = make_proxy(mode="record")
    live = [httpx.post(f"{recorder.url}/bedrock{path}", json={"n": n}) for n in range(2)]
    recorder.stop()
    bedrock.stop()
    replayer = make_proxy(mode="replay")
    for n, answer in enumerate(live):
        again = httpx.post(f"{replayer.url}/bedrock{path}", json={"n": n})
        assert (again.status_code, again.content) == (
            200,
            answer.content == bodies[n] and answer.content,
        )


def test_show_full_prints_a_bedrock_stream_as_text(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    _recorded(make_proxy, bedrock)
    result = CliRunner().invoke(app, ["show", "default", "--full", "--cassettes", str(cassettes)])
    assert result.exit_code == 0, result.output
    assert "echo: hello bedrock" in result.output
    assert "echo: hello invoke" in result.output


def test_the_guides_boto3_recipe_records_re_signed_then_replays_with_no_aws_variable(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    code = recipe("bedrock-boto3")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TAPEPROXY_"))}

    def run(url: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code.replace(RECIPE_URL, url)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    recorder = make_proxy(mode="record", resign="aws")
    assert run(recorder.url) == "echo: What is the capital of France?\n"
    recorder.stop()
    bedrock.stop()
    assert run(make_proxy(mode="replay").url) == "echo: What is the capital of France?\n"


def test_a_miss_reaches_boto3_as_a_client_error_it_does_not_retry(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    _recorded(make_proxy, bedrock)
    proxy = make_proxy(mode="replay")
    other = [{"role": "user", "content": [{"text": "never recorded"}]}]
    with pytest.raises(ClientError) as raised:
        client(proxy.url, DUMMY).converse(modelId=MODEL, messages=other)
    error = raised.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["RetryAttempts"]) == (
        "cassette_miss",
        0,
    )


def test_a_key_in_a_bedrock_stream_is_scrubbed_and_the_replay_still_parses(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    leak = [{"role": "user", "content": [{"text": f"my key is {SECRET_OPENAI}"}]}]
    asked = {**INVOKE, "messages": [{"role": "user", "content": f"my key is {SECRET_OPENAI}"}]}

    def both(url: str, keys: tuple[str, str, str | None]) -> list[Any]:
        runtime = client(url, keys)
        events = list(runtime.converse_stream(modelId=MODEL, messages=leak)["stream"])
        answer = runtime.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(asked))
        return [events, [json.loads(e["chunk"]["bytes"]) for e in answer["body"]]]

    recorder = make_proxy(mode="record", resign="aws")
    live = both(recorder.url, CLIENT)
    recorder.stop()
    bedrock.stop()
    assert SECRET_OPENAI in json.dumps(live)
    for name, data in files_under(cassettes).items():
        assert SECRET_OPENAI.encode() not in data, name
    replayed = both(make_proxy(mode="replay").url, DUMMY)
    assert SECRET_OPENAI not in json.dumps(replayed)
    assert len(replayed[0]) == len(live[0]) and len(replayed[1]) == len(live[1])


def test_a_bedrock_cassette_goes_to_har_and_back_byte_for_byte(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    _recorded(make_proxy, bedrock)
    har = tmp_path / "bedrock.har"
    runner = CliRunner()
    where = ["--cassettes", str(cassettes)]
    done = runner.invoke(app, ["export", "har", "default", "-o", str(har), *where])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["import", "har", str(har), "--cassette", "back", *where])
    assert done.exit_code == 0, done.output
    replayer = make_proxy(mode="replay", cassette="back")
    assert calls(client(replayer.url, DUMMY))["invoke_stream"][-1]["type"] == "message_stop"
    streams = [
        json.loads(p.read_text())["response"]
        for p in library_files(cassettes / "back")
        if "eventstream" in p.read_text()
    ]
    assert len(streams) == 2 and all("text" in f for s in streams for f in s["frames"])


def test_the_viewer_shows_a_bedrock_stream_as_text(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    _recorded(make_proxy, bedrock)
    ui = make_proxy(mode="replay").url + "/__tapeproxy/ui/"
    for path in library_files(cassettes):
        if path.name.endswith(".json") and "eventstream" in path.read_text():
            page = httpx.get(ui + f"exchange?cassette=default&file={path.name}").text
            assert "echo: hello" in page.split('id="answer"')[1], path.name
            assert "contentBlockDelta" in page or "content_block_delta" in page


def test_a_stored_message_a_hand_edit_broke_is_a_one_line_cassette_corrupt(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    _recorded(make_proxy, bedrock)
    for path in library_files(cassettes):
        exchange = json.loads(path.read_text())
        if exchange["response"].get("dialect") == "eventstream":
            exchange["response"]["frames"][1]["text"] = '{"headers": {"a": {"int99": 1}}}'
            path.write_text(json.dumps(exchange))
    proxy = make_proxy(mode="replay")
    with pytest.raises(ClientError) as raised:
        client(proxy.url, DUMMY).converse_stream(modelId=MODEL, messages=HELLO)
    error = raised.value.response["Error"]
    assert error["Code"] == "cassette_corrupt"
    assert "response.frames" in error["Message"] and "\n" not in error["Message"]


def test_a_malformed_bedrock_stream_keeps_its_crcs_and_botocore_reads_a_broken_payload(
    make_proxy: MakeProxy, bedrock: FakeUpstream
) -> None:
    _recorded(make_proxy, bedrock)
    proxy = make_proxy(mode="replay", fault=("malformed",))
    stream = client(proxy.url, DUMMY).converse_stream(modelId=MODEL, messages=HELLO)["stream"]
    events = list(stream)  # every message whole: no checksum error
    # botocore drops a payload it cannot read as JSON: the first event says nothing.
    assert events[0] == {"messageStart": {}}
    assert [next(iter(e)) for e in events][-1] == "metadata"


def test_an_upstream_that_stops_mid_stream_records_nothing(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    bedrock.cut_after = 3
    proxy = make_proxy(mode="record", resign="aws")
    stream = client(proxy.url, CLIENT).converse_stream(modelId=MODEL, messages=HELLO)["stream"]
    with pytest.raises(Exception):  # noqa: B017 (urllib3's or botocore's, as it happens)
        list(stream)
    proxy.stop()
    assert library_files(cassettes) == []


def test_boto3_gets_the_first_event_before_bedrock_sends_the_second(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    bedrock.frame_delay = 0.2
    proxy = make_proxy(mode="record", resign="aws")
    stream = client(proxy.url, CLIENT).converse_stream(modelId=MODEL, messages=HELLO)["stream"]
    events = iter(stream)
    assert "messageStart" in next(events)
    first_event_at = time.monotonic()
    assert list(events), "more events followed"
    assert first_event_at < bedrock.frames_sent[1]
    proxy.stop()
    assert len(library_files(cassettes)) == 1


def test_a_vcr_cassette_of_a_bedrock_stream_imports_readable_and_replays_to_boto3(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    """What VCR.py keeps of boto3 (the signature's headers, the stream as one binary blob)
    becomes one readable message per frame, with no credential."""
    recorded = tmp_path / "bedrock.yaml"
    direct = client(FAKE + bedrock.url, TAPE)
    with vcr.use_cassette(str(recorded)):
        live = list(direct.converse_stream(modelId=MODEL, messages=HELLO)["stream"])
    [kept] = yaml.safe_load(recorded.read_text())["interactions"]
    assert kept["request"]["headers"]["X-Amz-Security-Token"] == [TAPE[2].encode()]
    where = ["--cassette", "default", "--cassettes", str(cassettes)]
    where += ["--upstream", f"bedrock={bedrock.url}"]
    done = CliRunner().invoke(app, ["import", "vcr", str(recorded), *where])
    assert done.exit_code == 0, done.output
    bedrock.stop()
    [exchange] = [json.loads(p.read_text()) for p in library_files(cassettes)]
    assert exchange["response"]["dialect"] == "eventstream"
    assert all("text" in frame for frame in exchange["response"]["frames"])
    for secret in TAPE:
        for name, data in files_under(cassettes).items():
            assert secret.encode() not in data, name
    replayer = make_proxy(mode="replay")
    replayed = client(replayer.url, DUMMY).converse_stream(modelId=MODEL, messages=HELLO)
    assert list(replayed["stream"]) == live
