"""Attacks on the write-ahead journal (store/journal.py): real files, a crash simulated as
tests/unit/test_journal.py does (the halves' fds closed, no thread), a power cut by taking
away what was never synced."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtape.models import dump_exchange
from llmtape.store import journal as journal_module
from llmtape.store.fs import FileStore
from llmtape.store.journal import MAX_ENTRY, recover
from tests.unit.test_journal import crash, journaling, make_exchange


@pytest.fixture(autouse=True)
def slow_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries stay journaled for the length of a test: it decides when a checkpoint comes."""
    monkeypatch.setattr(journal_module, "CHECKPOINT_S", 3600.0)


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "lib")
    assert store.open() == []
    return store


def test_a_file_rewritten_the_usual_way_is_not_undone_by_its_older_journal_entry(
    store: FileStore,
) -> None:
    """A re-record of a journaled file that is too large for the journal (or comes in
    pieces) is written and synced on its own: the older journaled bytes must not come back
    over it."""
    journal = journaling(store)
    small = make_exchange("v1", key_of="same")
    store.write("trip", small)  # journaled
    path = store.path("trip", small.key, 1)
    large = make_exchange("x" * MAX_ENTRY, key_of="same")
    assert store.write("trip", large)  # too large: synced on its own, durable at once
    pieces = make_exchange("v3", key_of="other")
    store.write("trip", pieces)
    other = store.path("trip", pieces.key, 1)
    final = dump_exchange(make_exchange("v4 in pieces", key_of="other"))
    store.write_pieces("trip", pieces.key, 1, [final[:10], final[10:]])  # a spooled answer
    crash(journal)  # the synced files survive any crash
    recover(store.root)
    assert path.read_bytes() == dump_exchange(large), "the newer, synced file stays"
    assert other.read_bytes() == final
