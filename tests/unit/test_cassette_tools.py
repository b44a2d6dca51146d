"""The cassette tools (show, ls's summary, verify, rekey) work on any CassetteStore: here a
dict-backed one, with no folder and no file behind it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tapeproxy.engine.keying import RequestParts, request_key
from tapeproxy.engine.rules import MatchRules, build_rules
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.model import Exchange, Frame, StoredRequest, StoredResponse
from tapeproxy.modes import Mode
from tapeproxy.providers import BUILTIN
from tapeproxy.store.lastrun import LastRun
from tapeproxy.store.protocol import CassetteStore, exchange_file
from tapeproxy.tools.listing import show
from tapeproxy.tools.prune import prune
from tapeproxy.tools.rekey import rekey
from tapeproxy.tools.summaries import summarize
from tapeproxy.tools.verify import verify
from tests.fakes.memory_store import MemoryStore

DEFAULTS = BUILTIN["openai"].rules
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore()


def recording(body: Any, seq: int, rules: MatchRules = DEFAULTS, **extra: Any) -> Exchange:
    """An exchange as the server writes it, keyed under `rules`."""
    parts = RequestParts("POST", "openai", "/v1/chat/completions", (), (), Payload("json", body))
    values: dict[str, Any] = {
        "ordinal": 1,
        "response": StoredResponse(status=200, body={"json": {"id": f"answer-{seq}"}}),
        **extra,
    }
    return Exchange(
        key=request_key(parts, rules),
        seq=seq,
        rules=rules.fingerprint(),
        request=StoredRequest.model_validate(parts.to_dict()),
        **values,
    )


def streamed(seq: int) -> Exchange:
    frames = [Frame(ms=0, text="data: hi\n\n"), Frame(ms=7, text="data: [DONE]\n\n")]
    answer = StoredResponse(status=200, dialect="sse", frames=frames)
    return recording({"model": "m", "messages": HI, "stream": True}, seq, response=answer)


def test_show_and_summarize_read_through_the_store(memory: MemoryStore) -> None:
    store: CassetteStore = memory
    store.write("trip", recording({"model": "m", "messages": HI}, 1, usage={"input_tokens": 3}))
    store.write("trip", streamed(0))
    torn = exchange_file("f" * 64, 1)
    memory.data["trip"][torn] = b'{"schema_version": 1, "ke'
    rows = show(store, "trip")
    assert [(row.seq, row.outcome) for row in rows] == [
        (-1, "unreadable"),
        (0, "complete"),
        (1, "complete"),
    ]
    assert rows[0].file == torn and rows[1].kind == "sse: 2 frames"
    summary = summarize(store, "trip")
    assert (summary.exchanges, summary.streams, summary.unreadable) == (3, 1, 1)
    assert summary.input_tokens == 3


def test_verify_lists_the_store_and_names_each_problem(memory: MemoryStore) -> None:
    sound, edited = recording({"model": "m", "messages": HI}, 0), streamed(1)
    for exchange in (sound, edited):
        memory.write("trip", exchange)
    files = memory.data["trip"]
    moved = files.pop(exchange_file(edited.key, 1))
    files[exchange_file("0" * 64, 1)] = moved  # renamed by hand
    files[exchange_file("1" * 64, 1)] = b"{not json"
    files[f".{sound.key}.json.x1y2.tmp"] = b'{"sche'  # an interrupted write
    files[f"{sound.key}.02.json"] = files[exchange_file(sound.key, 1)]  # a name never read
    files["notes.md"] = b"ours, not tapeproxy's"
    verdict = verify(memory, "trip", lambda upstream: DEFAULTS)
    problems = {p["file"]: p["problem"] for p in verdict.problems}
    warnings = {p["file"]: p["problem"] for p in verdict.warnings}
    assert verdict.checked == 3
    assert set(problems) == {
        exchange_file("0" * 64, 1),
        exchange_file("1" * 64, 1),
        f"{sound.key}.02.json",
    }
    assert "renamed by hand" in problems[exchange_file("0" * 64, 1)]
    unreadable = problems[exchange_file("1" * 64, 1)]
    assert unreadable.startswith("unreadable: ") and "memory://" not in unreadable
    assert "interrupted write" in warnings[f".{sound.key}.json.x1y2.tmp"], "a warning only"
    assert "not a name tapeproxy reads" in problems[f"{sound.key}.02.json"]


def test_rekey_moves_recordings_within_the_store_and_verify_then_passes(
    memory: MemoryStore,
) -> None:
    store: CassetteStore = memory
    for seq, run_id in enumerate(["1", "2"]):
        store.write("trip", recording({"model": "m", "messages": HI, "run_id": run_id}, seq))
    ignoring_run_id = build_rules(DEFAULTS, "openai", ["openai:body:run_id"])

    def rules_for(upstream: str) -> MatchRules:
        return ignoring_run_id

    assert verify(store, "trip", rules_for).problems, "due for a rekey"
    report = rekey(store, "trip", rules_for)
    assert len(report.moved) == 2 and report.merged == 1
    key = recording({"model": "m", "messages": HI}, 0, rules=ignoring_run_id).key
    assert store.names("trip") == [exchange_file(key, 2), exchange_file(key, 1)]
    answers = [store.read("trip", key, n).response.body for n in (1, 2)]
    assert answers == [{"json": {"id": "answer-0"}}, {"json": {"id": "answer-1"}}]
    assert verify(store, "trip", rules_for).problems == []
    assert store.cassettes() == ["trip"] and store.exists()


def test_prune_names_a_run_started_under_another_offset_by_its_time_in_utc(
    memory: MemoryStore,
) -> None:
    """The note's `started` may carry any offset (it is read as an aware time): prune says the
    instant in UTC, as its wording claims, not the local clock labelled UTC."""
    kept = recording({"model": "m", "messages": HI}, 0)
    memory.write("c", kept)
    started = datetime(2026, 11, 27, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    name = exchange_file(kept.key, 1)
    note = LastRun(used=[name], mode=Mode.REPLAY, started=started, served=1)
    memory.write_last_run("c", note)
    report = prune(memory, "c", dry_run=True)
    assert "started 2026-11-27 12:00:00 UTC" in report.run, report.run
    assert report.started == "2026-11-27T12:00:00+00:00"
