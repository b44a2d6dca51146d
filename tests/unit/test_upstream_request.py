"""tapeproxy.upstream.request: the URL, headers and Authorization a request goes upstream with,
and that a URL tapeproxy cannot call is refused (tapeproxy.upstream.client makes it a 502)."""

from __future__ import annotations

import pytest

from tapeproxy.upstream.hopheaders import forward_headers
from tapeproxy.upstream.request import prepare


def test_the_url_keeps_its_path_and_query_bytes_and_its_host_goes_in_idna() -> None:
    url, _, _ = prepare("http://[::1]:8080?x=%zz", [])
    assert (str(url), url.raw_path_qs, url.host_port_subcomponent) == (
        "http://[::1]:8080/?x=%zz",
        "/?x=%zz",
        "[::1]:8080",
    )
    url, _, _ = prepare("http://bücher.de/a%zz/caf\xc3\xa9", [])  # latin-1 text of UTF-8 bytes
    assert str(url) == "http://xn--bcher-kva.de/a%zz/café"  # aiohttp writes back those bytes
    url, _, _ = prepare("http://h/a%zz/\xff\xc3\xa9", [])  # not UTF-8 as a whole: quoted
    assert str(url) == "http://h/a%zz/%FF%C3%A9"


def test_headers_go_as_utf_8_text_with_tapeproxy_s_user_agent_only_when_none_came() -> None:
    raw = forward_headers([(b"x-b", b"caf\xe9 \xff"), (b"x-c", b"caf\xc3\xa9")])
    _, headers, _ = prepare("http://h/", raw)
    assert headers[:2] == [("x-b", "café ÿ"), ("x-c", "café")]
    assert ("accept-encoding", "gzip, deflate") in headers
    assert headers[-1][0] == "User-Agent" and headers[-1][1].startswith("tapeproxy/")
    _, headers, _ = prepare("http://h/", [(b"User-Agent", b"agent/7")])
    assert headers == [("User-Agent", "agent/7")]


def test_the_client_authorization_wins_over_the_url_user_and_password() -> None:
    _, headers, credentials = prepare(
        "http://u%40s:p%3Aw@h/", [(b"authorization", b"Bearer k"), (b"x-a", b"1")]
    )
    assert credentials.headers == [("authorization", "Bearer k")]
    assert all(name != "authorization" for name, _ in headers)  # set by the middleware
    _, _, credentials = prepare("http://u%40s:p%3Aw@h/", [])
    assert credentials.headers == [("Authorization", "Basic dUBzOnA6dw==")]  # u@s:p:w
    assert prepare("http://h/", [])[2].headers == []


@pytest.mark.parametrize("url", ["ftp://h/x", "h/x", "http:///x"])
def test_a_url_tapeproxy_cannot_call_is_a_value_error(url: str) -> None:
    with pytest.raises(ValueError):
        prepare(url, [])
