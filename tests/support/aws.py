"""AWS for tests: tapeproxy's own credentials (which the fake Bedrock knows), a client's, dummy
ones for replay; the fixtures that set tapeproxy's AWS chain and make the fake check SigV4."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.sigv4 import SigV4Check
from tests.fakes.upstream import FakeUpstream

# tapeproxy's own credentials (its environment), which the fake knows; and the client's.
TAPE = ("AKIDTAPEPROXYOWN0001", "tape-SECRET-0123456789abcdefghij", "tape-TOKEN-session-abc123")
CLIENT = ("AKIDCLIENTKEYS000002", "client-SECRET-9876543210zyxwvuts", "client-TOKEN-session-xyz")
DUMMY = ("AKIDDUMMYREPLAY00003", "dummy-SECRET-000000000000000000", None)
# A Bedrock API key (AWS_BEARER_TOKEN_BEDROCK), sent as a bearer token.
API_KEY = "ABSKQmVkcm9ja0FQSUtleS1TECRET-bedrock-api-key-0123"
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """tapeproxy's own AWS chain: the environment's keys, no file, no instance metadata."""
    for name, value in zip(
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"), TAPE, strict=True
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def bedrock(fake: FakeUpstream, aws_env: None) -> FakeUpstream:
    """The fake, checking Bedrock requests' signatures for its own host and TAPE's keys."""
    check = SigV4Check(*TAPE, api_key=API_KEY)
    check.host = fake.url.removeprefix("http://")
    fake.sigv4 = check
    return fake
