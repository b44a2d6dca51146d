"""The clouds' official SDKs through tapeproxy's reverse route: `openai.AzureOpenAI` (a
deployment's path and `/openai/v1/`), `anthropic.AnthropicBedrock` (re-signed for the fake,
which checks SigV4), `anthropic.AnthropicVertex` and google-genai on Vertex; each recorded, then
replayed with the fake stopped and dummy credentials, to identical results."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under, library_files
from tests.support.aws import API_KEY, CLIENT, DUMMY, MODEL, aws_env, bedrock

__all__ = ["aws_env", "bedrock"]  # fixtures this module uses

AZURE_KEY = "azure-SECRET-api-key-0123456789abcdef"
GOOGLE_TOKEN = "ya29.test-SECRET-google-access-token"
PROJECT, REGION = "tape-project-123", "europe-west4"
ASK: Any = [{"role": "user", "content": "hello cloud"}]


def record_then_replay(
    make_proxy: MakeProxy, fake: FakeUpstream, calls: Callable[[str, bool], Any], **record: Any
) -> tuple[Any, Any]:
    """What `calls` got through a recording tapeproxy, and through a replaying one with the
    fake stopped (`calls(url, live)`: live False gives it dummy credentials)."""
    recorder = make_proxy(mode="record", **record)
    live = calls(recorder.url, True)
    recorder.stop()
    fake.stop()
    replayer = make_proxy(mode="replay")
    replayed = calls(replayer.url, False)
    assert replayer.stats["misses"] == 0
    return live, replayed


def assert_nowhere(cassettes: Path, *secrets: str) -> None:
    for name, data in files_under(cassettes).items():
        for secret in secrets:
            assert secret.encode() not in data, name


def azure(url: str, live: bool) -> list[str]:
    key = AZURE_KEY if live else "dummy"
    deployment = openai.AzureOpenAI(
        azure_endpoint=f"{url}/azure", api_key=key, api_version="2024-10-21", max_retries=0
    )
    # Azure's v1 API is called with the plain OpenAI client (AzureOpenAI would put a
    # deployment in its path), as Microsoft's guide shows; the key goes as a bearer token.
    v1 = openai.OpenAI(base_url=f"{url}/azure/openai/v1/", api_key=key, max_retries=0)
    said = []
    for client in (deployment, v1):
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=ASK)
        said.append(answer.choices[0].message.content or "")
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=ASK, stream=True)
        said.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    return said


def test_azure_openai_on_a_deployment_and_the_v1_path_replays_offline(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    live, replayed = record_then_replay(make_proxy, fake, azure)
    assert live == replayed == ["echo: hello cloud"] * 4
    paths = {(hit.path, hit.query.get("api-version")) for hit in fake.hits}
    assert paths == {
        ("/openai/deployments/gpt-4o-mini/chat/completions", "2024-10-21"),
        ("/openai/v1/chat/completions", None),
    }
    keys = {hit.headers.get("api-key") or hit.headers["authorization"] for hit in fake.hits}
    assert keys == {AZURE_KEY, f"Bearer {AZURE_KEY}"}
    assert_nowhere(cassettes, AZURE_KEY)


def test_azures_api_version_is_part_of_the_key(make_proxy: MakeProxy, fake: FakeUpstream) -> None:
    record_then_replay(make_proxy, fake, azure)
    replayer = make_proxy(mode="replay")
    other = openai.AzureOpenAI(
        azure_endpoint=f"{replayer.url}/azure", api_key="k", api_version="2025-01-01", max_retries=0
    )
    with pytest.raises(openai.UnprocessableEntityError, match="api-version"):
        other.chat.completions.create(model="gpt-4o-mini", messages=ASK)


def anthropic_text(client: Any, model: str) -> list[Any]:
    """A message and a stream: their text and usage, as the SDK read them."""
    message = client.messages.create(model=model, max_tokens=64, messages=ASK)
    with client.messages.stream(model=model, max_tokens=64, messages=ASK) as stream:
        streamed = stream.get_final_message()
    return [
        (m.content[0].text, m.usage.input_tokens, m.usage.output_tokens)
        for m in (message, streamed)
    ]


def on_bedrock(url: str, live: bool) -> list[Any]:
    keys = CLIENT if live else DUMMY
    client = anthropic.AnthropicBedrock(
        aws_access_key=keys[0],
        aws_secret_key=keys[1],
        aws_session_token=keys[2],
        aws_region="us-east-1",
        base_url=f"{url}/bedrock",
        max_retries=0,
    )
    return anthropic_text(client, MODEL)


def test_anthropic_bedrock_records_re_signed_and_replays_offline(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    live, replayed = record_then_replay(make_proxy, bedrock, on_bedrock, resign="aws")
    assert live == replayed
    assert live[0][0] == live[1][0] == "echo: hello cloud"
    assert {hit.path.rsplit("/", 1)[1] for hit in bedrock.hits} == {
        "invoke",
        "invoke-with-response-stream",
    }
    assert_nowhere(cassettes, *CLIENT[:2], CLIENT[2] or "")


def on_vertex(url: str, live: bool) -> list[Any]:
    client = anthropic.AnthropicVertex(
        region=REGION,
        project_id=PROJECT,
        access_token=GOOGLE_TOKEN if live else "dummy",
        base_url=f"{url}/vertex/v1",
        max_retries=0,
    )
    return anthropic_text(client, "claude-test@20250101")


def test_anthropic_vertex_replays_offline_and_keeps_project_and_region_in_the_key(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    live, replayed = record_then_replay(make_proxy, fake, on_vertex)
    assert live == replayed
    assert live[0][0] == "echo: hello cloud"
    assert {hit.path.rsplit(":", 1)[1] for hit in fake.hits} == {"rawPredict", "streamRawPredict"}
    assert all(f"/projects/{PROJECT}/locations/{REGION}/" in hit.path for hit in fake.hits)
    assert_nowhere(cassettes, GOOGLE_TOKEN)
    where = f"projects/{PROJECT}/locations/{REGION}"
    counts = {path.read_text().count(where) for path in library_files(cassettes)}
    assert counts == {1}, "the project and region are in each stored request's path"


def on_gemini(url: str, live: bool) -> list[Any]:
    client = genai.Client(
        vertexai=True,
        project=PROJECT,
        location=REGION,
        credentials=Credentials(token=GOOGLE_TOKEN if live else "dummy"),  # type: ignore[no-untyped-call]
        http_options=types.HttpOptions(base_url=f"{url}/vertex/"),
    )
    answer = client.models.generate_content(model="gemini-test", contents="hello cloud")
    chunks = client.models.generate_content_stream(model="gemini-test", contents="hello cloud")
    usage = answer.usage_metadata
    return [answer.text, usage.candidates_token_count if usage else None, [c.text for c in chunks]]


def test_google_genai_on_vertex_replays_offline(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    live, replayed = record_then_replay(make_proxy, fake, on_gemini)
    assert live == replayed
    assert live[0] == "echo: hello cloud"
    assert all(hit.headers["authorization"] == f"Bearer {GOOGLE_TOKEN}" for hit in fake.hits)
    assert_nowhere(cassettes, GOOGLE_TOKEN, SECRET_OPENAI)


def test_redact_replaces_a_vertex_project_in_the_cassette(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    record_then_replay(make_proxy, fake, on_vertex)
    args = ["redact", "default", "--pattern", PROJECT, "--cassettes", str(cassettes)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert_nowhere(cassettes, PROJECT)
    assert all("projects/[redacted]/" in p.read_text() for p in library_files(cassettes))


def test_a_bedrock_api_key_records_with_no_resign_and_is_stored_nowhere(
    make_proxy: MakeProxy, bedrock: FakeUpstream, cassettes: Path
) -> None:
    def with_key(url: str, live: bool) -> list[Any]:
        key = API_KEY if live else "dummy"
        client = anthropic.AnthropicBedrock(
            api_key=key, aws_region="us-east-1", base_url=f"{url}/bedrock", max_retries=0
        )
        return anthropic_text(client, MODEL)

    live, replayed = record_then_replay(make_proxy, bedrock, with_key)
    assert live == replayed and live[0][0] == "echo: hello cloud"
    assert {hit.headers["authorization"] for hit in bedrock.hits} == {f"Bearer {API_KEY}"}
    assert_nowhere(cassettes, API_KEY)


def test_no_cloud_credential_reaches_a_log_line(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def every(url: str, live: bool) -> list[Any]:
        return [azure(url, live), on_vertex(url, live), on_gemini(url, live)]

    with caplog.at_level(logging.DEBUG, logger="tapeproxy"):
        record_then_replay(make_proxy, fake, every)
    lines = "\n".join(record.getMessage() for record in caplog.records)
    assert "azure" in lines and "vertex" in lines, "one line per exchange was logged"
    for secret in (AZURE_KEY, GOOGLE_TOKEN):
        assert secret not in lines
    assert_nowhere(cassettes, AZURE_KEY, GOOGLE_TOKEN)
