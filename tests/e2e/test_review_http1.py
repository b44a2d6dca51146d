"""An adversarial review of llmtape's own HTTP/1.1 client (llmtape.http1) through the real
server: answers a broken or hostile upstream may send, and what must never follow from them."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.conftest import MakeProxy
from tests.fakes.raw import KeepAliveUpstream


def answer(body: bytes, *headers: bytes) -> bytes:
    head = b"".join(h + b"\r\n" for h in headers)
    return b"HTTP/1.1 200 OK\r\n%bContent-Length: %d\r\n\r\n%b" % (head, len(body), body)


def recorded(cassettes: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(cassettes.rglob("*.json"))]


def test_an_answer_head_past_its_cap_is_a_502_not_passed_on(make_proxy: MakeProxy) -> None:
    with KeepAliveUpstream() as up:
        up.answer(answer(b"{}", b"X-Big: " + b"a" * (1024 * 1024)))
        proxy = make_proxy(mode="passthrough", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/x", json={}, timeout=20)
    assert response.status_code == 502, response.headers.get("x-big", "")[:20]
    assert "head" in response.json()["error"]["message"]


def test_a_transfer_encoding_that_does_not_end_in_chunked_ends_with_the_connection(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """RFC 9112 6.3, as llhttp reads it: the body runs to the close; it is not a cut."""
    with KeepAliveUpstream() as up:
        up.answer(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n{"a": 1}', True)
        proxy = make_proxy(mode="record", upstream={"tool": up.url})
        response = httpx.post(proxy.url + "/tool/v1/x", json={}, timeout=20)
    assert response.json() == {"a": 1}
    [stored] = recorded(cassettes)
    assert stored["outcome"] == "complete"
    assert stored["response"]["body"]["text"] == '{"a": 1}'  # type: ignore[index]
