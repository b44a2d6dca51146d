"""Attacks on the write-ahead journal (store/journal.py): real files, a crash simulated as
tests/unit/test_journal.py does (the halves' fds closed, no thread), a power cut by taking
away what was never synced."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tapeproxy.cli import main as cli_main
from tapeproxy.models import dump_exchange
from tapeproxy.store import journal as journal_module
from tapeproxy.store.durable import GroupSync
from tapeproxy.store.fs import FileStore
from tapeproxy.store.journal import MAX_ENTRY, Journal, recover
from tests.support import SECRET_OPENAI as SECRET
from tests.support import wait_for
from tests.unit.test_journal import crash, journaling, make_exchange, power_cut


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
    store: FileStore, monkeypatch: pytest.MonkeyPatch
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
    crash(journal)
    power_cut(monkeypatch)  # the synced files survive it
    recover(store.root)
    assert path.read_bytes() == dump_exchange(large), "the newer, synced file stays"
    assert other.read_bytes() == final


def holding(folder: Path, text: str) -> list[Path]:
    return [path for path in folder.rglob("*") if text.encode() in path.read_bytes()]


def test_a_file_changed_after_a_kill_is_not_undone_by_the_next_start(store: FileStore) -> None:
    """A kill is no power cut: the kernel still writes every file the killed server put in
    place. What the user did to the library before the next start (`tapeproxy redact` to
    scrub a secret, deleting a cassette to record it afresh) must stay done."""
    journal = journaling(store)
    leaky = make_exchange(f"key {SECRET}", key_of="leaky")
    dropped = make_exchange("dropped")
    store.write("trip", leaky)
    store.write("again", dropped)
    crash(journal)
    result = CliRunner().invoke(
        cli_main.app, ["redact", "trip", "--pattern", SECRET, "--cassettes", str(store.root)]
    )
    assert result.exit_code == 0, result.output
    assert not holding(store.root / "trip", SECRET)
    shutil.rmtree(store.root / "again")  # to record it afresh
    recover(store.root)  # the next `tapeproxy serve`
    assert not holding(store.root / "trip", SECRET), "the secret came back"
    assert not (store.root / "again").exists(), "a deleted cassette came back"


def test_a_redact_after_a_power_cut_is_not_undone_by_the_next_start(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a power cut the journal is written back; a tool that rewrites the library
    first writes it back itself, so the next start has nothing older to put back."""
    journal = journaling(store)
    store.write("trip", make_exchange(f"key {SECRET}", key_of="leaky"))
    crash(journal)
    power_cut(monkeypatch)
    result = CliRunner().invoke(
        cli_main.app, ["redact", "trip", "--pattern", SECRET, "--cassettes", str(store.root)]
    )
    assert result.exit_code == 0, result.output
    assert not holding(store.root / "trip", SECRET)
    assert recover(store.root) == []  # the next `tapeproxy serve`
    assert not holding(store.root / "trip", SECRET), "the secret came back"


def test_two_servers_in_one_process_keep_their_own_journals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers of one process (the pytest plugin's, ProxyServer; or two containers whose
    servers both run as pid 1) on one library: one must not take the other's halves."""
    first, second = FileStore(tmp_path / "lib"), FileStore(tmp_path / "lib")
    first.open()
    second.open()
    journal = journaling(first)
    second.write("other", make_exchange("the second's warm-up"))  # asks for its halves
    assert second._journal is not None
    wait_for(lambda: bool(second._journal and second._journal._halves))
    kept = make_exchange("kept by the first")
    first.write("trip", kept)
    second.close()  # a clean stop of the other one
    crash(journal)
    path = first.path("trip", kept.key, 1)
    path.unlink()  # the power cut took the unsynced file
    power_cut(monkeypatch)
    assert path in recover(first.root)
    assert path.read_bytes() == dump_exchange(kept)


