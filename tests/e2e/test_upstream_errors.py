"""Upstream failures through the real server: the error text quotes the URL, and no secret
in it (a query key, a user:password@) may reach the error body or the log; an answer
in an encoding tapeproxy cannot decode is said to be one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import closed_port, files_under


def test_a_garbled_answer_says_so_and_never_shows_the_key_in_its_url(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    with RawUpstream() as raw:
        raw.answer(b"NOT HTTP AT ALL\r\n\r\n")
        proxy = make_proxy(mode="record", upstream={"gemini": raw.url})
        with caplog.at_level("INFO", logger="tapeproxy"):
            response = httpx.get(proxy.url + "/gemini/v1beta/models?key=AIzaLEAK1&x=1", timeout=10)
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "AIzaLEAK1" not in response.text and "key=[redacted]" in message
    assert "answered, but not in HTTP/1.1: " in message, message
    assert response.json()["error"]["type"] == "upstream_error"
    assert caplog.records and "AIzaLEAK1" not in caplog.text


def test_user_and_password_in_an_upstream_url_never_show(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    closed = closed_port()
    proxy = make_proxy(
        mode="record", upstream={"tool": f"http://apiuser:UserInfoPass@127.0.0.1:{closed}"}
    )
    with caplog.at_level("INFO", logger="tapeproxy"):
        response = httpx.get(proxy.url + "/tool/x", timeout=10)
    assert response.status_code == 502
    assert "UserInfoPass" not in response.text and "apiuser" not in response.text
    assert f"http://127.0.0.1:{closed}/x" in response.json()["error"]["message"]
    assert caplog.records and "UserInfoPass" not in caplog.text


@pytest.mark.parametrize(("encoding", "named"), [("br", "brotli (br)"), ("zstd", "zstd")])
def test_an_answer_in_an_encoding_tapeproxy_cannot_decode_is_a_502_that_says_so(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, encoding: str, named: str
) -> None:
    fake.script(
        "/enc",
        Reply(
            body=b"\x0b\x02\x80{}\x03",
            headers={"content-encoding": encoding, "content-type": "application/json"},
        ),
    )
    proxy = make_proxy(mode="record", upstream={"tool": fake.url})
    response = httpx.get(proxy.url + "/tool/enc", timeout=10)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_error"
    assert "answered" in error["message"] and named in error["message"]
    assert "unreachable" not in error["message"]
    assert files_under(cassettes) == {}
