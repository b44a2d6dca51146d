"""Runs and the replay cache: ordinals under concurrency, unused accounting, bounded memory."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.replay import Replay, ReplayCache
from tapeproxy.engine.run import Run
from tapeproxy.engine.runs import MAX_REACHED_UNTOLD, READ_AHEAD, READ_AHEAD_BYTES, Runs, Touched
from tapeproxy.exchange.model import Exchange, StoredRequest, StoredResponse
from tapeproxy.modes import Mode
from tapeproxy.store.files import FileStore

MODEL, TOOL = "a" * 64, "b" * 64


def replay(size: int) -> Replay:
    return Replay(status=200, headers=(), frames=((0, b"x" * size),), cut=False)


def stored(upstream: str, key: str) -> Exchange:
    return Exchange(
        key=key,
        ordinal=1,
        seq=0,
        rules="r",
        request=StoredRequest(method="POST", upstream=upstream, path="/v1/x"),
        response=StoredResponse(status=200, body={"json": {"ok": True}, "style": "compact"}),
    )


def test_ordinals_handed_out_before_a_write_lands_are_never_handed_out_twice() -> None:
    adding = Run("c", {MODEL: [1]})
    assert [adding.next_ordinal(MODEL, anew=False) for _ in range(3)] == [2, 3, 4]
    adding.add(MODEL, 3)
    assert adding.next_ordinal(MODEL, anew=False) == 5
    anew = Run("c", {MODEL: [1, 2, 3]})
    assert [anew.next_ordinal(MODEL, anew=True) for _ in range(2)] == [1, 2]
    assert anew.superseded() == [(MODEL, 3)]


def test_the_replay_cache_is_bounded_by_bytes_and_forgets_the_least_recent() -> None:
    cache = ReplayCache(limit=100_000)
    for n in range(5):
        cache.put(("c", str(n), 1), replay(10_000))
    assert cache.get(("c", "0", 1)) is not None  # now the most recent
    for n in range(5, 10):
        cache.put(("c", str(n), 1), replay(10_000))
    assert cache.size <= 100_000
    assert cache.get(("c", "0", 1)) is not None
    assert cache.get(("c", "1", 1)) is None, "the least recently used went first"
    cache.put(("c", "huge", 1), replay(50_000))
    assert cache.get(("c", "huge", 1)) is None, "one huge answer is not worth everything else"
    cache.discard(("c", "0", 1))
    assert cache.get(("c", "0", 1)) is None


def test_recordings_of_a_live_upstream_do_not_count_as_unused(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("trip", stored("openai", MODEL))
    store.write("trip", stored("search", TOOL))

    async def unused_with(live: frozenset[str], seen: set[str]) -> list[str]:
        runs = Runs(store, live=live)
        run = await runs.get("trip")
        run.replayed_from = True
        run.live |= seen
        [summary] = await runs.summaries()
        return list(summary.unused)

    assert asyncio.run(unused_with(frozenset(), set())) == [f"{MODEL}.json", f"{TOOL}.json"]
    assert asyncio.run(unused_with(frozenset({"openai"}), set())) == [f"{TOOL}.json"]
    assert asyncio.run(unused_with(frozenset(), {"search"})) == [f"{MODEL}.json"]


def test_a_restart_keeps_what_the_ended_run_left_unused(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("suite", stored("openai", MODEL))

    async def scenario() -> tuple[int, int, list[str]]:
        runs = Runs(store)
        run = await runs.get("suite")
        run.replayed_from = True
        await runs.restart_all()
        fresh = await runs.get("suite")
        ledger = runs.ledger
        return ledger.ended_unused, len(fresh.served), [r.cassette for r in ledger.ended]

    assert asyncio.run(scenario()) == (1, 0, ["suite"])


def test_a_new_run_never_reuses_an_ordinal_the_run_before_is_still_writing(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    store.write("c", stored("openai", MODEL))

    async def scenario() -> tuple[int, int, int]:
        runs = Runs(store)
        old = await runs.get("c")
        in_flight = old.next_ordinal(MODEL, anew=False)  # its write has not landed yet
        await runs.restart("c")
        new = await runs.get("c")
        adding = new.next_ordinal(MODEL, anew=False)
        anew = new.next_ordinal(TOOL, anew=True)
        return in_flight, adding, anew

    assert asyncio.run(scenario()) == (2, 3, 1)


def test_a_run_knows_whether_its_cassette_held_recordings_when_it_began(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("full", stored("openai", MODEL))

    async def held() -> tuple[bool, bool, bool]:
        runs = Runs(store)
        empty = await runs.get("empty")
        empty.add(MODEL, empty.next_ordinal(MODEL, anew=True))  # recorded into since
        return (await runs.get("full")).held, empty.held, bool(empty.ordinals)

    assert asyncio.run(held()) == (True, False, True), "a run records on in `once` mode"


def test_touched_holds_the_told_names_not_every_name_clients_send() -> None:
    touched = Touched()
    touched.watch("told")
    assert not touched and "told" not in touched
    names = [f"by-header/c{n:05d}" for n in range(10_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in names:
            touched.add(name)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The newest MAX_REACHED_UNTOLD names (their strings are the clients'): about 50 KB.
    assert grown < 128 * 1024, f"10,000 names by header kept {grown:,} bytes"
    assert touched, "a request came"
    assert "told" not in touched and names[0] not in touched
    touched.add("told")
    assert "told" in touched
    touched.watch(names[-1])  # reached by header before a PUT named it
    touched.watch(names[0])  # the oldest: forgotten
    assert names[-1] in touched and names[0] not in touched
    assert len(names) > MAX_REACHED_UNTOLD


def test_a_cassette_told_while_a_request_already_runs_it_counts_as_touched(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[bool, bool]:
        runs = Runs(FileStore(tmp_path))
        await runs.get("early")
        runs.watch("early")
        runs.watch("later")
        return "early" in runs.touched, "later" in runs.touched

    assert asyncio.run(scenario()) == (True, False)


def test_a_small_cassette_is_read_ahead_as_its_run_begins_and_a_large_one_is_not(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    keys = [f"{n:064x}" for n in range(READ_AHEAD + 1)]
    for key in keys[:3]:
        store.write("small", stored("openai", key))
    for key in keys:
        store.write("large", stored("openai", key))
    big = stored("openai", MODEL).model_copy(
        update={"response": StoredResponse(status=200, body={"text": "x" * READ_AHEAD_BYTES})}
    )
    store.write("big", big)
    store.write("big", stored("openai", TOOL))
    (tmp_path / "small" / f"{keys[2]}.json").write_text("{ torn")  # read when asked: its error

    def ahead(cassette: str, read_ahead: bool = True) -> ReplayCache:
        cache = ReplayCache()
        asyncio.run(Runs(store, cache).get(cassette, Mode.REPLAY if read_ahead else Mode.RECORD))
        return cache

    small = ahead("small")
    assert small.get(("small", keys[0], 1)) == jsonrpc.ready(
        store.read("small", keys[0], 1), keys[0]
    )
    assert small.get(("small", keys[1], 1)) is not None
    assert small.get(("small", keys[2], 1)) is None, "unreadable: read (and refused) when asked"
    assert ahead("small", read_ahead=False).size == 0, "record mode reads nothing ahead"
    assert ahead("large").size == 0, f"over {READ_AHEAD} recordings: each read when asked for"
    held = ahead("big")
    assert held.get(("big", MODEL, 1)) is None and held.size <= READ_AHEAD_BYTES


class CountingStore(FileStore):
    """A folder store that counts its reads."""

    reads = 0

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        self.reads += 1
        return super().read(cassette, key, ordinal)


def test_a_run_opened_in_another_thread_starts_whole_and_its_requests_read_nothing(
    tmp_path: Path,
) -> None:
    store = CountingStore(tmp_path)
    store.write("c", stored("openai", MODEL))
    store.write("c", stored("openai", TOOL))
    cache = ReplayCache()
    runs = Runs(store, cache, strict_order=True)
    opened = runs.open("c", read_ahead=True)  # the pytest plugin's thread, off the loop
    assert store.reads == 2, "each file read once, for the read-ahead and the order both"
    runs.offer(opened)
    assert runs.loaded("c") is None, "no run until a request reaches the cassette"

    store.reads = 0
    run = asyncio.run(runs.get("c", Mode.REPLAY))
    assert store.reads == 0 and run.ordinals == {MODEL: [1], TOOL: [1]}
    assert [recorded.key for recorded in run.order or []] == [MODEL, TOOL]
    assert cache.get(("c", MODEL, 1)) is not None and cache.get(("c", TOOL, 1)) is not None


def test_an_offer_is_dropped_once_a_recording_is_written_and_the_cassette_listed_again(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    store.write("c", stored("openai", MODEL))
    cache = ReplayCache()
    runs = Runs(store, cache)
    runs.offer(runs.open("c", read_ahead=True))
    store.write("c", stored("openai", TOOL))  # the keeper wrote a recording since
    cache.discard(("c", TOOL, 1))
    run = asyncio.run(runs.get("c", Mode.REPLAY))
    assert run.ordinals == {MODEL: [1], TOOL: [1]}, "listed again, the new recording in it"


def test_what_a_thread_read_ahead_is_not_cached_if_a_recording_was_written_meanwhile(
    tmp_path: Path,
) -> None:
    cache = ReplayCache()

    class WrittenAsRead(FileStore):
        def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
            cache.discard((cassette, key, ordinal))  # the keeper writes it as it is read
            return super().read(cassette, key, ordinal)

    store = WrittenAsRead(tmp_path)
    store.write("c", stored("openai", MODEL))
    asyncio.run(Runs(store, cache).get("c", Mode.REPLAY))
    assert cache.get(("c", MODEL, 1)) is None, "read again when asked for, not the stale one"


def test_an_offer_ends_with_the_run_it_was_for(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("c", stored("openai", MODEL))
    runs = Runs(store, ReplayCache())

    async def scenario() -> tuple[Run | None, Run]:
        runs.offer(runs.open("c"))
        taken = await runs.take("c")  # a test that made no request: no run, nor an offer left
        store.write("c", stored("openai", TOOL))
        return taken, await runs.get("c")

    taken, run = asyncio.run(scenario())
    assert taken is None and run.ordinals == {MODEL: [1], TOOL: [1]}
