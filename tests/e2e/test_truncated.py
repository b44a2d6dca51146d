"""A stream that ends cleanly but without its dialect's final frame was cut short: it reaches
the client as it came and is not recorded as a complete answer."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply

HALF = (
    'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "lo"}}]}\n\n'
)
SSE = {"content-type": "text/event-stream"}
BODY = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def stored(cassettes: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(cassettes.rglob("[0-9a-f]*.json"))]


def test_a_stream_without_its_final_frame_is_not_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.script("/v1/chat/completions", Reply(body=HALF, headers=SSE, chunked=True))
    proxy = make_proxy(mode="record")
    live = httpx.post(proxy.url + "/openai/v1/chat/completions", json=BODY)
    assert live.status_code == 200 and live.text == HALF, "the client gets it as it came"
    assert stored(cassettes) == []
    assert proxy.stats["recorded"] == 0


def test_with_record_failures_it_is_kept_as_truncated_and_replays_as_it_came(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.script("/v1/chat/completions", Reply(body=HALF, headers=SSE, chunked=True))
    recorder = make_proxy(mode="record", record_failures=True)
    httpx.post(recorder.url + "/openai/v1/chat/completions", json=BODY)
    [exchange] = stored(cassettes)
    assert exchange["outcome"] == "truncated"
    replayer = make_proxy(mode="replay")
    again = httpx.post(replayer.url + "/openai/v1/chat/completions", json=BODY)
    assert again.status_code == 200 and again.text == HALF


@pytest.mark.parametrize("ending", ["data: [DONE]\n\n", ""])
def test_a_user_upstream_stream_is_whole_when_it_ends_cleanly(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, ending: str
) -> None:
    """An upstream of the user's may speak any SSE: it cannot be held to a final frame."""
    fake.script("/events", Reply(body=HALF + ending, headers=SSE, chunked=True))
    proxy = make_proxy(mode="record", upstream={"feed": fake.url})
    httpx.get(proxy.url + "/feed/events")
    [exchange] = stored(cassettes)
    assert exchange["outcome"] == "complete"


WHOLE_ENDINGS = [
    ("/v1/chat/completions", "openai", HALF + "data: [DONE]\n", SSE),
    ("/v1/chat/completions", "openai", HALF + "data: [DONE]", SSE),
    (
        "/api/chat",
        "ollama",
        '{"message": {"content": "Hi"}, "done": false}\n{"done": true, "eval_count": 1}',
        {"content-type": "application/x-ndjson"},
    ),
    (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        "gemini",
        'data: {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}\r\n\r\n',
        SSE,
    ),
]


@pytest.mark.parametrize(("path", "upstream", "body", "headers"), WHOLE_ENDINGS)
def test_a_final_frame_with_no_line_end_after_it_still_makes_the_stream_whole(
    make_proxy: MakeProxy,
    fake: FakeUpstream,
    cassettes: Path,
    path: str,
    upstream: str,
    body: str,
    headers: dict[str, str],
) -> None:
    fake.script(path, Reply(body=body, headers=headers, chunked=True))
    proxy = make_proxy(mode="record", record_failures=True)
    request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    query = "?alt=sse" if upstream == "gemini" else ""
    httpx.post(f"{proxy.url}/{upstream}{path}{query}", json=request)
    [exchange] = stored(cassettes)
    assert exchange["outcome"] == "complete"
