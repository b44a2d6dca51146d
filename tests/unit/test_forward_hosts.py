"""Which hosts the forward proxy decrypts and who owns them; a forward request's head and its
Proxy-Authorization."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from starlette.types import Receive, Scope, Send

from tapeproxy.engine.core import Engine
from tapeproxy.forward import hosts as hosts_module
from tapeproxy.forward.door import open_door
from tapeproxy.forward.hosts import Interception, check_pattern
from tapeproxy.forward.request import BadRequest, authority, parse_head, proxy_auth_ok
from tapeproxy.modes import Mode
from tapeproxy.providers import provider_table
from tapeproxy.settings import Settings
from tapeproxy.store import open_store

TOKEN = "forward-admin-token-0123456789"


def interception(mode: Mode = Mode.REPLAY, **upstreams: str) -> Interception:
    providers = provider_table(upstreams)
    return Interception(providers, ("*.example.com",), ("pypi.org",), mode, replaying=False)


def test_a_builtin_keeps_its_host_whatever_url_it_is_given() -> None:
    hosts = interception(openai="http://127.0.0.1:9000")
    assert hosts.owner("api.openai.com") == "openai"
    assert hosts.owner("API.Anthropic.com.") == "anthropic"
    assert hosts.owner("generativelanguage.googleapis.com") == "gemini"
    assert hosts.owner("127.0.0.1") is None and hosts.owner("localhost") is None
    assert 9000 in hosts.ports and 443 in hosts.ports


def test_the_credential_mints_are_intercepted_in_every_mode_and_owned_by_no_upstream() -> None:
    for mode in (Mode.REPLAY, Mode.RECORD):
        hosts = interception(mode)
        assert hosts.owner("oauth2.googleapis.com") == "google-oauth"
        assert hosts.owner("login.microsoftonline.com") == "entra"
        assert {"oauth2.googleapis.com", "login.microsoftonline.com"} <= set(hosts.patterns)
        assert "google-oauth" not in hosts.providers and "entra" not in hosts.providers


async def no_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the door is only built here")


@pytest.mark.parametrize(
    ("mode", "live", "minted_live"),
    [
        (Mode.REPLAY, (), set()),
        (Mode.REPLAY, ("vertex",), {"google-oauth"}),
        (Mode.REPLAY, ("azure",), {"entra"}),
        (Mode.RECORD, (), {"google-oauth", "entra"}),
        (Mode.PASSTHROUGH, (), {"google-oauth", "entra"}),
    ],
)
def test_a_mint_goes_live_where_the_run_or_its_provider_does(
    tmp_path: Path, mode: Mode, live: tuple[str, ...], minted_live: set[str]
) -> None:
    values = {"mode": mode, "live": live, "forward": True, "ca_cert": tmp_path / "ca.pem"}
    settings = Settings.model_validate(values)
    store = open_store(str(tmp_path / "cassettes"))
    door = open_door(
        settings, no_app, provider_table({}), store, Engine(settings, provider_table({}), store)
    )
    assert door.minting.live == minted_live


def test_an_upstream_of_the_users_owns_its_host() -> None:
    hosts = interception(internal="https://llm.corp.test:8443/v1")
    assert hosts.owner("llm.corp.test") == "internal"
    assert 8443 in hosts.ports


def test_an_intercepted_pattern_makes_an_upstream_per_host() -> None:
    hosts = interception()
    assert hosts.owner("a.example.com") == "a.example.com"
    assert hosts.providers["a.example.com"].base_url == "https://a.example.com"
    assert hosts.owner("example.com") is None  # `*.` is the names below it
    assert "*.example.com" in hosts.patterns


@pytest.mark.parametrize(
    ("mode", "replaying", "tunnels"),
    [
        (Mode.RECORD, False, True),
        (Mode.AUTO, False, True),
        (Mode.PASSTHROUGH, False, True),
        (Mode.REPLAY, False, False),
        (Mode.ONCE, True, False),
        (Mode.ONCE, False, True),
    ],
)
def test_what_is_tunnelled(mode: Mode, replaying: bool, tunnels: bool) -> None:
    hosts = Interception(provider_table({}), (), ("pypi.org",), mode, replaying)
    assert hosts.may_tunnel("github.com") is tunnels
    assert hosts.may_tunnel("pypi.org")  # --allow-host


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "*",
        "*.com",
        "a.*.com",
        "localhost",
        "10.0.0.1",
        "x/y.com",
        "a#b.com",
        "a..b.com",
        "bücher.example",
    ],  # (the last: a traceback from cryptography, as the CA was made)
)
def test_bad_intercept_patterns(bad: str) -> None:
    with pytest.raises(ValueError, match="host pattern"):
        check_pattern(bad)


def test_allow_host_may_name_an_address() -> None:
    assert check_pattern("127.0.0.1", addresses=True) == "127.0.0.1"
    assert check_pattern("[::1]", addresses=True) == "::1"
    assert check_pattern("*.Example.COM.") == "*.example.com"


def test_an_upstream_named_by_an_international_name_is_intercepted_by_its_a_label() -> None:
    hosts = interception(own="https://bücher.example/v1")
    assert hosts.owner("xn--bcher-kva.example") == "own"


def test_a_connect_head() -> None:
    request = parse_head(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
    assert (request.method, request.host, request.port, request.rest) == (
        "CONNECT", "api.openai.com", 443, b"",
    )  # fmt: skip
    absolute = parse_head(b"GET http://Api.OpenAI.com/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (absolute.host, absolute.port) == ("api.openai.com", 80)


@pytest.mark.parametrize("target", ["api.openai.com", "api.openai.com:", ":443", "h:99999", "h:x"])
def test_malformed_connect_targets(target: str) -> None:
    with pytest.raises(BadRequest, match="malformed CONNECT target"):
        authority(target)


def test_ipv6_connect_target() -> None:
    assert authority("[::1]:443") == ("::1", 443)


def test_a_head_h11_cannot_read() -> None:
    with pytest.raises(BadRequest, match="malformed request"):
        parse_head(b"CONNECT a b c\r\n\r\n")


def test_proxy_authorization() -> None:
    basic = base64.b64encode(f"anyone:{TOKEN}".encode())
    assert proxy_auth_ok([(b"proxy-authorization", b"Basic " + basic)], TOKEN)
    assert proxy_auth_ok([(b"proxy-authorization", f"Bearer {TOKEN}".encode())], TOKEN)
    assert not proxy_auth_ok([(b"proxy-authorization", b"Bearer nope")], TOKEN)
    assert not proxy_auth_ok([(b"proxy-authorization", b"Basic !!!")], TOKEN)
    assert not proxy_auth_ok([], TOKEN)
    assert not proxy_auth_ok([(b"proxy-authorization", f"Bearer {TOKEN}".encode())], None)


def test_the_clouds_hosts_are_intercepted_label_by_label() -> None:
    hosts = interception()
    assert hosts.owner("bedrock-runtime.us-east-1.amazonaws.com") == "bedrock"
    assert hosts.owner("europe-west4-aiplatform.googleapis.com") == "vertex"
    assert hosts.owner("myres.openai.azure.com") == "azure"
    # A `*` inside a label never crosses a dot, and names outside the patterns stay out.
    assert hosts.owner("bedrock-runtime.a.b.amazonaws.com") is None
    assert hosts.owner("s3.us-east-1.amazonaws.com") is None
    assert hosts.owner("storage.googleapis.com") is None


def test_the_upstreams_a_wildcard_makes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts_module, "ADDED_LIMIT", 3)
    hosts = interception(Mode.RECORD)
    before = len(hosts.providers)
    named = [hosts.owner(f"h{n}.example.com") for n in range(5)]
    assert named[:3] == ["h0.example.com", "h1.example.com", "h2.example.com"]
    assert named[3:] == [None, None]  # not intercepted: tunnelled, or refused in a replay
    assert len(hosts.providers) == before + 3
    assert hosts.owner("h1.example.com") == "h1.example.com"  # those made keep working


@pytest.mark.parametrize(
    "host", ["evil.test#.example.com", "evil.test?.example.com", "me@evil.test.example.com"]
)
def test_a_host_that_is_no_dns_name_is_never_intercepted(host: str) -> None:
    # (its upstream's URL, https://evil.test#.example.com, would have gone to evil.test)
    assert interception(Mode.RECORD).owner(host) is None
    with pytest.raises(BadRequest, match="malformed CONNECT target"):
        authority(f"{host}:443")
