"""The engine driven as a door drives it, with no HTTP: `Inbound`s in, `exchange()`, and a live
answer's `chunks` iterated to their end, closed early, or left by a client (`Inbound.gone`).
The upstream is a scripted stand-in for the network (the `Upstream` protocol)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import Headers

from tapeproxy.engine.core import Engine
from tapeproxy.engine.inbound import Inbound, Live, Refuse, Serve
from tapeproxy.engine.keying import request_key, request_parts
from tapeproxy.errors import AnswerRefused, ClientGone, UpstreamCut
from tapeproxy.exchange.model import Exchange
from tapeproxy.modes import Mode
from tapeproxy.providers import provider_table
from tapeproxy.settings import Settings
from tapeproxy.store.files import FileStore
from tapeproxy.upstream.protocol import Outbound, UpstreamResponse

ANSWER = b'{"id": "chatcmpl-1", "choices": [{"message": {"content": "Hello!"}}]}'
SSE = [
    b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n',
    b'data: {"choices": [{"delta": {"content": "lo"}}]}\n\n',
    b"data: [DONE]\n\n",
]
Step = bytes | float | BaseException  # a chunk, a pause (seconds), or an error raised


class Scripted:
    """One canned answer, in the given steps. Like aiohttp's, it says `ended` once the chunk
    it handed over was the last (not when an error or a pause comes after it), and `whole`
    when it came in one piece."""

    def __init__(self, status: int, headers: Sequence[tuple[str, str]], steps: list[Step]):
        self.status = status
        self.headers = headers
        self.chunked = len(steps) > 1
        self._steps = steps
        self.closed = False
        self.ended = False
        self.whole = steps == [step for step in steps if isinstance(step, bytes)][:1]

    async def chunks(self) -> AsyncIterator[bytes]:
        for n, step in enumerate(self._steps):
            if isinstance(step, float):
                await asyncio.sleep(step)
            elif isinstance(step, BaseException):
                raise step
            else:
                self.ended = n == len(self._steps) - 1
                yield step

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


def sse_answer(*steps: Step) -> Scripted:
    return Scripted(200, [("content-type", "text/event-stream")], list(steps or SSE))


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


def engine_for(tmp_path: Path, mode: Mode, upstream: ScriptedUpstream, **settings: Any) -> Engine:
    values = {"mode": mode, "cassettes": tmp_path, **settings}
    engine = Engine(Settings.model_validate(values), provider_table({}), FileStore(tmp_path))
    engine.upstream = upstream
    return engine


def exchanges(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*.json") if ".tapeproxy" not in p.parts]


async def pass_through(live: object, tmp_path: Path | None = None) -> bytes:
    """What a door does with a live answer: every chunk on, closed at the end. With
    `tmp_path`, it checks that the exchange is on disk when the last chunk comes."""
    assert isinstance(live, Live)
    seen = b""
    try:
        async for chunk in live.chunks:
            if live.chunks.last and tmp_path is not None:
                assert exchanges(tmp_path), "the exchange is written before the last chunk"
            seen += chunk
        assert live.chunks.last, "the answer ends with its last chunk"
    finally:
        await live.chunks.aclose()
    return seen


async def recording_count(engine: Engine) -> int:
    return (await engine.runs.get("default")).recording


class Client:
    """A client that hangs up when told: what a door hands the engine as `Inbound.gone`."""

    def __init__(self) -> None:
        self.left = asyncio.Event()

    async def gone(self) -> None:
        await self.left.wait()


def test_a_recorded_answer_is_committed_then_replayed_byte_for_byte(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(json_answer())
    engine = engine_for(tmp_path, Mode.RECORD, upstream)

    async def scenario() -> tuple[Live, Serve]:
        live = await engine.exchange(chat("Say hello"))
        assert isinstance(live, Live)
        assert await pass_through(live, tmp_path) == ANSWER
        await engine.switch(None, Mode.REPLAY)
        served = await engine.exchange(chat("Say hello"))
        assert isinstance(served, Serve)
        return live, served

    live, served = asyncio.run(scenario())
    [file] = exchanges(tmp_path)
    assert "sk-x" not in file.read_text(), "no credential on disk"
    assert upstream.sent[0].url == "https://api.openai.com/v1/chat/completions"
    assert (b"x-tapeproxy-key", file.stem.split(".")[0].encode()) in live.headers
    assert live.status == 200 and live.held, "a whole answer goes out whole once written"
    assert served.ordinal == 1
    assert b"".join(data for _, data in served.replay.frames) == ANSWER
    assert (engine.counters.recorded, engine.counters.replayed) == (1, 1)


def test_a_miss_is_refused_with_the_closest_recording_and_no_upstream_call(
    tmp_path: Path,
) -> None:
    upstream = ScriptedUpstream(json_answer())
    engine = engine_for(tmp_path, Mode.RECORD, upstream)

    async def scenario() -> Refuse:
        await pass_through(await engine.exchange(chat("Say hello")))
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


def test_a_stream_is_handed_on_as_it_comes_and_written_before_its_last_chunk(
    tmp_path: Path,
) -> None:
    stream = sse_answer()
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> tuple[list[bool], bool]:
        live = await engine.exchange(chat("Say hello", stream=True))
        assert isinstance(live, Live) and not live.held
        written = []
        async for _ in live.chunks:
            written.append(bool(exchanges(tmp_path)))
        return written, stream.closed

    written, closed = asyncio.run(scenario())
    assert written == [False, False, True], "the first chunks come before the write"
    assert closed, "the upstream is closed"
    [file] = exchanges(tmp_path)
    frames = json.loads(file.read_text())["response"]["frames"]
    assert [frame["text"].encode() for frame in frames] == SSE


def test_an_answer_closed_mid_stream_records_nothing_and_closes_the_upstream(
    tmp_path: Path,
) -> None:
    stream = sse_answer()
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> int:
        live = await engine.exchange(chat("Say hello", stream=True))
        assert isinstance(live, Live)
        assert await anext(live.chunks) == SSE[0]
        await live.chunks.aclose()
        return await recording_count(engine)

    assert asyncio.run(scenario()) == 0, "the run waits for no recording"
    assert stream.closed
    assert not exchanges(tmp_path)
    assert (engine.counters.aborted, engine.counters.recorded) == (1, 0)


def test_an_answer_never_iterated_but_closed_records_nothing(tmp_path: Path) -> None:
    stream = sse_answer()
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> int:
        live = await engine.exchange(chat("Say hello", stream=True))
        assert isinstance(live, Live)
        await live.chunks.aclose()
        return await recording_count(engine)

    assert asyncio.run(scenario()) == 0
    assert stream.closed and not exchanges(tmp_path)
    assert engine.counters.aborted == 1


def test_a_door_task_cancelled_mid_stream_is_a_shutdown_cut_that_records_nothing(
    tmp_path: Path,
) -> None:
    stream = sse_answer(SSE[0], 10.0, *SSE[1:])
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def door() -> None:
        await pass_through(await engine.exchange(chat("Say hello", stream=True)))

    async def scenario() -> int:
        task = asyncio.ensure_future(door())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await recording_count(engine)

    assert asyncio.run(scenario()) == 0
    assert stream.closed and not exchanges(tmp_path)
    assert (engine.counters.aborted, engine.counters.recorded) == (0, 0), "not a client gone"


def test_a_client_that_leaves_mid_stream_ends_the_answer_and_records_nothing(
    tmp_path: Path,
) -> None:
    stream = sse_answer(SSE[0], 10.0, *SSE[1:])
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> int:
        client = Client()
        inbound = chat("Say hello", stream=True)
        inbound.gone = client.gone
        live = await engine.exchange(inbound)
        assert isinstance(live, Live)
        assert await anext(live.chunks) == SSE[0]
        asyncio.get_running_loop().call_later(0.05, client.left.set)
        with pytest.raises(ClientGone):
            await anext(live.chunks)
        await live.chunks.aclose()
        return await recording_count(engine)

    assert asyncio.run(scenario()) == 0
    assert stream.closed and not exchanges(tmp_path)
    assert (engine.counters.aborted, engine.counters.recorded) == (1, 0)


@pytest.mark.parametrize(("pause", "kept"), [(0.2, True), (5.0, False)])
def test_a_client_that_leaves_after_the_final_frame_is_given_the_grace(
    tmp_path: Path, pause: float, kept: bool
) -> None:
    """The upstream is read on after the client left, when it had the final frame: the
    end-of-body marker a little later keeps the exchange; one past the grace (the read
    timeout) does not."""
    stream = sse_answer(*SSE, pause, b"")
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream), read_timeout=0.5)

    async def scenario() -> None:
        client = Client()
        inbound = chat("Say hello", stream=True)
        inbound.gone = client.gone
        live = await engine.exchange(inbound)
        assert isinstance(live, Live)
        for frame in SSE:
            assert await anext(live.chunks) == frame
        client.left.set()
        try:
            async for _ in live.chunks:
                pass
        except ClientGone:
            assert not kept
        finally:
            await live.chunks.aclose()

    asyncio.run(scenario())
    assert stream.closed
    assert len(exchanges(tmp_path)) == int(kept)
    assert (engine.counters.recorded, engine.counters.aborted) == (int(kept), int(not kept))


@pytest.mark.parametrize("record_failures", [False, True])
def test_an_upstream_cut_is_raised_on_and_kept_only_with_record_failures(
    tmp_path: Path, record_failures: bool
) -> None:
    stream = sse_answer(SSE[0], UpstreamCut("upstream 'openai' stopped mid-answer"))
    engine = engine_for(
        tmp_path, Mode.RECORD, ScriptedUpstream(stream), record_failures=record_failures
    )

    async def scenario() -> None:
        with pytest.raises(UpstreamCut):
            await pass_through(await engine.exchange(chat("Say hello", stream=True)))

    asyncio.run(scenario())
    assert stream.closed
    assert len(exchanges(tmp_path)) == int(record_failures)
    assert (engine.counters.errors, engine.counters.aborted) == (1, 0)


def test_an_answer_refused_on_its_way_records_nothing(tmp_path: Path) -> None:
    stream = sse_answer(SSE[0], AnswerRefused("a compression bomb"))
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream), record_failures=True)

    async def scenario() -> None:
        with pytest.raises(AnswerRefused):
            await pass_through(await engine.exchange(chat("Say hello", stream=True)))

    asyncio.run(scenario())
    assert stream.closed and not exchanges(tmp_path)
    assert (engine.counters.bombs, engine.counters.errors) == (1, 1)


def test_passthrough_hands_the_answer_on_and_writes_nothing(tmp_path: Path) -> None:
    stream = sse_answer()
    engine = engine_for(tmp_path, Mode.PASSTHROUGH, ScriptedUpstream(stream))

    async def scenario() -> bytes:
        live = await engine.exchange(chat("Say hello", stream=True))
        assert isinstance(live, Live) and not live.held
        return await pass_through(live)

    assert asyncio.run(scenario()) == b"".join(SSE)
    assert stream.closed and not exchanges(tmp_path)


def test_once_records_an_empty_cassette_then_replays_it(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(json_answer(), json_answer())
    engine = engine_for(tmp_path, Mode.ONCE, upstream)

    async def scenario() -> list[str]:
        kinds = []
        for content in ("one", "two"):  # both recorded: the cassette was empty at the start
            answer = await engine.exchange(chat(content))
            kinds.append(type(answer).__name__)
            await pass_through(answer)
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


def test_a_door_may_send_the_answer_from_another_task_than_the_one_that_asked(
    tmp_path: Path,
) -> None:
    """As a StreamingResponse does: the client that leaves stops the task that iterates."""
    stream = sse_answer(SSE[0], 10.0, *SSE[1:])
    engine = engine_for(tmp_path, Mode.RECORD, ScriptedUpstream(stream))

    async def scenario() -> None:
        client = Client()
        inbound = chat("Say hello", stream=True)
        inbound.gone = client.gone
        live = await engine.exchange(inbound)
        assert isinstance(live, Live)
        asyncio.get_running_loop().call_later(0.05, client.left.set)
        sending = asyncio.ensure_future(pass_through(live))
        await asyncio.wait([sending], timeout=5)  # the asking task is not the one stopped
        assert isinstance(sending.exception(), ClientGone)

    asyncio.run(scenario())
    assert stream.closed and not exchanges(tmp_path)
    assert (engine.counters.aborted, engine.counters.recorded) == (1, 0)


def test_a_switch_offers_no_listing_made_while_a_run_of_its_cassette_was_under_way(
    tmp_path: Path,
) -> None:
    upstream = ScriptedUpstream(json_answer(), json_answer(), json_answer())
    engine = engine_for(tmp_path, Mode.RECORD, upstream)

    async def scenario() -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        for _ in range(2):  # a first run records the request twice: #1 and #2
            await pass_through(await engine.exchange(chat("hi")))
        await engine.switch("default", None)
        # A second record run (another client, say) asks it once: #1 anew, #2 superseded,
        # deleted as this run ends. The plugin lists the cassette before that end.
        await pass_through(await engine.exchange(chat("hi")))
        opened = engine.runs.open("default", read_ahead=True)
        await engine.switch("default", Mode.REPLAY, opened)
        run = await engine.runs.get("default", Mode.REPLAY)
        return opened.ordinals, run.ordinals

    listed_early, started_from = asyncio.run(scenario())
    (key,) = listed_early
    assert listed_early == {key: [1, 2]}
    assert started_from == {key: [1]} == engine.store.entries("default")


class Watched(FileStore):
    """A folder store that notes its listings and reads."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.seen: list[str] = []

    def entries(self, cassette: str) -> dict[str, list[int]]:
        self.seen.append("list")
        return super().entries(cassette)

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        self.seen.append("read")
        return super().read(cassette, key, ordinal)


def test_in_the_plugins_sequence_each_tests_first_request_reads_nothing(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(json_answer(), json_answer())
    store = Watched(tmp_path)
    settings = Settings.model_validate({"mode": Mode.RECORD, "cassettes": tmp_path})
    engine = Engine(settings, provider_table({}), store)
    engine.upstream = upstream

    async def scenario() -> list[list[str]]:
        for name in ("t1", "t2"):  # recorded once each
            await engine.switch(name, None)
            await pass_through(await engine.exchange(chat(name)))
        await engine.switch("default", Mode.REPLAY)  # the plugin's server replays from start
        first_requests = []
        for name in ("t1", "t2"):  # as the plugin: open in its thread, switch, ask, take
            opened = engine.runs.open(name, read_ahead=True)
            await engine.switch(name, Mode.REPLAY, opened)
            store.seen = []
            answer = await engine.exchange(chat(name))
            assert isinstance(answer, Serve)
            first_requests.append(list(store.seen))
            engine.close_run(await engine.take_run(name), False, True, False)
        return first_requests

    assert asyncio.run(scenario()) == [[], []]