def failing_syncs(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The disk fails the next `times` syncs of the library (EIO), as a dying disk does;
    the list counts the syncs asked for."""
    real, asked = journal_module.sync_filesystem, []

    def sync_filesystem(fd: int) -> None:
        asked.append(fd)
        if len(asked) <= times:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(journal_module, "sync_filesystem", sync_filesystem)
    return asked


def checkpoint(journal: Journal, rounds: list[int]) -> None:
    """What CHECKPOINT_S brings, now: one round of the journal's thread."""
    before = len(rounds)
    with journal._cond:
        journal._hurry = True
        journal._cond.notify_all()
    wait_for(lambda: (len(rounds) > before and not journal._hurry) or journal._broken)
    time.sleep(0.05)  # the round's end, past its sync


def test_files_whose_sync_failed_are_never_dropped_from_the_journal(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed sync the kernel may have dropped the files' pages (marked clean): a
    later sync that succeeds says nothing about them. Their entries must stay."""
    journal = journaling(store)
    asked = failing_syncs(monkeypatch, times=1)
    lost = make_exchange("lost by the failed sync")
    store.write("trip", lost)
    checkpoint(journal, asked)  # its sync fails: "the next round tries again"
    store.write("trip", make_exchange("to the other half"))
    checkpoint(journal, asked)
    checkpoint(journal, asked)  # these succeed
    crash(journal)
    path = store.path("trip", lost.key, 1)
    path.unlink()  # the failed sync lost it; the power cut, its page
    power_cut(monkeypatch)
    recover(store.root)
    assert path.read_bytes() == dump_exchange(lost)


def test_after_failed_syncs_an_older_entry_never_wins_over_a_newer_one(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two failed checkpoints leave both halves full; the journal must still write back
    the newest bytes of a file (it wrote back v2 over v3: the halves' epochs say which is
    newer, and writes went on into the half with the older epoch)."""
    journal = journaling(store)
    asked = failing_syncs(monkeypatch, times=2)
    path = store.path("trip", make_exchange("v1", key_of="same").key, 1)
    store.write("trip", make_exchange("v1", key_of="same"))
    checkpoint(journal, asked)  # fails
    store.write("trip", make_exchange("v2", key_of="same"))
    checkpoint(journal, asked)  # fails
    newest = make_exchange("v3", key_of="same")
    store.write("trip", newest)
    crash(journal)
    power_cut(monkeypatch)  # v3 is on disk (the files survived, or were synced)
    recover(store.root)
    assert path.read_bytes() == dump_exchange(newest)


def test_a_failed_group_sync_fails_every_caller_it_covered() -> None:
    """A failed fsync may have dropped the pages it could not write, and the next fsync of
    the same file succeeds without them (Linux reports an error once): a caller the failed
    run covered must get the error, not a retry's success."""
    calls: list[int] = []
    first_run_may_end = threading.Event()

    def do() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            first_run_may_end.wait(10)  # under way while two more callers come
        elif len(calls) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    group = GroupSync(do)
    results: dict[str, str] = {}

    def caller(name: str) -> None:
        try:
            group.sync()
            results[name] = "ok"
        except OSError:
            results[name] = "error"

    first = threading.Thread(target=caller, args=("first",))
    first.start()
    wait_for(lambda: len(calls) == 1)
    later = [threading.Thread(target=caller, args=(name,)) for name in ("b", "c")]
    for thread in later:
        thread.start()
    wait_for(lambda: group.asked == 3)
    first_run_may_end.set()  # the next run covers b and c, and fails
    for thread in [first, *later]:
        thread.join(10)
    assert results == {"first": "ok", "b": "error", "c": "error"}


def test_a_second_start_waits_for_a_recovery_under_way(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers starting together on a library after a power cut (pytest-xdist workers):
    the second must not record while the first is still writing back (its write-back would
    land over the new recording), nor write back the same journal again later."""
    journal = journaling(store)
    store.write("trip", make_exchange("journaled"))
    crash(journal)
    power_cut(monkeypatch)
    library = os.open(store.root, os.O_RDONLY)
    try:
        fcntl.flock(library, fcntl.LOCK_EX)  # a first server's recovery, under way
        second = threading.Thread(target=recover, args=(store.root,))
        second.start()
        second.join(0.5)
        assert second.is_alive(), "the second start waits"
    finally:
        os.close(library)
    second.join(10)
    assert not second.is_alive()
