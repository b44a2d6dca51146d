"""`rekey`: every recording reaches its key under today's rules, repeats keep their order, and a
crash at any point leaves every recorded answer on disk."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.engine.keying import RequestParts, request_key, request_parts
from tapeproxy.engine.rules import MatchRules, build_rules
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.model import Exchange, StoredRequest, StoredResponse
from tapeproxy.providers import BUILTIN
from tapeproxy.store.files import FileStore
from tapeproxy.store.protocol import exchange_file
from tapeproxy.tools.rekey import Place, rekey, write_steps

DEFAULTS = BUILTIN["openai"].rules
HI = [{"role": "user", "content": "hi"}]


def recording(
    body: Any,
    seq: int,
    rules: MatchRules = DEFAULTS,
    ordinal: int = 1,
    key: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Exchange:
    """An exchange as the server writes it; its answer's id is `answer-<seq>`."""
    parts = RequestParts(
        "POST", "openai", "/v1/chat/completions", (), headers, Payload("json", body)
    )
    return Exchange(
        key=key or request_key(parts, rules),
        ordinal=ordinal,
        seq=seq,
        rules=rules.fingerprint(),
        request=StoredRequest.model_validate(parts.to_dict()),
        response=StoredResponse(status=200, body={"json": {"id": f"answer-{seq}"}}),
    )


def answers(root: Path) -> list[str]:
    """The answer ids of every exchange file of the `default` cassette, with repeats."""
    return sorted(
        json.loads(p.read_text())["response"]["body"]["json"]["id"]
        for p in (root / "default").glob("*.json")
    )


def by_file(root: Path) -> dict[str, str]:
    return {
        p.name: json.loads(p.read_text())["response"]["body"]["json"]["id"]
        for p in (root / "default").glob("*.json")
    }


class CrashingStore(FileStore):
    """A real store that dies (like a killed process) after `writes` writes."""

    def __init__(self, root: Path, writes: int) -> None:
        super().__init__(root)
        self.writes = writes

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        if self.writes == 0:
            raise KeyboardInterrupt("killed")
        self.writes -= 1
        return super().write(cassette, exchange)


def run_id_rules(upstream: str) -> MatchRules:
    return build_rules(DEFAULTS, upstream, ["openai:body:run_id"])


def chain_library(root: Path) -> None:
    """A's new key is C's old file, so a careless rekey writes A over C before C moved."""
    store = FileStore(root)
    store.write("default", recording({"model": "m", "messages": HI, "run_id": "1"}, seq=0))
    store.write("default", recording({"model": "m", "messages": HI, "temperature": 0.5}, seq=1))
    store.write("default", recording({"model": "m", "messages": HI}, seq=2))


def cycle_library(root: Path) -> None:
    """Two files whose contents are each at the other's key: a rekey is a swap."""
    store = FileStore(root)
    one = recording({"model": "m", "messages": HI}, seq=0)
    two = recording({"model": "m", "messages": HI, "n": 2}, seq=1)
    store.write("default", one.model_copy(update={"key": two.key}))
    store.write("default", two.model_copy(update={"key": one.key}))


@pytest.mark.parametrize(
    ("make", "rules_for", "writes"),
    [
        (chain_library, run_id_rules, 3),
        (cycle_library, lambda upstream: DEFAULTS, 3),  # the spare, then the two moves
    ],
)
def test_a_crash_at_any_write_of_rekey_loses_no_recording(
    tmp_path: Path, make: Any, rules_for: Any, writes: int
) -> None:
    for crash_after in range(writes):
        root = tmp_path / str(crash_after)
        make(root)
        before = set(answers(root))
        with pytest.raises(KeyboardInterrupt):
            rekey(CrashingStore(root, crash_after), "default", rules_for)
        assert set(answers(root)) == before, f"lost a recording after {crash_after} write(s)"
    root = tmp_path / "whole"
    make(root)
    expected = sorted(answers(root))
    report = rekey(FileStore(root), "default", rules_for)
    assert answers(root) == expected, "no duplicate is left once rekey finishes"
    store = FileStore(root)
    for key, ordinals in store.entries("default").items():
        for ordinal in ordinals:
            exchange = store.read("default", key, ordinal)
            parts = RequestParts.from_dict(exchange.request.model_dump())
            assert request_key(parts, rules_for("openai")) == key
    assert len(report.moved) == 3 if make is chain_library else 2


def test_the_chain_keeps_recorded_order_when_two_keys_merge(tmp_path: Path) -> None:
    chain_library(tmp_path)
    report = rekey(FileStore(tmp_path), "default", run_id_rules)
    key = request_key(
        RequestParts.from_dict(recording({"model": "m", "messages": HI}, 0).request.model_dump()),
        run_id_rules("openai"),
    )
    files = by_file(tmp_path)
    assert files[exchange_file(key, 1)] == "answer-0" and files[exchange_file(key, 2)] == "answer-2"
    assert report.merged == 1


