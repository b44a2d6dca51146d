"""The scribe: a second process that writes a recording server's exchanges (scribe.py).
Seen from outside: the process itself, its journal's halves, and what lands on disk."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tapeproxy import scribe as scribe_module
from tapeproxy.exchangefile import Record, frame
from tapeproxy.models import dump_exchange, load_exchange
from tapeproxy.providers import BUILTIN
from tapeproxy.store import journal
from tapeproxy.store.base import same_recording
from tapeproxy.store.fs import FileStore
from tests.conftest import MakeProxy
from tests.e2e.test_conformance import send, wire_of
from tests.support import ProxyServer, files_under

pytestmark = pytest.mark.skipif(
    not journal.SUPPORTED or not Path("/proc/self/stat").exists(),
    reason="the scribe runs where the journal does; its process is found through /proc",
)

CHAT = "/openai/v1/chat/completions"


def scribes() -> list[int]:
    """The pids of the scribes this test process started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"tapeproxy.scribe" in command:
            found.append(int(entry.name))
    return found


def halves(library: Path, pid: int) -> list[Path]:
    """The scribe's journal halves. The journal's folder may vanish as it is listed: the
    server removes its own (emptied) journal when it hands over to the scribe."""
    try:
        return sorted((library / journal.JOURNAL_DIR).glob(f"journal-{pid}-*"))
    except FileNotFoundError:
        return []


def journaled(library: Path, pid: int) -> bytes:
    """What the scribe's halves hold now (a half made or dropped meanwhile: left out)."""
    found = []
    for half in halves(library, pid):
        with contextlib.suppress(FileNotFoundError):
            found.append(half.read_bytes())
    return b"".join(found)


def until(check: Callable[[], object], what: str, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit} s: {what}")
        time.sleep(0.02)


def ask(proxy: ProxyServer, text: str, stream: bool = False) -> httpx.Response:
    body: dict[str, object] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": text}],
    }
    if stream:
        body["stream"] = True
    return httpx.post(proxy.url + CHAT, json=body, timeout=20)


def scribe_at_work(proxy: ProxyServer, library: Path) -> int:
    """Record until the scribe journals what it writes (its journal's halves are made at its
    first write): the recordings before that were written by the server, or by the scribe
    the usual way while it made its halves."""
    found: list[int] = []

    def writing() -> bool:
        text = f"warm up {time.monotonic()}"
        assert ask(proxy, text).status_code == 200
        found[:] = scribes()
        return bool(found) and text.encode() in journaled(library, found[0])

    until(writing, "the scribe writes recordings")
    return found[0]


async def burst(proxy: ProxyServer, prompts: list[str]) -> list[str]:
    """Every prompt at once through the official SDK, every second one streamed."""
    client = openai.AsyncOpenAI(base_url=proxy.url + "/openai/v1", api_key="sk-test", max_retries=0)

    async def one(n: int, text: str) -> str:
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": text}]
        if n % 2:
            stream = await client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        answer = await client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        return answer.choices[0].message.content or ""

    try:
        return await asyncio.gather(*(one(n, text) for n, text in enumerate(prompts)))
    finally:
        await client.close()


