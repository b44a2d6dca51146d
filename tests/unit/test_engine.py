"""The engine driven directly, with no HTTP: replay, miss, record and commit, abort mid-stream,
and `once`. The upstream is a scripted stand-in for the network (the `Upstream` protocol)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from starlette.datastructures import Headers

from tapeproxy.engine.core import Engine
from tapeproxy.engine.inbound import Inbound, Live, Refuse, Serve
from tapeproxy.engine.keying import request_key, request_parts
from tapeproxy.providers import provider_table
from tapeproxy.settings import Mode, Settings
from tapeproxy.store.files import FileStore
from tapeproxy.upstream.client import Outbound, UpstreamResponse

ANSWER = b'{"id": "chatcmpl-1", "choices": [{"message": {"content": "Hello!"}}]}'
SSE = [
    b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n',
    b'data: {"choices": [{"delta": {"content": "lo"}}]}\n\n',
    b"data: [DONE]\n\n",
]


class Scripted:
    """One canned answer, sent in the given chunks."""

    def __init__(self, status: int, headers: Sequence[tuple[str, str]], chunks: list[bytes]):
        self.status = status
        self.headers = headers
        self.chunked = len(chunks) > 1
        self._chunks = chunks
        self.closed = False
        self.ended = False
        self.whole = False

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    def close(self) -> None:
        self.closed = True


class ScriptedUpstream:
    def __init__(self, *answers: Scripted) -> None:
        self.answers = list(answers)
        self.sent: list[Outbound] = []

    async def open(self, request: Outbound) -> UpstreamResponse:
        self.sent.append(request)
        return self.answers.pop(0)


def json_answer() -> Scripted:
    return Scripted(200, [("content-type", "application/json")], [ANSWER])


def chat(content: str, stream: bool = False) -> Inbound:
    body: dict[str, object] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": content}],
    }
    if stream:
        body["stream"] = True
    return Inbound(
        upstream="openai",
        method="POST",
        path="/v1/chat/completions",
        query="",
        headers=((b"content-type", b"application/json"), (b"authorization", b"Bearer sk-x")),
        body=json.dumps(body).encode(),
    )


def engine_for(tmp_path: Path, mode: Mode, upstream: ScriptedUpstream) -> Engine:
    settings = Settings.model_validate({"mode": mode, "cassettes": tmp_path})
    engine = Engine(settings, provider_table({}), FileStore(tmp_path))
    engine.upstream = upstream
    return engine


async def pass_through(live: Live) -> bytes:
    """What a door does with a live answer: every chunk through the recording, then commit."""
    seen = b""
    async for chunk in live.answer.chunks():
        live.recording.feed(chunk)
        seen += chunk
    await live.recording.commit(cut=False)
    return seen


def test_a_recorded_answer_is_committed_then_replayed_byte_for_byte(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(json_answer())
    engine = engine_for(tmp_path, Mode.RECORD, upstream)

    async def scenario() -> Serve:
        live = await engine.exchange(chat("Say hello"))
        assert isinstance(live, Live)
        assert await pass_through(live) == ANSWER
        await engine.switch(None, Mode.REPLAY)
        served = await engine.exchange(chat("Say hello"))
        assert isinstance(served, Serve)
        return served

    served = asyncio.run(scenario())
    [file] = (tmp_path / "default").glob("*.json")
    assert "sk-x" not in file.read_text(), "no credential on disk"
    assert upstream.sent[0].url == "https://api.openai.com/v1/chat/completions"
    assert served.ordinal == 1
    assert b"".join(data for _, data in served.replay.frames) == ANSWER
    assert (engine.counters.recorded, engine.counters.replayed) == (1, 1)


def test_a_miss_is_refused_with_the_closest_recording_and_no_upstream_call(
    tmp_path: Path,
) -> None:
    upstream = ScriptedUpstream(json_answer())
    engine = engine_for(tmp_path, Mode.RECORD, upstream)

    async def scenario() -> Refuse:
        await pass_through_live(await engine.exchange(chat("Say hello")))
        await engine.switch(None, Mode.REPLAY)
        refused = await engine.exchange(chat("Say goodbye"))
        assert isinstance(refused, Refuse)
        return refused

    refused = asyncio.run(scenario())
    assert refused.error.status == 422
    assert 'body.messages[0].content: "Say hello" -> "Say goodbye"' in refused.error.message
    assert refused.body["error"]["type"] == "cassette_miss"
    assert len(upstream.sent) == 1, "the miss never went upstream"
    assert engine.counters.misses == 1


async def pass_through_live(answer: object) -> None:
    assert isinstance(answer, Live)
    await pass_through(answer)


def test_an_answer_aborted_mid_stream_records_nothing(tmp_path: Path) -> None:
    stream = Scripted(200, [("content-type", "text/event-stream")], SSE)
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> bool:
        live = await engine.exchange(chat("Say hello", stream=True))
        assert isinstance(live, Live)
        live.recording.feed(SSE[0])
        assert not live.recording.final_seen()
        live.recording.abort("client went away, nothing recorded")
        await live.recording.commit(cut=False)  # too late: it ended once already
        run = await engine.runs.get("default")
        return run.recording == 0

    assert asyncio.run(scenario()), "the run waits for no recording"
    assert not list(tmp_path.rglob("*.json"))
    assert (engine.counters.aborted, engine.counters.recorded) == (1, 0)


def test_a_stream_is_whole_once_its_final_frame_came(tmp_path: Path) -> None:
    stream = Scripted(200, [("content-type", "text/event-stream")], SSE)
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> bool:
        live = await engine.exchange(chat("Say hello", stream=True))
        assert isinstance(live, Live)
        for chunk in SSE:
            live.recording.feed(chunk)
        final = live.recording.final_seen()
        await live.recording.commit(cut=False)
        return final

    assert asyncio.run(scenario())
    [file] = tmp_path.rglob("*.json")
    frames = json.loads(file.read_text())["response"]["frames"]
    assert [frame["text"].encode() for frame in frames] == SSE


def test_once_records_an_empty_cassette_then_replays_it(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(json_answer(), json_answer())
    engine = engine_for(tmp_path, Mode.ONCE, upstream)

    async def scenario() -> list[str]:
        kinds = []
        for content in ("one", "two"):  # both recorded: the cassette was empty at the start
            answer = await engine.exchange(chat(content))
            kinds.append(type(answer).__name__)
            await pass_through_live(answer)
        await engine.switch("default", None)  # a new run: the cassette now holds recordings
        for content in ("one", "three"):
            kinds.append(type(await engine.exchange(chat(content))).__name__)
        return kinds

    assert asyncio.run(scenario()) == ["Live", "Live", "Serve", "Refuse"]
    assert len(upstream.sent) == 2


def test_a_key_header_sent_twice_keys_as_it_did_through_starlette(tmp_path: Path) -> None:
    """Both values of a repeated key header count, whatever their order (recordings made
    before the engine had its own door keep their keys)."""
    engine = engine_for(tmp_path, Mode.REPLAY, ScriptedUpstream())
    betas = [(b"anthropic-beta", b"computer-use-2024-10-22"), (b"anthropic-beta", b"tools-2024")]
    raw = ((b"anthropic-version", b"2023-06-01"), *betas)
    rules = engine.rules.for_upstream("anthropic")
    old = request_parts(
        "POST", "anthropic", "/v1/messages", "", Headers(raw=list(raw)), b"{}", rules
    )

    async def keys() -> set[str]:
        found = set()
        for headers in (raw, (raw[0], *reversed(betas))):
            inbound = Inbound("anthropic", "POST", "/v1/messages", "", headers, b"{}")
            refused = await engine.exchange(inbound)
            assert isinstance(refused, Refuse)
            found.add(refused.body["error"]["details"]["key"])
        return found

    assert asyncio.run(keys()) == {request_key(old, rules)}
