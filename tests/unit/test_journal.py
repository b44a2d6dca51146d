"""The write-ahead journal of a recording server (store/journal.py), on real files: what it
journals comes back after a crash that lost the files; what it voided or synced does not."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tapeproxy.models import Exchange, dump_exchange
from tapeproxy.store import journal as journal_module
from tapeproxy.store.base import exchange_file
from tapeproxy.store.fs import FileStore
from tapeproxy.store.journal import JOURNAL_DIR, MAX_ENTRY, Journal, entries, recover
from tests.support import wait_for
from tests.unit.test_store import exchange


def make_exchange(content: str, key_of: str | None = None) -> Exchange:
    """An exchange whose answer says `content`, keyed by `key_of` (else by `content`)."""
    key = hashlib.sha256((key_of or content).encode()).hexdigest()
    return exchange(key=key, text=f"data: {content}\n\n")


@pytest.fixture
def slow_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries stay journaled for the length of a test: it decides when a checkpoint comes."""
    monkeypatch.setattr(journal_module, "CHECKPOINT_S", 3600.0)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    store = FileStore(tmp_path / "lib")
    assert store.open() == []
    yield store
    store.close()


def journaling(store: FileStore) -> Journal:
    """The store's journal, its halves made (they are made in its thread once a write came)."""
    journal = store._journal
    assert journal is not None
    store.write("warm", make_exchange(content="warm-up"))  # asks for the halves
    wait_for(lambda: bool(journal._halves))
    return journal


def crash(journal: Journal) -> None:
    """What a SIGKILL leaves: the halves on disk as they are, their locks gone, no thread."""
    with journal._cond:  # its next round only ends the thread: no halves, closing
        halves, journal._halves, journal._closing = journal._halves, [], True
        journal._thread = None
        journal._cond.notify_all()
    for half in halves:
        os.close(half.fd)


def power_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a power cut the next server runs in another boot of the machine: what the
    crashed one journaled is written back (a kill in this boot only drops its journal)."""
    monkeypatch.setattr(journal_module, "BOOT", bytes(range(16)))


def half_entries(root: Path) -> list[tuple[str, bytes | None]]:
    found: list[tuple[str, bytes | None]] = []
    for half in sorted((root / JOURNAL_DIR).glob("journal-*")):
        found += entries(half.read_bytes())[1]
    return found


@pytest.mark.usefixtures("slow_checkpoints")
def test_files_lost_in_a_crash_are_written_back_from_the_journal(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = journaling(store)
    first = make_exchange(content="one")
    second = make_exchange(content="two")
    assert store.write("trip", first) and store.write("trip/inner", second)
    path_one = store.path("trip", first.key, 1)
    path_two = store.path("trip/inner", second.key, 1)
    assert path_one.read_bytes() == dump_exchange(first), "in place at once, unsynced"
    crash(journal)
    path_one.unlink()  # a power cut took the unsynced rename
    path_two.write_bytes(b'{"sche')  # and left this one torn
    power_cut(monkeypatch)
    restored = recover(store.root)
    assert sorted(restored) == sorted([path_one, path_two])
    assert path_one.read_bytes() == dump_exchange(first)
    assert path_two.read_bytes() == dump_exchange(second)
    assert not (store.root / JOURNAL_DIR).exists(), "the journal is gone once written back"


@pytest.mark.usefixtures("slow_checkpoints")
def test_intact_files_are_left_alone_and_a_deleted_one_stays_deleted(store: FileStore) -> None:
    journal = journaling(store)
    kept, dropped = make_exchange(content="kept"), make_exchange(content="dropped")
    store.write("trip", kept)
    store.write("trip", dropped)
    before = os.stat(store.path("trip", kept.key, 1)).st_mtime_ns
    store.delete("trip", dropped.key, 1)  # a run that superseded it
    crash(journal)
    assert recover(store.root) == []
    assert os.stat(store.path("trip", kept.key, 1)).st_mtime_ns == before
    assert not store.path("trip", dropped.key, 1).exists()


@pytest.mark.usefixtures("slow_checkpoints")
def test_the_newest_entry_of_a_file_wins_and_a_torn_tail_ends_the_journal(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = journaling(store)
    old, new = make_exchange("v1", key_of="same"), make_exchange("v2", key_of="same")
    store.write("trip", old)
    store.write("trip", new)  # the same file again (a re-record of ordinal 1)
    after = make_exchange(content="after the tear")
    store.write("trip", after)
    crash(journal)
    half = next((store.root / JOURNAL_DIR).glob("journal-*-0"))
    raw = bytearray(half.read_bytes())
    tail = raw.rindex(b"after the tear")
    raw[tail] ^= 0xFF  # the last entry was written but never synced: torn
    half.write_bytes(bytes(raw))
    for path in store.root.rglob("*.json"):
        path.unlink()
    power_cut(monkeypatch)
    recover(store.root)
    assert store.path("trip", new.key, 1).read_bytes() == dump_exchange(new)
    assert not store.path("trip", after.key, 1).exists(), "a torn entry is not written back"


def test_a_checkpoint_empties_the_journal_and_close_leaves_no_trace(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "lib")
    store.open()
    journal = journaling(store)
    exchange = make_exchange(content="synced")
    store.write("trip", exchange)
    assert any(data == dump_exchange(exchange) for _, data in half_entries(store.root))
    with journal._cond:  # what CHECKPOINT_S would bring, now
        journal._hurry = True
        journal._cond.notify_all()
    wait_for(lambda: all(h.end == journal_module._HEAD.size for h in journal._halves))
    assert half_entries(store.root) == []
    store.close()
    assert sorted(p.name for p in store.root.iterdir()) == ["trip", "warm"]
    assert store.path("trip", exchange.key, 1).read_bytes() == dump_exchange(exchange)


def test_a_live_servers_journal_is_left_alone(tmp_path: Path) -> None:
    live = FileStore(tmp_path / "lib")
    live.open()
    try:
        journaling(live)
        assert recover(live.root) == []  # a second server starting on the same library
        assert len(list((live.root / JOURNAL_DIR).glob("journal-*"))) == 2
    finally:
        live.close()


def test_a_file_too_large_for_the_journal_is_synced_on_its_own(store: FileStore) -> None:
    journal = journaling(store)
    path = store.root / "trip" / exchange_file("a" * 64, 1)
    assert not journal.write(path, b"x" * MAX_ENTRY)
    assert not path.exists(), "nothing done: the caller writes it the usual way"
    assert journal.write(path, b"{}")
    assert not journal.write(Path("/elsewhere") / path.name, b"{}"), "outside the library"


def test_recovery_writes_back_only_exchange_files_of_cassettes(tmp_path: Path) -> None:
    """A journal is tapeproxy's own file, but a damaged one must not write outside a cassette."""
    root = tmp_path / "lib"
    folder = root / JOURNAL_DIR
    folder.mkdir(parents=True)
    half = journal_module._HEAD.pack(journal_module.HEAD_MAGIC, 1, journal_module.NO_BOOT)
    for rel in ["../escape.json", "trip/notes.md", f".hidden/{'a' * 64}.json"]:
        data = b"{}"
        body = rel.encode() + data
        crc = zlib.crc32(data, zlib.crc32(rel.encode(), 1))
        size = journal_module._ENTRY.size + len(body)
        half += journal_module._ENTRY.pack(journal_module.ENTRY, 1, size, crc, len(rel)) + body
    (folder / "journal-1-0").write_bytes(half)
    assert len(entries(half)[1]) == 3
    assert recover(root) == []
    assert not (tmp_path / "escape.json").exists()
    assert not (root / "trip").exists()


