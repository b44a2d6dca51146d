"""`Signing`, the SigV4 step before an upstream call: what it leaves alone, what it refuses,
and a re-signature botocore's own arithmetic accepts for the real host and region."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tapeproxy.errors import ConfigError, NeedsResign
from tapeproxy.upstream.protocol import Outbound, UpstreamResponse
from tapeproxy.upstream.signing import Signing, region_of
from tests.fakes.sigv4 import SigV4Check
from tests.support.aws import CLIENT, TAPE

HOST = "bedrock-runtime.eu-west-3.amazonaws.com"
URL = f"https://{HOST}/model/m/converse"
BODY = b'{"messages":[]}'


class Keep:
    """An upstream that keeps what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[Outbound] = []

    async def open(self, request: Outbound) -> UpstreamResponse:
        self.sent.append(request)
        return None  # type: ignore[return-value]


def signed_for(host: str, service: str = "bedrock") -> list[tuple[bytes, bytes]]:
    """A client's request signed for `host`, as boto3 signs it."""
    request = AWSRequest("POST", f"http://{host}/model/m/converse", data=BODY)
    request.headers["content-type"] = "application/json"
    SigV4Auth(Credentials(*CLIENT), service, "eu-west-3").add_auth(request)
    return [
        (k.lower().encode(), v.encode() if isinstance(v, str) else v)
        for k, v in request.headers.items()
    ]