def test_recordings_made_at_once_are_written_by_the_scribe_numbered_without_gaps(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    prompts = [f"question {n % 12}" for n in range(36)]  # 12 requests, 3 times each
    recorded = asyncio.run(burst(proxy, prompts))
    assert all(recorded)
    entries = FileStore(cassettes).entries("default")
    asked = [ordinals for ordinals in entries.values() if len(ordinals) > 1]
    assert asked == [[1, 2, 3]] * 12  # each of the 12 requests, 3 times, numbered 1 2 3
    proxy.stop()
    assert pid not in scribes(), "a stopped server leaves no scribe behind"
    assert not (cassettes / journal.JOURNAL_DIR).exists(), "the scribe's journal is removed"

    replay = make_proxy(mode="replay")
    assert asyncio.run(burst(replay, prompts)) == recorded


def test_a_killed_scribe_loses_no_recording_and_its_journal_is_taken_back(
    make_proxy: MakeProxy, cassettes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    prompts = [f"asked while the scribe dies {n}" for n in range(24)]

    async def kill_during_burst() -> list[str]:
        os.kill(pid, signal.SIGSTOP)  # every recording of the burst waits on the scribe
        answers = asyncio.create_task(burst(proxy, prompts))
        await asyncio.sleep(1.0)
        assert not answers.done(), "an answer ends once its exchange is written"
        os.kill(pid, signal.SIGKILL)
        return await answers

    with caplog.at_level(logging.WARNING, logger="tapeproxy"):
        assert all(asyncio.run(kill_during_burst()))
        after = [ask(proxy, f"after the scribe died {n}", stream=bool(n % 2)) for n in range(4)]
        assert all(answer.status_code == 200 for answer in after)
        until(lambda: not halves(cassettes, pid), "the dead scribe's journal is taken back")
    assert "scribe stopped" in caplog.text
    store = FileStore(cassettes)
    asked = set()
    for key, ordinals in store.entries("default").items():
        for ordinal in ordinals:  # each whole and readable
            request = store.read("default", key, ordinal).request
            asked.add(request.body["json"]["messages"][0]["content"])  # type: ignore[index]
    assert asked >= {*prompts, *(f"after the scribe died {n}" for n in range(4))}, "none lost"
    assert scribes() == [], "no second scribe: the server writes from now on"


def test_recordings_a_run_superseded_are_forgotten_by_the_scribes_journal(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """Deleted by the server, their journaled bytes must never be written back after a
    power cut: the scribe's journal voids them before the server deletes them."""
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    for _ in range(3):
        answer = ask(proxy, "asked three times")
        assert answer.status_code == 200
    key = answer.headers["x-tapeproxy-key"]
    assert proxy.put_cassette(cassette="default", mode="record").status_code == 200
    assert ask(proxy, "asked three times").status_code == 200  # this run asks it once
    assert proxy.put_cassette(cassette="other", mode="record").status_code == 200
    superseded = (f"default/{key}.2.json", f"default/{key}.3.json")
    assert not any((cassettes / name).exists() for name in superseded)
    counted = {}
    for half in halves(cassettes, pid):
        for path, data in journal.entries(half.read_bytes())[1]:
            counted[path] = data
    for name in superseded:
        assert counted.get(name) is None, f"{name} deleted, yet its journal entry still counts"


def test_without_the_scribe_the_server_writes_recordings_itself(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record", scribe=False)
    prompts = [f"question {n % 4}" for n in range(12)]
    assert all(asyncio.run(burst(proxy, prompts)))
    assert scribes() == []
    entries = FileStore(cassettes).entries("default")
    assert sorted(len(o) for o in entries.values()) == [3] * 4
    assert (cassettes / journal.JOURNAL_DIR).is_dir(), "the server keeps the journal itself"


def test_past_its_byte_cap_the_scribe_takes_no_more_and_the_server_writes(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scribe's copies of what it holds stay bounded: with a cap below one answer, it
    holds one at a time, and the server writes the others (unjournaled: the journal is the
    scribe's)."""
    monkeypatch.setattr(scribe_module, "HELD_BYTES", 1)
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    prompts = [f"asked past the cap {n}" for n in range(6)]

    async def while_stopped() -> list[str]:
        os.kill(pid, signal.SIGSTOP)  # what it takes waits; so do the server's forgets
        try:
            answers = asyncio.create_task(burst(proxy, prompts))
            await asyncio.sleep(1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        return await answers

    assert all(asyncio.run(while_stopped()))
    held = journaled(cassettes, pid)
    assert sum(text.encode() in held for text in prompts) == 1, "it held one at a time"
    store = FileStore(cassettes)
    asked = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert asked >= set(prompts)


def as_read(raw: bytes) -> Record:
    """An exchange file as read, a streamed JSON array's frames joined: they are the pieces
    as the proxy happened to read them (the fake sends them apart)."""
    record = load_exchange(raw).model_dump(exclude_none=True)
    response = record["response"]
    if response.get("dialect") == "json":
        response["frames"] = [frame(0, "".join(f["text"] for f in response["frames"]))]
    return record


@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redacted"])
def test_the_scribe_writes_the_files_the_server_writes_itself(
    make_proxy: MakeProxy, cassettes: Path, tmp_path: Path, redact: bool
) -> None:
    """Every provider's streams (SSE, NDJSON, a streamed JSON array) and JSON answers,
    through the real server: the scribe (which has no pydantic) writes the files the server
    writes without it, timings and seq aside, and each file is byte for byte what the
    pydantic model writes of it once read back."""
    rules: dict[str, object] = {}
    if redact:
        # Not the warm-up's text: scribe_at_work finds it in the scribe's journal.
        rules = {"redact_field": ["max_tokens", "contents"], "redact_pattern": [r"Paris|hi"]}
    by_scribe = make_proxy(mode="record", **rules)
    pid = scribe_at_work(by_scribe, cassettes)
    itself = make_proxy(mode="record", scribe=False, cassettes=tmp_path / "itself", **rules)
    for proxy in (by_scribe, itself):
        for name in BUILTIN:
            wire = wire_of(name)
            for call in (*wire.streams.values(), wire.answer):
                assert send(proxy.url, name, call)[0] == 200
    assert scribes() == [pid], "the scribe wrote them all, and is still at work"
    written, expected = files_under(cassettes), files_under(tmp_path / "itself")
    assert len(expected) == sum(len(wire_of(n).streams) + 1 for n in BUILTIN)
    for name, raw in expected.items():
        mine = written[name]
        assert dump_exchange(load_exchange(mine)) == mine
        assert dump_exchange(load_exchange(raw)) == raw
        assert same_recording(as_read(raw), as_read(mine)), name
        if redact:
            assert b"Paris" not in mine