def test_a_cassette_on_another_filesystem_is_synced_on_its_own(
    store: FileStore, tmp_path: Path
) -> None:
    """The checkpoint's syncfs syncs the journal's filesystem only: a cassette folder that
    links to another disk must not have its files dropped from the journal unsynced."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (/dev/shm) here")
    journal = journaling(store)
    with tempfile.TemporaryDirectory(dir=shm) as elsewhere:
        (store.root / "linked").symlink_to(elsewhere)
        path = store.root / "linked" / exchange_file("b" * 64, 1)
        assert not journal.write(path, b"{}"), "written the usual way"
        assert journal.write(store.root / "trip" / exchange_file("b" * 64, 1), b"{}")


def test_without_flock_and_pwrite_every_file_is_synced_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has neither: no journal is made, recovery has nothing to do, writes work."""
    monkeypatch.setattr(journal_module, "SUPPORTED", False)
    store = FileStore(tmp_path / "lib")
    assert store.open() == []
    exchange = make_exchange("synced alone")
    assert store.write("trip", exchange)
    store.close()
    assert store.path("trip", exchange.key, 1).read_bytes() == dump_exchange(exchange)
    assert not (store.root / JOURNAL_DIR).exists()
    assert recover(store.root) == []


def test_a_journal_that_cannot_be_made_is_given_up_once_not_retried_in_a_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its folder's name is taken by a file (or the folder belongs to another user): each
    exchange is then synced on its own, and the journal's thread says so once. It used to
    retry at once, for ever: a warning a pass, the GIL held, the server's loop starved."""
    library = tmp_path / "lib"
    library.mkdir()
    (library / JOURNAL_DIR).write_text("not a folder")
    store = FileStore(library)
    store.open()
    try:
        with caplog.at_level("WARNING", logger="tapeproxy"):
            for n in range(5):
                store.write("c", make_exchange(content=f"answer {n}"))
            time.sleep(0.5)  # what the thread does meanwhile
        assert len(store.entries("c")) == 5
        told = [r for r in caplog.records if "journal could not be made" in r.getMessage()]
        assert len(told) == 1, f"{len(told)} warnings"
    finally:
        store.close()
