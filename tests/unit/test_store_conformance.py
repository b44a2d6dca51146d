"""One suite for every backend of the store table (BACKENDS), through the CassetteStore
protocol alone: what the server and the cassette tools rely on, whatever keeps the bytes.
A new backend adds its row to LIBRARIES (where a test library of it is made) and passes
these tests unchanged; what only one backend has (temp files, folders, fsync) is tested in
that backend's own test file (tests/unit/test_store.py for the folder backend)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tapeproxy.errors import BadCassetteName, CassetteCorrupt, ConfigError
from tapeproxy.exchange.blobs import digest_of
from tapeproxy.exchange.model import Exchange, dump_exchange
from tapeproxy.store import BACKENDS, open_store
from tapeproxy.store.blobs import KEEP_UNUSED
from tapeproxy.store.files import FileStore
from tapeproxy.store.lastrun import LastRun
from tapeproxy.store.protocol import CassetteStore, exchange_file
from tests.fakes.memory_store import MemoryStore
from tests.support.exchanges import KEY_A, KEY_B, exchange

# scheme -> a fresh, empty library of that backend for one test, as a `--cassettes` location
# (S3: a prefix of its own on the session's SeaweedFS, the `s3_library` fixture).
LIBRARIES: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "file": lambda request, tmp_path: f"file://{tmp_path / 'library'}",
    "s3": lambda request, tmp_path: str(request.getfixturevalue("s3_library")),
}
# Not a backend: the tools' test double, run here to show the suite asks only the protocol.
DOUBLES = ["memory"]


@pytest.fixture(params=[*sorted(BACKENDS), *DOUBLES])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CassetteStore]:
    if request.param in DOUBLES:
        yield MemoryStore()
        return
    yield open_store(LIBRARIES[request.param](request, tmp_path))


def test_every_backend_of_the_table_has_a_library_to_be_tested_on() -> None:
    assert set(LIBRARIES) == set(BACKENDS)


def test_a_written_exchange_reads_back_equal(store: CassetteStore) -> None:
    assert store.write("suite/test_a", exchange(ordinal=3)) is True
    assert store.read("suite/test_a", KEY_A, 3) == exchange(ordinal=3)
    assert store.exists()


def test_a_write_replaces_what_is_at_its_key_and_ordinal_whole(store: CassetteStore) -> None:
    store.write("default", exchange())
    changed = exchange(text="data: bye\n\n", usage={"input_tokens": 1})
    assert store.write("default", changed) is True
    assert store.read("default", KEY_A, 1) == changed
    assert store.names("default") == [exchange_file(KEY_A, 1)], "nothing set aside is left"


def test_the_same_recording_again_is_not_written(store: CassetteStore) -> None:
    store.write("default", exchange(ms=5, seq=0))
    assert store.write("default", exchange(ms=999, seq=7)) is False
    kept = store.read("default", KEY_A, 1)
    assert kept.seq == 0 and kept.response.frames is not None
    assert kept.response.frames[1].ms == 5, "the first recording stays, timings and all"
    assert store.write("default", exchange(ms=999), fresh=True) is True, "fresh: not compared"


def test_entries_give_every_key_with_its_ordinals_ascending(store: CassetteStore) -> None:
    for key, ordinal in [(KEY_B, 10), (KEY_A, 1), (KEY_B, 2), (KEY_B, 1), (KEY_A, 3)]:
        store.write("default", exchange(key, ordinal))
    store.write("default/nested", exchange(KEY_B, 4))
    assert store.entries("default") == {KEY_A: [1, 3], KEY_B: [1, 2, 10]}
    assert store.entries("default/nested") == {KEY_B: [4]}, "a nested cassette is its own"
    names = [exchange_file(KEY_A, n) for n in (1, 3)] + [
        exchange_file(KEY_B, n) for n in (1, 2, 10)
    ]
    assert store.names("default") == sorted(names)


def test_an_exchange_written_in_pieces_reads_back(store: CassetteStore) -> None:
    data = dump_exchange(exchange(ordinal=2))
    store.write("default", exchange(ordinal=2, text="data: older\n\n"))
    store.write_pieces("default", KEY_A, 2, (data[i : i + 7] for i in range(0, len(data), 7)))
    assert store.read("default", KEY_A, 2) == exchange(ordinal=2)
    assert store.entries("default") == {KEY_A: [2]}


def test_delete_removes_one_recording_and_nothing_else(store: CassetteStore) -> None:
    store.write("default", exchange(ordinal=1))
    store.write("default", exchange(ordinal=2))
    store.delete("default", KEY_A, 1)
    assert store.entries("default") == {KEY_A: [2]}
    store.delete("default", KEY_A, 1)  # gone already: no error
    store.delete("never/recorded", KEY_A, 1)
    with pytest.raises(CassetteCorrupt):
        store.read("default", KEY_A, 1)


def test_cassettes_lists_every_cassette_holding_recordings_with_nested_names(
    store: CassetteStore,
) -> None:
    assert store.cassettes() == []
    for name in ["suite/test_b", "default", "suite/test_a", "suite", "x.derived"]:
        store.write(name, exchange())
    store.write("emptied", exchange())
    store.delete("emptied", KEY_A, 1)
    store.write_last_run("default", LastRun(used=[exchange_file(KEY_A, 1)]))
    assert store.cassettes() == ["default", "suite", "suite/test_a", "suite/test_b", "x.derived"]


def test_a_tools_report_round_trips_outside_every_cassette(store: CassetteStore) -> None:
    store.write("a", exchange())
    assert store.read_report("drift.json") is None
    store.write_report("drift.json", b'{"checked": 1}')
    store.write_report("drift.json", b'{"checked": 2}')
    assert store.read_report("drift.json") == b'{"checked": 2}'
    assert store.cassettes() == ["a"] and store.names("a") == [exchange_file(KEY_A, 1)]
    with pytest.raises(ValueError):
        store.write_report("../a/x.json", b"{}")


def test_the_last_run_note_round_trips_outside_the_cassette(store: CassetteStore) -> None:
    store.write("a/b", exchange())
    assert store.read_last_run("a/b") is None
    store.write_last_run("a/b", None)  # none there: nothing made, no error
    note = LastRun(used=[exchange_file(KEY_A, 1)], unused=[exchange_file(KEY_B, 1)])
    store.write_last_run("a/b", note)
    assert store.read_last_run("a/b") == note
    assert store.read_last_run("a") is None and store.read_last_run("a.b") is None
    assert store.names("a/b") == [exchange_file(KEY_A, 1)], "the note is not in the cassette"
    assert store.cassettes() == ["a/b"]
    store.write_last_run("a/b", note.model_copy(update={"unused": []}))
    assert store.read_last_run("a/b") == LastRun(used=[exchange_file(KEY_A, 1)])
    store.write_last_run("a/b", None)
    assert store.read_last_run("a/b") is None


def test_a_missing_cassette_is_empty_and_its_recordings_unreadable(store: CassetteStore) -> None:
    assert store.entries("never/recorded") == {}
    assert store.names("never/recorded") == []
    assert store.read_last_run("never/recorded") is None
    with pytest.raises(CassetteCorrupt) as caught:
        store.read("never/recorded", KEY_A, 1)
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b'{"schema_version": 0}',
        b"[]",
        b'{"schema_version": 1, "key": 1}',
        b'{"schema_version": 1, "key": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["not-json", "empty", "bad-version", "not-an-object", "schema-errors", "too-deep"],
)
def test_a_corrupt_exchange_is_cassette_corrupt_in_one_line(
    store: CassetteStore, content: bytes
) -> None:
    store.write_pieces("suite/a", KEY_A, 1, [content])
    assert store.entries("suite/a") == {KEY_A: [1]}, "listed: no recording is read to list"
    with pytest.raises(CassetteCorrupt) as caught:
        store.read("suite/a", KEY_A, 1)
    message = caught.value.message
    assert "\n" not in message, message
    assert store.where("suite/a") in message and "tapeproxy verify suite/a" in message
    assert store.write("suite/a", exchange()) is True, "a corrupt file is written over"
    assert store.read("suite/a", KEY_A, 1) == exchange()


def test_a_recording_of_a_newer_tapeproxy_says_in_one_line_to_upgrade(
    store: CassetteStore,
) -> None:
    store.write_pieces("default", KEY_A, 1, [b'{"schema_version": 99, "key": "x"}'])
    with pytest.raises(CassetteCorrupt) as caught:
        store.read("default", KEY_A, 1)
    assert "\n" not in caught.value.message and "upgrade tapeproxy" in caught.value.message


@pytest.mark.parametrize("name", ["../x", "/abs", "a//b", ".hidden", "a/../b", ""])
def test_every_method_refuses_a_name_outside_the_library(store: CassetteStore, name: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.write(name, exchange()),
        lambda: store.write_pieces(name, KEY_A, 1, [b"{}"]),
        lambda: store.read(name, KEY_A, 1),
        lambda: store.entries(name),
        lambda: store.names(name),
        lambda: store.delete(name, KEY_A, 1),
        lambda: store.read_last_run(name),
        lambda: store.write_last_run(name, LastRun()),
        lambda: store.where(name),
        lambda: store.unwritable(name),
    ]
    for call in calls:
        with pytest.raises(BadCassetteName):
            call()
    assert store.cassettes() == []


def test_create_writes_only_where_nothing_is(store: CassetteStore) -> None:
    assert store.create("default", exchange(ordinal=2)) is True
    assert store.read("default", KEY_A, 2) == exchange(ordinal=2)
    other = exchange(ordinal=2, text="data: another server's\n\n")
    assert store.create("default", other) is False, "another writer got there first"
    assert store.read("default", KEY_A, 2) == exchange(ordinal=2), "the first one stays whole"
    assert store.names("default") == [exchange_file(KEY_A, 2)], "nothing set aside is left"


def test_pieces_created_go_only_where_nothing_is(store: CassetteStore) -> None:
    data = dump_exchange(exchange(ordinal=3))
    pieces = [data[i : i + 7] for i in range(0, len(data), 7)]
    assert store.write_pieces("default", KEY_A, 3, iter(pieces), create=True) is True
    other = dump_exchange(exchange(ordinal=3, text="data: another server's\n\n"))
    assert store.write_pieces("default", KEY_A, 3, [other], create=True) is False
    assert store.read("default", KEY_A, 3) == exchange(ordinal=3), "the first one stays whole"
    assert store.names("default") == [exchange_file(KEY_A, 3)], "nothing set aside is left"
    assert store.write_pieces("default", KEY_A, 3, [other]) is True, "without create: replaced"


def test_where_names_the_library_and_each_cassette_apart(store: CassetteStore) -> None:
    places = {store.where(), store.where("a"), store.where("a/b"), store.where("b")}
    assert len(places) == 4 and "a/b" in store.where("a/b")


def test_a_writable_library_says_so_and_a_sweep_keeps_every_recording(
    store: CassetteStore,
) -> None:
    assert store.unwritable("default") is None
    assert store.cassettes() == [] and store.names("default") == [], "the check leaves nothing"
    store.write("default", exchange())
    assert store.unwritable("default") is None
    assert store.sweep() == 0 and store.sweep("default") == 0
    assert store.entries("default") == {KEY_A: [1]}


@pytest.mark.parametrize("given", ["{root}", "file://{root}"])
def test_open_store_opens_a_folder_or_a_file_url(tmp_path: Path, given: str) -> None:
    open_store(tmp_path).write("default", exchange())
    opened = open_store(given.format(root=tmp_path))
    assert opened.where() == str(tmp_path) and opened.entries("default") == {KEY_A: [1]}


@pytest.mark.parametrize("given", ["ftp://host/cassettes", "nosuch://x", "memory://"])
def test_an_unknown_scheme_is_one_line_naming_the_known_ones(given: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(given)
    message = caught.value.message
    assert "\n" not in message and given in message
    assert all(f"{scheme}://" in message for scheme in BACKENDS)


# ------------------------------------------------------------------------------ blobs

IMAGE = "iVBORw0KGgo" + "A" * (300 * 1024)  # a base64 image well past BLOB_MIN


def with_body(key: str, ordinal: int, body: dict[str, Any]) -> Exchange:
    """An exchange whose request carries `body` as JSON, and whose answer echoes it."""
    base = exchange(key, ordinal)
    return base.model_copy(
        update={
            "request": base.request.model_copy(update={"body": {"json": body}}),
            "response": base.response.model_copy(
                update={"frames": None, "dialect": None, "body": {"json": body, "style": "compact"}}
            ),
        }
    )


def test_a_large_string_is_stored_once_as_a_blob_and_reads_back_whole(
    store: CassetteStore,
) -> None:
    turns = [with_body(key, 1, {"image": IMAGE, "turn": n}) for n, key in enumerate([KEY_A, KEY_B])]
    for one in turns:
        assert store.write("chat", one) is True
    assert store.blobs("chat") == [digest_of(IMAGE.encode())], "one blob for both, each side"
    for one in turns:
        assert store.read("chat", one.key, 1).record() == one.record()
    assert store.write("chat", turns[0]) is False, "the same recording again: not written"
    assert store.read_blob("chat", store.blobs("chat")[0]) == IMAGE.encode()


def test_a_blob_just_put_is_young_so_no_prune_deletes_it_yet(store: CassetteStore) -> None:
    store.write("chat", with_body(KEY_A, 1, {"image": IMAGE}))
    [digest] = store.blobs("chat")
    age = store.blob_age("chat", digest)
    assert age is not None and age < KEEP_UNUSED / 2
    assert store.blob_age("chat", "0" * 64) is None


def test_a_body_shaped_like_a_blob_reference_round_trips(store: CassetteStore) -> None:
    digest = "0" * 64
    body = {
        "a": {"$blob": f"sha256:{digest}", "size": 3},
        "b": {"$blob-literal": {"$blob": "x"}},
        "big": IMAGE,
    }
    store.write("shapes", with_body(KEY_A, 1, body))
    assert store.read("shapes", KEY_A, 1).request.body == {"json": body}
    store.write("small", with_body(KEY_A, 1, {"a": body["a"]}))  # no blob: a version-1 file
    assert store.read("small", KEY_A, 1).request.body == {"json": {"a": body["a"]}}


def test_a_blob_that_was_changed_or_lost_makes_its_recording_unreadable(
    store: CassetteStore,
) -> None:
    store.write("chat", with_body(KEY_A, 1, {"image": IMAGE}))
    [digest] = store.blobs("chat")
    store.delete_blob("chat", digest)
    assert store.blobs("chat") == []
    with pytest.raises(CassetteCorrupt, match=f"blob {digest} is missing"):
        store.read("chat", KEY_A, 1)
    assert store.write("chat", with_body(KEY_A, 1, {"image": IMAGE})) is True, "written again"
    assert store.read("chat", KEY_A, 1).request.body == {"json": {"image": IMAGE}}


def test_stamps_follow_each_file_and_state_is_kept_outside_every_cassette(
    store: CassetteStore,
) -> None:
    store.write("c", exchange())
    if isinstance(store, FileStore):  # one changed in the last seconds is never trusted
        assert store.stamps("c") != store.stamps("c"), "a racy file: a stamp never seen again"
        past = time.time_ns() - 60 * 10**9
        os.utime(store._root / "c" / exchange_file(KEY_A, 1), ns=(past, past))
    first = store.stamps("c")
    assert list(first) == [exchange_file(KEY_A, 1)]
    assert store.stamps("c") == first, "nothing changed: the same stamps"
    store.write("c", exchange(text="data: other\n\n"))
    assert store.stamps("c") != first, "a file rewritten has another stamp"
    assert store.stamps("nothing") == {}
    store.write_state("summaries/x.json", b"kept")
    assert store.read_state("summaries/x.json") == b"kept"
    assert store.read_state("summaries/none.json") is None
    assert store.cassettes() == ["c"] and store.names("c") == [exchange_file(KEY_A, 1)]
