"""store/s3client.py without a store: the AWS settings a client is made from, refused in one
line (never obstore's panic or traceback, never a setting's value) when they cannot work."""

from __future__ import annotations

import pytest

from tapeproxy.errors import ConfigError
from tapeproxy.store.s3client import ENDPOINT_VARIABLES, connect

SECRET = "a-secret-that-must-not-show"


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ENDPOINT_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize(
    "endpoint",
    [
        "not a url",
        "127.0.0.1:9000",
        "http://",
        "http://[bad",
        "http://127.0.0.1:99999",
        f"http://user:{SECRET}@a b:9000",
        "http://bücher.example",
    ],
)
def test_an_endpoint_that_is_no_url_is_a_one_line_error(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore panics (a Rust backtrace, then a PanicException) on each of these."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(ConfigError) as caught:
        connect("cassettes", "p")
    assert "AWS_ENDPOINT_URL" in caught.value.message
    assert SECRET not in caught.value.message and "\n" not in caught.value.message


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:9000", "https://s3.example.com/"])
def test_an_endpoint_url_is_taken(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    connect("cassettes", "p")


def test_a_secret_key_without_its_key_id_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(ConfigError) as caught:
        connect("cassettes", "p")
    message = caught.value.message
    assert "AWS_ACCESS_KEY_ID" in message and "s3://cassettes/p" in message
    assert SECRET not in message and "\n" not in message
