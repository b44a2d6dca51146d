"""The folder backend (FileStore) as files on disk: file names, atomic writes that leave no temp
file, writes that leave an unchanged file untouched, what a folder holds besides exchanges, the
state folder, the write check and the sweep; and cassette names. What every backend must do is
in test_store_conformance.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tapeproxy.errors import BadCassetteName, CassetteCorrupt
from tapeproxy.exchange.model import Exchange, dump_exchange
from tapeproxy.store.files import FileStore
from tapeproxy.store.lastrun import LastRun
from tapeproxy.store.names import MAX_NAME, check_cassette_name
from tapeproxy.store.protocol import exchange_file, parse_exchange_file
from tests.support.exchanges import KEY_A, KEY_B, exchange

OLD_NS = 1_000_000_000_000_000_000  # an mtime far from now, so any rewrite would move it


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path)


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_write_creates_the_key_file_and_an_ordinal_file(store: FileStore, tmp_path: Path) -> None:
    assert store.write("default", exchange()) is True
    assert store.write("default", exchange(ordinal=2)) is True
    assert listing(tmp_path / "default") == [f"{KEY_A}.2.json", f"{KEY_A}.json"]
    assert (tmp_path / "default" / f"{KEY_A}.json").read_bytes() == dump_exchange(exchange())


def test_write_leaves_no_temp_file(store: FileStore, tmp_path: Path) -> None:
    store.write("default", exchange())
    store.write("default", exchange(text="data: other\n\n"))
    assert listing(tmp_path / "default") == [f"{KEY_A}.json"]


def test_rewriting_an_equal_exchange_touches_nothing(store: FileStore, tmp_path: Path) -> None:
    path = tmp_path / "default" / f"{KEY_A}.json"
    store.write("default", exchange(ms=5))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    before = path.read_bytes()
    assert store.write("default", exchange(ms=999)) is False
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == OLD_NS


@pytest.mark.parametrize(
    "changed",
    [exchange(text="data: bye\n\n"), exchange(usage={"input_tokens": 1})],
)
def test_writing_a_different_exchange_overwrites(
    store: FileStore, tmp_path: Path, changed: Exchange
) -> None:
    path = tmp_path / "default" / f"{KEY_A}.json"
    store.write("default", exchange())
    os.utime(path, ns=(OLD_NS, OLD_NS))
    assert store.write("default", changed) is True
    assert path.read_bytes() == dump_exchange(changed)
    assert path.stat().st_mtime_ns != OLD_NS


def test_entries_lists_keys_with_sorted_ordinals_and_ignores_other_files(
    store: FileStore, tmp_path: Path
) -> None:
    for key, ordinal in [(KEY_B, 10), (KEY_A, 1), (KEY_B, 2), (KEY_B, 1), (KEY_A, 3)]:
        store.write("default", exchange(key, ordinal))
    folder = tmp_path / "default"
    (folder / f".{KEY_A}.json.x1y2.tmp").write_text("partial")
    (folder / "README.md").write_text("notes")
    (folder / f"{KEY_A}.json.bak").write_text("{}")
    (folder / f"{KEY_A[:63]}.json").write_text("{}")
    (folder / "nested").mkdir()
    (folder / f"{KEY_B}.5.json").mkdir()  # a nested cassette whose name looks like a recording
    (folder / "nested" / f"{KEY_B}.4.json").write_bytes(dump_exchange(exchange(KEY_B, 4)))
    assert store.entries("default") == {KEY_A: [1, 3], KEY_B: [1, 2, 10]}


def test_names_lists_every_file_of_a_cassette_exchange_or_not(
    store: FileStore, tmp_path: Path
) -> None:
    store.write("default", exchange(ordinal=2))
    folder = tmp_path / "default"
    leftover, odd = f".{KEY_A}.json.x1y2.tmp", f"{KEY_A}.02.json"
    (folder / leftover).write_text("partial")
    (folder / odd).write_text("{}")
    (folder / "nested").mkdir()
    assert store.names("default") == sorted([leftover, f"{KEY_A}.2.json", odd])
    assert store.names("never/recorded") == []


def test_a_cassette_that_is_a_file_is_reported_not_listed(store: FileStore, tmp_path: Path) -> None:
    (tmp_path / "flat").write_text("not a folder")
    for listed in (store.names, store.entries):
        with pytest.raises(CassetteCorrupt, match="is a file, not a folder"):
            listed("flat")


def test_exists_and_where_name_the_library_folder_and_its_cassettes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "library")
    assert not store.exists()
    assert store.entries("default") == {} and not (tmp_path / "library").exists(), "no folder made"
    store.write("default", exchange())
    assert store.exists()
    assert store.where() == str(tmp_path / "library")
    assert store.where("suite/a") == str(tmp_path / "library" / "suite" / "a")


def test_cassettes_lists_every_folder_holding_exchanges(store: FileStore, tmp_path: Path) -> None:
    store.write("default", exchange())
    store.write("suite/test_a", exchange())
    (tmp_path / "empty").mkdir()
    assert store.cassettes() == ["default", "suite/test_a"]


def test_the_last_run_note_lives_in_the_state_folder_never_in_the_cassette(
    store: FileStore, tmp_path: Path
) -> None:
    assert store.read_last_run("default") is None
    store.write("default", exchange())
    cassette = listing(tmp_path / "default")
    store.write_last_run("default", None)  # nothing to remove: nothing is made
    assert not (tmp_path / ".tapeproxy").exists()
    note = LastRun(used=[f"{KEY_A}.json"], unused=[f"{KEY_B}.json"])
    store.write_last_run("default", note)
    assert store.read_last_run("default") == note
    assert listing(tmp_path / "default") == cassette and store.entries("default") == {KEY_A: [1]}
    state = tmp_path / ".tapeproxy"
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    assert listing(state / "runs") == ["default.json"], "written aside, renamed: no temp file"
    raw = (state / "runs" / "default.json").read_text()
    assert "ms" not in raw and "time" not in raw
    assert store.cassettes() == ["default"], "the state folder is no cassette"
    store.write_last_run("default", None)
    assert store.read_last_run("default") is None and listing(state / "runs") == []
    (state / "runs" / "default.json").write_text("{")
    with pytest.raises(CassetteCorrupt, match="replay the cassette again"):
        store.read_last_run("default")


def test_nested_and_dotted_cassette_names_never_share_a_note(
    store: FileStore, tmp_path: Path
) -> None:
    names = ["a", "a.json", "a/b", "a.json/b", "a_b", "a-b/c.derived", "a/b/c"]
    for n, name in enumerate(names):
        store.write_last_run(name, LastRun(used=[f"{n:064x}.json"]))
    for n, name in enumerate(names):
        assert store.read_last_run(name) == LastRun(used=[f"{n:064x}.json"])
    assert not any((tmp_path / name).exists() for name in names)


def test_a_library_whose_state_folder_cannot_be_made_refuses_the_note_alone(
    store: FileStore, tmp_path: Path
) -> None:
    store.write("default", exchange())
    (tmp_path / ".tapeproxy").write_text("not a folder")
    with pytest.raises(OSError):
        store.write_last_run("default", LastRun())
    store.write_last_run("default", None)
    assert store.read_last_run("default") is None


def test_a_crash_during_write_keeps_the_previous_file_and_no_temp_file(
    store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write("default", exchange())
    path = tmp_path / "default" / f"{KEY_A}.json"
    before = path.read_bytes()

    def crash(src: Any, dst: Any) -> None:
        raise OSError("disk pulled out")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk pulled out"):
        store.write("default", exchange(text="data: new\n\n"))
    assert path.read_bytes() == before
    assert listing(tmp_path / "default") == [f"{KEY_A}.json"]


@pytest.mark.parametrize(
    ("name", "ordinal", "file"),
    [(KEY_A, 1, f"{KEY_A}.json"), (KEY_A, 2, f"{KEY_A}.2.json"), (KEY_B, 12, f"{KEY_B}.12.json")],
)
def test_exchange_file_names_round_trip(name: str, ordinal: int, file: str) -> None:
    assert exchange_file(name, ordinal) == file
    assert parse_exchange_file(file) == (name, ordinal)


@pytest.mark.parametrize(
    "name", ["default", "suite/test_a", "a.b-c_d", "A/B/c", "x" * MAX_NAME, "v1.2", "_x/-y"]
)
def test_good_cassette_names_pass(name: str) -> None:
    assert check_cassette_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "..",
        "../x",
        "a/../b",
        "/abs",
        "a//b",
        "a/",
        ".hidden",
        "a/.hidden",
        "a/./b",
        ".",
        "",
        "x" * (MAX_NAME + 1),
        "a b",
        "a\\b",
        "a:b",
        "ä",
    ],
)
def test_bad_cassette_names_are_refused(name: str, store: FileStore) -> None:
    with pytest.raises(BadCassetteName, match="is not allowed"):
        check_cassette_name(name)
    with pytest.raises(BadCassetteName):
        store.write(name, exchange())


@pytest.mark.parametrize("name", ["nl\n", "a\n/b", "tab\t"])
def test_names_with_control_characters_are_refused(name: str) -> None:
    with pytest.raises(BadCassetteName):
        check_cassette_name(name)


def test_the_derived_cassette_of_a_longest_name_is_valid() -> None:
    from tapeproxy.store.names import MAX_NAME, derived_name

    assert derived_name("a" * MAX_NAME) == "a" * MAX_NAME + ".derived"


def test_same_recording_ignores_timings_and_recording_order_only() -> None:
    cut_later = exchange().response.model_copy(update={"end_ms": 12})
    assert exchange(ms=5).same_recording(exchange(ms=999))
    assert exchange().same_recording(exchange().model_copy(update={"response": cut_later}))
    assert exchange().same_recording(exchange(seq=3))
    assert not exchange().same_recording(exchange(text="data: bye\n\n"))
    assert not exchange(seq=3).same_recording(exchange(seq=3, text="data: bye\n\n"))


def test_a_re_record_in_another_order_keeps_the_file_and_its_seq(tmp_path: Path) -> None:
    store, path = FileStore(tmp_path), tmp_path / "default" / f"{KEY_A}.json"
    assert store.write("default", exchange(seq=0))
    before = path.read_bytes()
    assert not store.write("default", exchange(seq=7, ms=40))
    assert path.read_bytes() == before


def test_a_sweep_removes_what_killed_writes_left_and_keeps_fresh_ones(
    store: FileStore, tmp_path: Path
) -> None:
    store.write("a", exchange())
    store.write("b/c", exchange())
    store.write_last_run("a", LastRun())
    old = [tmp_path / "a" / f".{KEY_A}.json.1-0.tmp", tmp_path / "b" / "c" / ".x.json.2-0.tmp"]
    for path in old:
        path.write_text("partial")
        os.utime(path, ns=(OLD_NS // 10**9, OLD_NS // 10**9))
    fresh = tmp_path / "a" / f".{KEY_A}.json.{os.getpid()}-9.tmp"  # a write of ours under way
    fresh.write_text("partial")
    aside = tmp_path / ".tapeproxy" / ".other.tmp"
    aside.write_text("the state folder is not swept")
    os.utime(aside, ns=(0, 0))
    assert store.sweep("b/c") == 1 and old[0].exists() and not old[1].exists()
    assert store.sweep() == 1 and not old[0].exists()
    assert fresh.exists() and aside.exists()
    assert store.entries("a") == {KEY_A: [1]} and store.entries("b/c") == {KEY_A: [1]}
    assert FileStore(tmp_path / "missing").sweep() == 0


def test_the_write_check_makes_the_library_and_leaves_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "new" / "library")
    assert store.unwritable("default") is None
    assert os.listdir(tmp_path / "new" / "library") == []


def test_the_write_check_of_a_library_that_cannot_be_made_says_who_needs_what(
    tmp_path: Path,
) -> None:
    (tmp_path / "plain-file").write_text("in the way")
    library = tmp_path / "plain-file" / "cassettes"
    problem = FileStore(library).unwritable("default")
    assert problem is not None and "\n" not in problem
    assert problem.startswith("cannot record into the cassette library: ")
    assert f"uid {os.getuid()} (gid {os.getgid()}) needs write access to {library}" in problem


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into a read-only folder anyway")
def test_the_write_check_asks_the_cassette_folder_without_writing_into_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.write("locked", exchange())
    (tmp_path / "locked").chmod(0o555)
    try:
        problem = store.unwritable("locked")
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert problem is not None and "Permission denied" in problem
    assert str(tmp_path / "locked") in problem
    assert listing(tmp_path / "locked") == [f"{KEY_A}.json"]


def test_a_file_url_and_a_folder_open_the_same_library(tmp_path: Path) -> None:
    from tapeproxy.store import open_store

    FileStore(tmp_path).write("default", exchange())
    for given in (str(tmp_path), f"file://{tmp_path}", tmp_path):
        opened = open_store(given)
        assert isinstance(opened, FileStore) and opened.where("default") == str(
            tmp_path / "default"
        )


@pytest.mark.parametrize("code", [errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS])
def test_create_on_a_filesystem_without_hard_links_renames_into_place(
    code: int, store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAT, exFAT and some network or FUSE mounts refuse link(): a new recording is still
    written whole, only where nothing is, and leaves no temp file."""

    def no_link(source: str, target: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", no_link)
    assert store.create("default", exchange()) is True
    assert store.create("default", exchange(text="data: other\n\n")) is False
    assert listing(tmp_path / "default") == [f"{KEY_A}.json"]
    assert (tmp_path / "default" / f"{KEY_A}.json").read_bytes() == dump_exchange(exchange())


def test_create_leaves_no_temp_file_when_link_fails_otherwise(
    store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(source: str, target: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "link", full)
    with pytest.raises(OSError):
        store.create("default", exchange())
    assert listing(tmp_path / "default") == []


def test_a_file_that_cannot_be_opened_is_named_once_with_the_systems_reason(
    tmp_path: Path,
) -> None:
    # Gone between listing and reading (a clean-up, a checkout); permission denied reads alike.
    store = FileStore(tmp_path)
    store.write("default", exchange())
    path = tmp_path / "default" / f"{KEY_A}.json"
    path.unlink()
    with pytest.raises(CassetteCorrupt) as caught:
        store.read("default", KEY_A, 1)
    message = caught.value.message
    assert message == (
        f"cannot read {path}: No such file or directory; run `tapeproxy verify default` to check it"
    )
