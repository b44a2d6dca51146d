"""`tapeproxy import vcr` on cassettes VCR.py itself recorded (pytest-recording, the openai
and anthropic SDKs against the fake upstream: JSON, streams, gzip answers, a repeated
request): the same tests then replay from tapeproxy with the upstream gone, and the SDKs
give what they gave under VCR.py's replay."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_OPENAI, SECRETS, files_under

pytest_plugins = ["pytester"]

# The suite of a project that used pytest-recording: each test writes what its SDK gave.
SUITE = """
import json, os
from pathlib import Path

import anthropic
import openai
import pytest

pytestmark = [pytest.mark.vcr, pytest.mark.tapeproxy]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def keep(name, value):
    out = Path(os.environ["SDK_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(value, sort_keys=True))


def test_openai_chat():
    answer = openai.OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES
    )
    keep("openai_chat", answer.model_dump())


def test_openai_stream():
    stream = openai.OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True,
        stream_options={"include_usage": True},
    )
    keep("openai_stream", [chunk.model_dump() for chunk in stream])


def test_anthropic_message():
    answer = anthropic.Anthropic(max_retries=0).messages.create(
        model="claude-3-5-haiku-latest", max_tokens=64, messages=MESSAGES
    )
    keep("anthropic_message", answer.model_dump())


def test_anthropic_stream():
    client = anthropic.Anthropic(max_retries=0)
    with client.messages.stream(
        model="claude-3-5-haiku-latest", max_tokens=64, messages=MESSAGES
    ) as stream:
        events = [event.model_dump() for event in stream]
    keep("anthropic_stream", events)


def test_repeated_request():
    client = openai.OpenAI(max_retries=0)
    models = [client.embeddings.create(model="e", input="again").model_dump() for _ in range(2)]
    keep("repeated", models)


class TestInAClass:  # pytest-recording: TestInAClass.test_chat.yaml; tapeproxy: TestInAClass/
    def test_chat(self):
        answer = openai.OpenAI(max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "In a class?"}]
        )
        keep("in_a_class", answer.model_dump())


@pytest.mark.parametrize("city", ["Paris"])  # test_param[Paris].yaml; test_param.Paris
def test_param(city):
    answer = openai.OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": city}]
    )
    keep("param", answer.model_dump())
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in list(os.environ):
        if name.startswith(("TAPEPROXY_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_OPENAI)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_ANTHROPIC)
    pytester.makepyfile(test_sdk=SUITE)
    return pytester


def outputs(folder: Path) -> dict[str, object]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def vcr_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, out: str, *args: str
) -> None:
    monkeypatch.setenv("SDK_OUT", str(project.path / out))
    result = project.runpytest_subprocess("-p", "no:tapeproxy", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=7)


def embedding(value: float) -> Reply:
    data = [{"object": "embedding", "index": 0, "embedding": [value]}]
    usage = {"prompt_tokens": 1, "total_tokens": 1}
    return Reply(body={"object": "list", "data": data, "model": "e", "usage": usage})


def test_vcr_cassettes_import_and_replay_as_vcr_replayed_them(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeUpstream(gzip=True).start()
    try:
        # Two different answers to one request: replay must give them back in order.
        fake.script("/v1/embeddings", embedding(0.5), embedding(0.25))
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url + "/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        vcr_run(project, monkeypatch, "recorded", "--record-mode=once")
        # The same suite recorded by tapeproxy itself: the keys an import must give.
        fake.script("/v1/embeddings", embedding(0.5), embedding(0.25))
        monkeypatch.setenv("TAPEPROXY_UPSTREAM", f"openai={fake.url},anthropic={fake.url}")
        monkeypatch.setenv("SDK_OUT", str(project.path / "live-out"))
        live = project.runpytest_subprocess(
            "-p", "no:recording", "-p", "no:cacheprovider",
            "--tapeproxy-cassettes", "live", "--tapeproxy-mode", "record",
        )  # fmt: skip
        live.assert_outcomes(passed=7)
        monkeypatch.delenv("TAPEPROXY_UPSTREAM")
    finally:
        fake.stop()
    vcr_run(project, monkeypatch, "vcr", "--record-mode=none")
    vcr_cassettes = project.path / "cassettes"
    saved = yaml.safe_load((vcr_cassettes / "test_sdk" / "test_openai_chat.yaml").read_text())
    headers = {k.lower(): v for k, v in saved["interactions"][0]["response"]["headers"].items()}
    assert headers["content-encoding"] == ["gzip"]  # kept as sent, compressed

    upstreams = ["--upstream", f"openai={fake.url}", "--upstream", f"anthropic={fake.url}"]
    library = project.path / "tapes"
    imported = CliRunner().invoke(
        app, ["import", "vcr", str(vcr_cassettes), "--cassettes", str(library), *upstreams]
    )
    assert imported.exit_code == 0, imported.output
    assert "test_sdk/test_repeated_request: 2 exchange(s)" in imported.output
    # A class's test and a parametrized one: the names the tapeproxy plugin gives them.
    assert "TestInAClass.test_chat.yaml -> test_sdk/TestInAClass/test_chat:" in imported.output
    assert "test_param[Paris].yaml -> test_sdk/test_param.Paris:" in imported.output
    cassette_text = "".join(p.read_text() for p in vcr_cassettes.rglob("*.yaml"))
    assert SECRET_OPENAI in cassette_text and SECRET_ANTHROPIC in cassette_text
    on_disk = files_under(library)
    assert not any(s.encode() in data for s in SECRETS for data in on_disk.values())
    # Keyed as if recorded live: the same cassettes and file names tapeproxy recorded.
    assert sorted(on_disk) == sorted(files_under(project.path / "live"))
    repeated = files_under(library / "test_sdk" / "test_repeated_request")
    assert len(repeated) == 2 and any(".2.json" in name for name in repeated), repeated

    monkeypatch.setenv("SDK_OUT", str(project.path / "tapeproxy"))
    replay = project.runpytest_subprocess(
        "-p", "no:recording", "-p", "no:cacheprovider", "--tapeproxy-cassettes", str(library)
    )
    replay.assert_outcomes(passed=7)
    vcr = outputs(project.path / "vcr")
    assert sorted(vcr) == [
        "anthropic_message",
        "anthropic_stream",
        "in_a_class",
        "openai_chat",
        "openai_stream",
        "param",
        "repeated",
    ]
    assert outputs(project.path / "tapeproxy") == vcr
    assert vcr == outputs(project.path / "recorded")
