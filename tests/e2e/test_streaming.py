"""Streams: passed through live while recorded as frames, replayed so the SDKs see the same."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_OPENAI, ProxyServer, wait_for
from tests.support.streams import USER, stream_through_shutdown

# After its client left at the final frame, the upstream is read on for the read timeout:
# these tests set it to this.
GRACE_AFTER_FINAL_FRAME = 2.0

OPENAI_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ANTHROPIC_TOOL: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)


def ant(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url + "/anthropic", api_key=SECRET_ANTHROPIC, max_retries=0)


def openai_chat_with_tools(url: str) -> dict[str, Any]:
    stream = oai(url).chat.completions.create(
        model="gpt-4o-mini",
        messages=USER,
        tools=[OPENAI_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    calls: dict[int, dict[str, str]] = {}
    chunks = 0
    usage = None
    for chunk in stream:
        chunks += 1
        usage = chunk.usage.total_tokens if chunk.usage else usage
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
                entry["name"] += (call.function and call.function.name) or ""
                entry["arguments"] += (call.function and call.function.arguments) or ""
    return {"calls": calls, "chunks": chunks, "usage": usage}


def openai_chat_text(url: str) -> dict[str, Any]:
    stream = oai(url).chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
    deltas = [c.choices[0].delta.content for c in stream if c.choices]
    return {"deltas": deltas}


def openai_responses(url: str) -> dict[str, Any]:
    with oai(url).responses.stream(model="gpt-4o-mini", input="Say hi") as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    return {"types": types, "text": final.output_text, "usage": final.usage.total_tokens}  # type: ignore[union-attr]


def anthropic_messages(url: str) -> dict[str, Any]:
    with ant(url).messages.stream(model="claude-test-1", max_tokens=64, messages=USER) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_message()
    return {"types": types, "text": final.content[0].text, "usage": final.usage.output_tokens}  # type: ignore[union-attr]


def anthropic_tool_use(url: str) -> dict[str, Any]:
    with ant(url).messages.stream(
        model="claude-test-1", max_tokens=64, messages=USER, tools=[ANTHROPIC_TOOL]
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_message()
    block = final.content[-1]
    return {"types": types, "tool": block.model_dump(), "stop": final.stop_reason}


# Streams as the official SDKs read them; every provider's streams byte for byte, and their
# final and error frames, are in test_conformance.py.
DIALECTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "openai-chat-tools": openai_chat_with_tools,
    "openai-chat-text": openai_chat_text,
    "openai-responses": openai_responses,
    "anthropic-messages": anthropic_messages,
    "anthropic-tool-use": anthropic_tool_use,
}


def stored(cassettes: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(cassettes.rglob("*.json"))]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_replays_exactly_as_it_was_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, dialect: str
) -> None:
    drive = DIALECTS[dialect]
    recorder = make_proxy(mode="record")
    live = drive(recorder.url)
    recorder.stop()
    fake.stop()
    replayer = make_proxy(mode="replay")
    assert drive(replayer.url) == live
    assert replayer.stats["replayed"] == 1
    [exchange] = stored(cassettes)
    response = exchange["response"]
    assert response["dialect"] == "sse"
    assert len(response["frames"]) >= 2, "kept as frames, not one blob"
    if dialect == "openai-chat-text":
        assert "usage" not in exchange, "no include_usage, so no usage frame"
    else:
        assert exchange["usage"]["output_tokens"] > 0


def test_tool_call_deltas_assemble_the_same_call_in_replay(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    openai_chat_with_tools(recorder.url)
    recorder.stop()
    fake.stop()
    replayed = openai_chat_with_tools(make_proxy(mode="replay").url)
    assert replayed["calls"] == {0: {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    assert replayed["usage"]


def test_the_client_gets_the_first_frame_before_the_upstream_sends_the_second(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    fake.frame_delay = 0.2
    proxy = make_proxy(mode="record")
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    with httpx.stream("POST", proxy.url + "/openai/v1/chat/completions", json=body) as response:
        chunks = response.iter_raw()
        next(chunks)
        first_frame_at = time.monotonic()
        rest = list(chunks)
    assert rest, "more frames followed"
    assert first_frame_at < fake.frames_sent[1]


def test_a_client_that_leaves_mid_stream_closes_the_upstream_and_records_nothing(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.frame_delay = 0.1
    proxy = make_proxy(mode="record")
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    with httpx.stream("POST", proxy.url + "/openai/v1/chat/completions", json=body) as response:
        next(response.iter_raw())
    wait_for(lambda: proxy.stats["aborted"] == 1)
    sent = len(fake.frames_sent)
    time.sleep(0.5)  # long enough for several more frames, had the upstream been left open
    assert len(fake.frames_sent) == sent, "the upstream stream was closed"
    assert proxy.stats["recorded"] == 0
    assert stored(cassettes) == []


def chat_stream_raw(url: str) -> tuple[list[bytes], str | None]:
    """The frames a raw client got, and how the stream ended (None: cleanly)."""
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    frames: list[bytes] = []
    try:
        with httpx.stream("POST", url + "/openai/v1/chat/completions", json=body) as response:
            for chunk in response.iter_raw():
                frames.append(chunk)
    except httpx.RemoteProtocolError as exc:
        return frames, type(exc).__name__
    return frames, None


def test_an_upstream_cut_reaches_the_client_and_is_not_recorded_by_default(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.cut_after = 3
    proxy = make_proxy(mode="record")
    with pytest.raises(openai.APIConnectionError):
        openai_chat_text(proxy.url)
    assert chat_stream_raw(proxy.url)[1] == "RemoteProtocolError"
    stats = proxy.stats
    assert (stats["recorded"], stats["errors"]) == (0, 2)
    assert stored(cassettes) == []


def test_with_record_failures_a_cut_stream_is_recorded_and_replays_cut_at_the_same_frame(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.cut_after = 3
    recorder = make_proxy(mode="record", record_failures=True)
    live_frames, live_end = chat_stream_raw(recorder.url)
    recorder.stop()
    [exchange] = stored(cassettes)
    assert exchange["outcome"] == "upstream_cut"
    assert len(exchange["response"]["frames"]) == 3
    fake.stop()
    replayer = make_proxy(mode="replay")
    frames, end = chat_stream_raw(replayer.url)
    assert (b"".join(frames), end) == (b"".join(live_frames), live_end) != (b"", None)
    with pytest.raises(openai.APIConnectionError):
        replayer.put_cassette(mode="replay")
        openai_chat_text(replayer.url)


def test_an_error_event_mid_stream_is_recorded_only_with_record_failures_then_replayed(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.stream_error_after = 2
    plain = make_proxy(mode="record", cassette="plain")
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        anthropic_messages(plain.url)
    plain.stop()
    assert not (cassettes / "plain").exists()

    keeper = make_proxy(mode="record", cassette="kept", record_failures=True)
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        anthropic_messages(keeper.url)
    keeper.stop()
    [exchange] = stored(cassettes / "kept")
    assert exchange["outcome"] == "stream_error"
    fake.stop()
    replayer = make_proxy(mode="replay", cassette="kept")
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        anthropic_messages(replayer.url)


def replay_duration(proxy: ProxyServer, timing: str) -> float:
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    started = time.monotonic()
    response = httpx.post(
        proxy.url + "/openai/v1/chat/completions", json=body, headers={"x-tapeproxy-timing": timing}
    )
    assert response.status_code == 200
    return time.monotonic() - started


def test_replay_timing_recorded_waits_the_recorded_gaps_and_a_factor_scales_them(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.frame_delay = 0.05
    recorder = make_proxy(mode="record")
    openai_chat_text(recorder.url)
    recorder.stop()
    [exchange] = stored(cassettes)
    recorded = exchange["response"]["frames"][-1]["ms"] / 1000
    assert recorded >= 0.15
    replayer = make_proxy(mode="replay", repeat="repeat-last")
    assert replay_duration(replayer, "recorded") >= recorded * 0.95
    assert replay_duration(replayer, "2") >= recorded * 2 * 0.95
    bad = httpx.post(
        replayer.url + "/openai/v1/chat/completions",
        headers={"x-tapeproxy-timing": "soon"},
        json={"model": "gpt-4o-mini", "messages": USER, "stream": True},
    )
    assert bad.status_code == 400 and "recorded" in bad.json()["error"]["message"]


def test_the_sync_openai_sdk_closing_at_done_does_not_lose_the_recording(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.end_delay = 0.3
    proxy = make_proxy(mode="record")
    live = openai_chat_text(proxy.url)  # the SDK closes its response at `data: [DONE]`
    wait_for(lambda: proxy.stats["recorded"] == 1, timeout=5)
    proxy.stop()
    fake.stop()
    assert openai_chat_text(make_proxy(mode="replay").url) == live


def test_a_put_right_after_the_sdk_closed_at_done_waits_for_the_recording(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    fake.end_delay = 0.3
    proxy = make_proxy(mode="record")
    live = openai_chat_text(proxy.url)  # the upstream ends 0.3 s after the SDK hung up
    proxy.put_cassette(mode="replay")  # a test suite's next test starts at once
    assert openai_chat_text(proxy.url) == live
    [ended] = proxy.stats["ended_runs"]
    assert ended["recorded_count"] == 1


def test_an_error_event_the_sdk_hung_up_on_is_recorded_with_record_failures(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.stream_error_after = 2
    fake.end_delay = 0.3
    proxy = make_proxy(mode="record", record_failures=True)
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        anthropic_messages(proxy.url)  # the SDK raises on the error event and closes
    wait_for(lambda: proxy.stats["recorded"] == 1, timeout=5)
    [exchange] = stored(cassettes)
    assert exchange["outcome"] == "stream_error"


def test_after_the_final_frame_the_upstream_gets_a_bounded_grace_then_nothing_is_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.end_delay = GRACE_AFTER_FINAL_FRAME + 2
    proxy = make_proxy(mode="record", read_timeout=GRACE_AFTER_FINAL_FRAME)
    openai_chat_text(proxy.url)
    left = time.monotonic()
    # Whichever ends it first, the grace or the read timeout (the same bound): a cut.
    ended = ("aborted", "errors")
    wait_for(lambda: sum(proxy.stats[k] for k in ended) == 1, GRACE_AFTER_FINAL_FRAME + 5)
    waited = time.monotonic() - left
    assert GRACE_AFTER_FINAL_FRAME - 0.1 <= waited < GRACE_AFTER_FINAL_FRAME + 1.5
    assert proxy.stats["recorded"] == 0
    assert stored(cassettes) == []


GENERIC_ERROR = 'data: {"token":"a"}\n\nevent: error\ndata: upstream overloaded\n\n'


def generic_events(url: str) -> httpx.Response:
    return httpx.post(url + "/tool/events", json={"q": 1}, timeout=10)


def test_a_generic_sse_error_event_is_a_stream_error(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    reply = Reply(body=GENERIC_ERROR, headers={"content-type": "text/event-stream"})
    fake.script("/events", reply, reply)
    plain = make_proxy(mode="record", cassette="plain", upstream={"tool": fake.url})
    assert generic_events(plain.url).text == GENERIC_ERROR
    plain.stop()
    assert not (cassettes / "plain").exists()

    keeper = make_proxy(
        mode="record", cassette="kept", record_failures=True, upstream={"tool": fake.url}
    )
    assert generic_events(keeper.url).text == GENERIC_ERROR
    keeper.stop()
    [exchange] = stored(cassettes / "kept")
    assert exchange["outcome"] == "stream_error"
    replayer = make_proxy(mode="replay", cassette="kept", upstream={"tool": fake.url})
    replayed = generic_events(replayer.url)
    assert replayed.text == GENERIC_ERROR


def test_an_ordinary_chunked_json_answer_is_stored_as_one_json_body(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.script("/lookup", Reply(body={"answer": 42, "items": [1, 2]}, chunked=True))
    proxy = make_proxy(mode="record", upstream={"tool": fake.url})
    response = httpx.post(proxy.url + "/tool/lookup", json={"q": 1})
    assert response.headers.get("transfer-encoding") == "chunked", "the test needs chunked"
    [exchange] = stored(cassettes)
    assert exchange["response"]["body"]["json"] == {"answer": 42, "items": [1, 2]}
    assert "frames" not in exchange["response"]


def cut_stream_ends(url: str, timing: str) -> tuple[float, str | None]:
    """Seconds from the request to the end of a chat stream, and how it ended."""
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    started = time.monotonic()
    try:
        with httpx.stream(
            "POST",
            url + "/openai/v1/chat/completions",
            json=body,
            headers={"x-tapeproxy-timing": timing},
        ) as response:
            for _ in response.iter_raw():
                pass
    except httpx.RemoteProtocolError as exc:
        return time.monotonic() - started, type(exc).__name__
    return time.monotonic() - started, None


def test_timed_replay_of_a_cut_cuts_when_the_upstream_did(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.cut_after = 2
    fake.end_delay = 0.6  # the upstream stalls after its last frame, then drops
    recorder = make_proxy(mode="record", record_failures=True)
    live, live_end = cut_stream_ends(recorder.url, "none")
    recorder.stop()
    [exchange] = stored(cassettes)
    end = exchange["response"]["end_ms"] / 1000
    assert 0.6 <= end <= live
    fake.stop()
    replayer = make_proxy(mode="replay", repeat="repeat-last")
    timed, timed_end = cut_stream_ends(replayer.url, "recorded")
    assert (timed_end, live_end) == ("RemoteProtocolError", "RemoteProtocolError")
    assert timed >= end * 0.95
    fast, _ = cut_stream_ends(replayer.url, "none")
    assert fast < 0.5


def test_re_recording_a_cut_that_came_later_leaves_the_file_as_it_is(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    fake.cut_after = 2
    recorded = []
    for stall in (0.1, 0.4):
        fake.end_delay = stall
        proxy = make_proxy(mode="record", record_failures=True)
        cut_stream_ends(proxy.url, "none")
        proxy.stop()
        [path] = sorted(cassettes.rglob("*.json"))
        recorded.append(path.read_bytes())
    assert recorded[0] == recorded[1]


def test_a_live_stream_cut_by_shutdown_logs_one_line_and_no_traceback(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.frame_delay = 1.0
    proxy = make_proxy(mode="record", shutdown_timeout=0.5)  # open streams get 1 s
    assert stream_through_shutdown(proxy, caplog) == ["RemoteProtocolError"]
    lines = [
        r.getMessage() for r in caplog.records if r.name == "tapeproxy" and "key=" in r.getMessage()
    ]
    assert len(lines) == 1 and "nothing recorded" in lines[0], lines
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert stored(cassettes) == []


def test_a_timed_replay_cut_by_shutdown_logs_no_traceback(
    make_proxy: MakeProxy, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    fake.frame_delay = 0.1
    recorder = make_proxy(mode="record")
    openai_chat_text(recorder.url)
    recorder.stop()
    proxy = make_proxy(mode="replay", shutdown_timeout=0.5)
    assert stream_through_shutdown(proxy, caplog, timing="3") == ["RemoteProtocolError"]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def test_a_bad_timing_header_is_refused_before_it_uses_up_the_recording(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    recorded = openai_chat_text(recorder.url)
    recorder.stop()
    replayer = make_proxy(mode="replay")
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    bad = httpx.post(
        replayer.url + "/openai/v1/chat/completions",
        json=body,
        headers={"x-tapeproxy-timing": "fast"},
    )
    assert bad.status_code == 400
    assert openai_chat_text(replayer.url) == recorded