def test_rekey_with_unchanged_rules_keeps_repeats_recorded_by_later_runs_in_place(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    body = {"model": "m", "input": "K"}
    # run 1 recorded K third (seq 2); an auto-mode run 2 added two repeats (seq 0 and 1)
    for ordinal, seq in ((1, 2), (2, 0), (3, 1)):
        store.write("default", recording(body, seq=seq, ordinal=ordinal))
    store.write("default", recording({"model": "m", "input": "x"}, seq=0))
    before = {p.name: p.read_bytes() for p in (tmp_path / "default").iterdir()}
    report = rekey(store, "default", lambda upstream: DEFAULTS)
    assert report.moved == [] and report.merged == 0 and report.unchanged == 4
    assert {p.name: p.read_bytes() for p in (tmp_path / "default").iterdir()} == before


def test_merged_counts_recordings_that_now_repeat_another_request_not_old_repeats(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    for ordinal, seq in ((1, 0), (2, 5)):
        store.write(
            "default",
            recording({"model": "m", "messages": HI, "run_id": "a"}, seq, ordinal=ordinal),
        )
    store.write("default", recording({"model": "m", "messages": HI, "run_id": "b"}, 3))
    for ordinal in (1, 2, 3):
        store.write(
            "default", recording({"model": "m", "messages": []}, 10 + ordinal, ordinal=ordinal)
        )
    report = rekey(store, "default", run_id_rules)
    assert report.merged == 1
    merged = [
        v for k, v in sorted(by_file(tmp_path).items()) if v in {"answer-0", "answer-3", "answer-5"}
    ]
    assert sorted(merged) == ["answer-0", "answer-3", "answer-5"]
    key = request_key(
        RequestParts(
            "POST",
            "openai",
            "/v1/chat/completions",
            (),
            (),
            Payload("json", {"model": "m", "messages": HI}),
        ),
        run_id_rules("openai"),
    )
    files = by_file(tmp_path)
    assert [files[exchange_file(key, n)] for n in (1, 2, 3)] == ["answer-0", "answer-3", "answer-5"]


def test_rekey_names_recordings_that_lack_a_header_keyed_on_since(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    tenant = build_rules(DEFAULTS, "openai", ["openai:key-header:x-tenant"])
    store.write("default", recording({"model": "m", "messages": HI}, 0))
    store.write(
        "default",
        recording({"model": "m", "messages": []}, 1, rules=tenant, headers=(("x-tenant", "acme"),)),
    )
    report = rekey(store, "default", lambda upstream: tenant)
    [item] = report.unstored
    assert item["headers"] == ["x-tenant"]
    kept = json.loads((tmp_path / "default" / item["file"]).read_text())
    assert kept["rules"] == DEFAULTS.fingerprint(), "still marked as made under other rules"
    again = rekey(store, "default", lambda upstream: tenant)
    assert again.unstored == report.unstored and again.moved == []


# --- write order, as a property -----------------------------------------------------------


def content(seq: int, place: Place) -> Exchange:
    return recording({"n": seq}, seq=seq, key=place[0], ordinal=place[1])


@st.composite
def move_sets(draw: st.DrawFn) -> tuple[set[Place], list[tuple[Exchange, Exchange]]]:
    """Files on disk, and a one-to-one move of some of them to places old or new."""
    keys = ["a" * 64, "b" * 64, "c" * 64]
    places = sorted(
        draw(st.sets(st.tuples(st.sampled_from(keys), st.integers(1, 4)), min_size=1, max_size=8))
    )
    movers = draw(st.lists(st.sampled_from(places), unique=True))
    staying = set(places) - set(movers)
    free = sorted({(k, o) for k in keys for o in range(1, 6)} - staying)
    targets = draw(st.permutations(free))[: len(movers)]
    return set(places), [
        (content(places.index(src), src), content(places.index(src), dst))
        for src, dst in zip(movers, targets, strict=True)
    ]


@given(case=move_sets())
def test_write_steps_never_overwrite_or_delete_the_last_copy_of_a_recording(
    case: tuple[set[Place], list[tuple[Exchange, Exchange]]],
) -> None:
    places, moves = case
    disk = {place: n for n, place in enumerate(sorted(places))}
    everything = set(disk.values())
    for step in write_steps(moves, set(places)):
        if isinstance(step, Exchange):
            disk[(step.key, step.ordinal)] = step.seq
        else:
            del disk[step]
        assert set(disk.values()) == everything
    expected = {place: n for n, place in enumerate(sorted(places))}
    for old, _ in moves:
        del expected[(old.key, old.ordinal)]
    expected.update({(new.key, new.ordinal): new.seq for _, new in moves})
    assert disk == expected


def test_rekey_masks_a_credential_an_older_tapeproxy_stored_and_keys_it_as_served_today(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    stored = recording({"api_key": "tvly-OLDSECRET", "query": "hotels"}, 0)
    old_key = hashlib.sha256(b"keyed with the secret in it").hexdigest()
    store.write("default", stored.model_copy(update={"key": old_key}))
    report = rekey(store, "default", lambda upstream: DEFAULTS)
    [(_, new_file)] = report.moved
    assert b"OLDSECRET" not in (tmp_path / "default" / new_file).read_bytes()
    today = request_parts(
        "POST",
        "openai",
        "/v1/chat/completions",
        "",
        {},
        b'{"api_key": "tvly-MINE", "query": "hotels"}',
        DEFAULTS,
    )
    assert new_file == exchange_file(request_key(today, DEFAULTS), 1)