def opened(
    signing: Signing, headers: list[tuple[bytes, bytes]], host: bytes, url: str = URL
) -> Outbound:
    inner = signing.inner
    assert isinstance(inner, Keep)
    asyncio.run(signing.open(Outbound("bedrock", "POST", url, headers, BODY, host)))
    return inner.sent[-1]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in zip(
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"), TAPE, strict=True
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


def test_an_unsigned_request_and_one_signed_for_the_real_host_go_as_they_came() -> None:
    plain = [(b"authorization", b"Bearer abc"), (b"content-type", b"application/json")]
    assert opened(Signing(Keep(), None), plain, b"127.0.0.1:8787").headers == plain
    forward = signed_for(HOST)
    assert opened(Signing(Keep(), None), forward, HOST.encode()).headers == forward


def test_one_signed_for_the_real_host_sent_elsewhere_keeps_its_signature_and_that_host() -> None:
    """The forward proxy with `--upstream bedrock=URL`: the client's signature is untouched,
    even with `--resign aws`, and the Host it covers goes with it."""
    forward = signed_for(HOST)
    sent = Keep()
    asyncio.run(
        Signing(sent, "aws").open(
            Outbound(
                "bedrock",
                "POST",
                "http://127.0.0.1:9/model/m/converse",
                forward,
                BODY,
                HOST.encode(),
            )
        )
    )
    assert sent.sent[-1].headers == [*forward, (b"host", HOST.encode())]


def test_one_signed_for_tapeproxy_is_refused_without_resign_naming_the_two_ways() -> None:
    with pytest.raises(NeedsResign, match=r"--resign aws.*tapeproxy run"):
        opened(Signing(Keep(), None), signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")


def test_resign_signs_anew_for_the_real_host_and_its_region_with_tapeproxys_keys(
    env: None,
) -> None:
    sent = opened(Signing(Keep(), "aws"), signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")
    headers = {k.decode().lower(): v.decode() for k, v in sent.headers}
    assert f"Credential={TAPE[0]}/" in headers["authorization"]
    assert "/eu-west-3/bedrock/aws4_request" in headers["authorization"]
    assert headers["x-amz-security-token"] == TAPE[2]
    assert CLIENT[2] not in str(sent.headers)
    check = SigV4Check(*TAPE)
    check.host = HOST
    assert check.problem("POST", "/model/m/converse", headers, BODY) is None


def test_the_region_comes_from_the_host_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert region_of("bedrock-runtime-fips.us-gov-west-1.amazonaws.com") == "us-gov-west-1"
    with pytest.raises(ConfigError, match="AWS_REGION"):
        region_of("127.0.0.1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert region_of("127.0.0.1") == "ap-south-1"
    monkeypatch.setenv("AWS_REGION", "eu-north-1")
    assert region_of("127.0.0.1") == "eu-north-1"


def test_no_credentials_in_tapeproxys_environment_is_one_line(
    env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    with pytest.raises(ConfigError, match="no AWS credentials"):
        opened(Signing(Keep(), "aws"), signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")


def test_a_request_for_another_aws_service_is_re_signed_for_that_service_and_its_region(
    env: None,
) -> None:
    """The service is the one the client's SDK signed for (its credential scope): signed as
    `bedrock`, a SageMaker runtime call through a generic upstream would be refused."""
    host = "runtime.sagemaker.ap-southeast-2.amazonaws.com"
    url = f"https://{host}/endpoints/e/invocations"
    headers = signed_for("127.0.0.1:8787", service="sagemaker")
    sent = opened(Signing(Keep(), "aws"), headers, b"127.0.0.1:8787", url)
    found = {k.decode().lower(): v.decode() for k, v in sent.headers}
    assert "/ap-southeast-2/sagemaker/aws4_request" in found["authorization"]
    check = SigV4Check(*TAPE)
    check.host, check.service = host, "sagemaker"
    assert check.problem("POST", "/endpoints/e/invocations", found, BODY) is None


def test_a_utf8_header_value_is_signed_as_the_bytes_that_go(env: None) -> None:
    """aiohttp sends a header's UTF-8 bytes as they came; signed as latin-1 text, AWS (which
    hashes the bytes it gets) would refuse it."""
    headers = [*signed_for("127.0.0.1:8787"), (b"x-amzn-bedrock-trace", "élan".encode())]
    sent = opened(Signing(Keep(), "aws"), headers, b"127.0.0.1:8787")
    found = {k.decode().lower(): v.decode() for k, v in sent.headers}
    check = SigV4Check(*TAPE)
    check.host = HOST
    assert check.problem("POST", "/model/m/converse", found, BODY) is None


def test_without_botocore_resign_says_which_extra_to_install(
    env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("botocore", "botocore.auth", "botocore.awsrequest", "botocore.session"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'tapeproxy\[aws\]'"):
        opened(Signing(Keep(), "aws"), signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")


def test_a_header_sent_twice_is_signed_with_both_values(env: None) -> None:
    """aiohttp sends both lines; AWS signs them joined by a comma (`x-a:1,2`)."""
    twice = [(b"x-amzn-bedrock-trace", b"ENABLED"), (b"x-amzn-bedrock-trace", b"DISABLED")]
    sent = opened(Signing(Keep(), "aws"), [*signed_for("127.0.0.1:8787"), *twice], b"x:1")
    assert [v for k, v in sent.headers if k == b"x-amzn-bedrock-trace"] == [b"ENABLED", b"DISABLED"]
    found = {k.decode().lower(): v.decode() for k, v in sent.headers}
    found["x-amzn-bedrock-trace"] = "ENABLED,DISABLED"  # as AWS reads the two lines
    check = SigV4Check(*TAPE)
    check.host = HOST
    assert check.problem("POST", "/model/m/converse", found, BODY) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_PROFILE", "no-such-profile"),  # ProfileNotFound
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"),  # unreachable
    ],
)
def test_a_credential_chain_that_fails_is_one_line_naming_resign(
    env: None, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """botocore's own errors (a profile that is not there, a credential endpoint that does
    not answer) were a bare 500 Internal Server Error."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="--resign aws: ") as raised:
        opened(Signing(Keep(), "aws"), signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")
    assert "\n" not in raised.value.message


def test_botocore_debug_turned_on_after_a_signature_still_logs_no_credential(
    env: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The pytest plugin shares its process with the tests: one may turn botocore's debug
    lines on (`boto3.set_stream_logger`) after tapeproxy signed a first request."""
    signing = Signing(Keep(), "aws")
    opened(signing, signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")
    botocore = logging.getLogger("botocore")
    level = botocore.level
    botocore.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG):
            sent = opened(signing, signed_for("127.0.0.1:8787"), b"127.0.0.1:8787")
    finally:
        botocore.setLevel(level)
    found = {k.lower(): v.decode() for k, v in sent.headers}
    signature = found[b"authorization"].rsplit("=", 1)[1]
    lines = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (*TAPE, signature):
        assert secret not in lines
