"""Files made ahead for the journal (store/spares.py), on real files: a placed file holds its
bytes under its name and nothing else is left; where no spare can reach, nothing is done."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tapeproxy.store import spares as spares_module
from tapeproxy.store.durable import temp_name
from tapeproxy.store.fs import FileStore
from tapeproxy.store.spares import LOW, WANT, Spares
from tests.support import wait_for
from tests.unit.test_journal import journaling, make_exchange

pytestmark = pytest.mark.skipif(not spares_module.SUPPORTED, reason="no O_TMPFILE here")


@pytest.fixture
def spares(tmp_path: Path) -> Iterator[Spares]:
    folder = tmp_path / ".tapeproxy"
    folder.mkdir()
    made = Spares(folder)
    made.start()
    wait_for(lambda: made.ready == WANT)
    yield made
    made.close()


def names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def ready_spares(store: FileStore) -> Spares:
    """The spares of the store's journal (its halves made), once all are made."""
    spares = journaling(store)._spares
    assert spares is not None
    wait_for(lambda: spares.ready == WANT)
    return spares


def test_a_placed_file_holds_its_bytes_under_its_name_and_leaves_nothing_else(
    spares: Spares, tmp_path: Path
) -> None:
    cassette = tmp_path / "cassette"
    cassette.mkdir()
    assert spares.place(cassette / "a.json", b'{"a": 1}\n')
    assert (cassette / "a.json").read_bytes() == b'{"a": 1}\n'
    assert names(cassette) == ["a.json"]
    assert names(spares.folder) == []  # the spares have no names
    umask = os.umask(0)
    os.umask(umask)
    mode = stat.S_IMODE((cassette / "a.json").stat().st_mode)
    assert mode == 0o666 & ~umask  # as a plain open makes it: another user may replay it


def test_a_file_already_there_is_replaced_whole(spares: Spares, tmp_path: Path) -> None:
    target = tmp_path / "cassette" / "a.json"
    target.parent.mkdir()
    target.write_bytes(b"old bytes, longer than the new ones")
    assert spares.place(target, b"new")
    assert target.read_bytes() == b"new"
    assert names(target.parent) == ["a.json"]  # no temp name left


def test_a_temp_name_taken_is_passed_over_for_another(spares: Spares, tmp_path: Path) -> None:
    target = tmp_path / "cassette" / "a.json"
    target.parent.mkdir()
    target.write_bytes(b"old")
    pid, number = temp_name(target).rsplit(".", 2)[1].split("-")  # the next is number + 1
    taken = target.parent / f".a.json.{pid}-{int(number) + 1}.tmp"
    taken.write_bytes(b"someone else's")
    assert spares.place(target, b"new")
    assert target.read_bytes() == b"new"
    assert taken.read_bytes() == b"someone else's"
    assert names(target.parent) == [taken.name, "a.json"]


def test_the_thread_tops_the_spares_up_once_fewer_than_low_are_ready(
    spares: Spares, tmp_path: Path
) -> None:
    for n in range(WANT - LOW + 1):
        assert spares.place(tmp_path / f"{n}.json", b"x")
    wait_for(lambda: spares.ready == WANT)


def test_when_none_is_ready_place_says_no_and_does_nothing(tmp_path: Path) -> None:
    idle = Spares(tmp_path)  # never started: no spare is made
    assert not idle.place(tmp_path / "a.json", b"x")
    assert names(tmp_path) == []


def test_a_folder_on_another_filesystem_is_not_reached_and_not_tried_again(
    spares: Spares, tmp_path: Path
) -> None:
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's temp folder")
    folder = other / f"tapeproxy-spares-{os.getpid()}"
    folder.mkdir()
    try:
        assert not spares.place(folder / "a.json", b"x")  # EXDEV: the caller makes it
        assert names(folder) == []
        ready = spares.ready
        assert not spares.place(folder / "b.json", b"x")
        assert spares.ready == ready  # known by then: no spare spent on it
    finally:
        folder.rmdir()


def test_a_folder_deleted_meanwhile_is_left_to_the_usual_write(
    spares: Spares, tmp_path: Path
) -> None:
    assert not spares.place(tmp_path / "gone" / "a.json", b"x")
    assert not (tmp_path / "gone").exists()


def test_a_folder_deleted_between_the_two_links_of_a_replacement_is_left_to_the_usual_write(
    spares: Spares, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cassette"
    folder.mkdir()
    (folder / "a.json").write_bytes(b"old")
    real_link = os.link

    def link_then_lose_the_folder(*args: object, **kwargs: object) -> None:
        try:
            real_link(*args, **kwargs)  # type: ignore[arg-type]
        except FileExistsError:
            (folder / "a.json").unlink()
            folder.rmdir()  # someone deletes the cassette right then
            raise

    monkeypatch.setattr(os, "link", link_then_lose_the_folder)
    assert not spares.place(folder / "a.json", b"new")
    assert not folder.exists()


def test_a_folder_deleted_between_the_link_and_the_rename_is_left_to_the_usual_write(
    spares: Spares, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cassette"
    folder.mkdir()
    (folder / "a.json").write_bytes(b"old")
    real_replace = os.replace

    def lose_the_folder_then_replace(source: str, target: str) -> None:
        for name in os.listdir(folder):
            (folder / name).unlink()
        folder.rmdir()
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", lose_the_folder_then_replace)
    assert not spares.place(folder / "a.json", b"new")
    assert not folder.exists()


def test_a_replacement_across_a_mount_is_left_to_the_usual_write_and_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Linux reports EEXIST before EXDEV: a bind-mounted folder shows only at the second link.
    store = FileStore(tmp_path / "lib")
    store.open()
    try:
        spares = ready_spares(store)
        exchange = make_exchange(content="across a mount")
        folder = tmp_path / "lib" / "c"
        folder.mkdir()
        (folder / f"{exchange.key}.json").write_bytes(b"old")
        real_link = os.link

        def second_link_crosses_a_mount(*args: object, **kwargs: object) -> None:
            target = str(args[1])
            if os.path.basename(target).startswith("."):  # the temp name
                raise OSError(errno.EXDEV, "Invalid cross-device link", target)
            real_link(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "link", second_link_crosses_a_mount)
        store.write("c", exchange)  # made by the usual write: not lost
        assert store.read("c", exchange.key, 1) == exchange
        assert names(folder) == [f"{exchange.key}.json"]
        ready = spares.ready
        assert not spares.place(folder / "b.json", b"x")  # remembered: not tried again
        assert spares.ready == ready
    finally:
        store.close()


def test_closed_spares_place_nothing_and_a_folder_that_cannot_be_opened_gives_up(
    tmp_path: Path,
) -> None:
    made = Spares(tmp_path)
    made.start()
    wait_for(lambda: made.ready == WANT)
    made.close()
    assert made.ready == 0
    assert not made.place(tmp_path / "a.json", b"x")
    missing = Spares(tmp_path / "missing")
    missing.start()  # cannot open its folder: gives up, no thread
    assert not missing.place(tmp_path / "a.json", b"x")
    missing.close()


def test_the_journal_puts_exchange_files_in_place_from_its_spares(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "lib")
    store.open()
    journal = store._journal
    try:
        spares = ready_spares(store)
        exchange = make_exchange(content="from a spare")
        store.write("c", exchange)
        assert spares.ready == WANT - 1
        assert store.read("c", exchange.key, 1) == exchange
        assert names(tmp_path / "lib" / "c") == [f"{exchange.key}.json"]
    finally:
        store.close()
    assert journal is not None
    assert journal._spares is None
    assert not (tmp_path / "lib" / ".tapeproxy").exists()  # closed: nothing left behind
