"""The filesystem cassette store: file names, atomic and idempotent writes, safe cassette names,
the listing the cassette tools need, and the table of backends."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tapeproxy.errors import BadCassetteName, CassetteCorrupt, ConfigError
from tapeproxy.exchange.model import Exchange, Frame, StoredRequest, StoredResponse, dump_exchange
from tapeproxy.store import BACKENDS, open_store
from tapeproxy.store.files import FileStore
from tapeproxy.store.lastrun import LastRun
from tapeproxy.store.names import MAX_NAME, check_cassette_name
from tapeproxy.store.protocol import CassetteStore, exchange_file, parse_exchange_file

KEY_A, KEY_B = "a" * 64, "0123456789abcdef" * 4
OLD_NS = 1_000_000_000_000_000_000  # an mtime far from now, so any rewrite would move it


def exchange(
    key: str = KEY_A, ordinal: int = 1, text: str = "data: hi\n\n", ms: int = 5, **extra: Any
) -> Exchange:
    values: dict[str, Any] = {"seq": 0, "rules": "r", **extra}
    return Exchange(
        key=key,
        ordinal=ordinal,
        request=StoredRequest(method="POST", upstream="openai", path="/v1/x"),
        response=StoredResponse(
            status=200,
            headers={"content-type": "text/event-stream"},
            dialect="sse",
            frames=[Frame(ms=0, text="data: start\n\n"), Frame(ms=ms, text=text)],
        ),
        **values,
    )


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


def test_write_then_read_gives_the_exchange_back(store: FileStore) -> None:
    store.write("suite/test_a", exchange(ordinal=3))
    assert store.read("suite/test_a", KEY_A, 3) == exchange(ordinal=3)


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


def test_entries_of_a_missing_cassette_is_empty(store: FileStore) -> None:
    assert store.entries("never/recorded") == {}


def test_files_lists_every_file_of_a_cassette_exchange_or_not(
    store: FileStore, tmp_path: Path
) -> None:
    store.write("default", exchange(ordinal=2))
    folder = tmp_path / "default"
    leftover, odd = f".{KEY_A}.json.x1y2.tmp", f"{KEY_A}.02.json"
    (folder / leftover).write_text("partial")
    (folder / odd).write_text("{}")
    (folder / "nested").mkdir()
    assert store.files("default") == sorted([leftover, f"{KEY_A}.2.json", odd])
    assert store.files("never/recorded") == []


def test_a_cassette_that_is_a_file_is_reported_not_listed(store: FileStore, tmp_path: Path) -> None:
    (tmp_path / "flat").write_text("not a folder")
    for listed in (store.files, store.entries):
        with pytest.raises(CassetteCorrupt, match="is a file, not a folder"):
            listed("flat")


def test_exists_and_where_name_the_library_and_its_cassettes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "library")
    assert not store.exists() and not store.exists("default")
    store.write("default", exchange())
    (tmp_path / "library" / "empty").mkdir()
    assert store.exists() and store.exists("default") and store.exists("empty")
    assert store.where() == str(tmp_path / "library")
    assert store.where("suite/a") == str(tmp_path / "library" / "suite" / "a")


def test_cassettes_lists_every_folder_holding_exchanges(store: FileStore, tmp_path: Path) -> None:
    store.write("default", exchange())
    store.write("suite/test_a", exchange())
    (tmp_path / "empty").mkdir()
    assert store.cassettes() == ["default", "suite/test_a"]


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"", b'{"schema_version": 0}', b"[]", dump_exchange(exchange())[:-40]],
)
def test_reading_a_corrupt_file_names_it_and_suggests_verify(
    store: FileStore, tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "suite" / "a" / f"{KEY_A}.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(CassetteCorrupt) as caught:
        store.read("suite/a", KEY_A, 1)
    assert str(path) in caught.value.message
    assert "tapeproxy verify suite/a" in caught.value.message


def test_a_file_of_a_newer_tapeproxy_says_in_one_line_to_upgrade(
    store: FileStore, tmp_path: Path
) -> None:
    path = tmp_path / "default" / f"{KEY_A}.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"schema_version": 99, "key": "x"}')
    with pytest.raises(CassetteCorrupt) as caught:
        store.read("default", KEY_A, 1)
    message = caught.value.message
    assert "\n" not in message and str(path) in message
    assert "newer tapeproxy" in message and "upgrade tapeproxy" in message


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


def test_nested_and_dotted_cassette_names_never_share_a_note(store: FileStore) -> None:
    names = ["a", "a.json", "a/b", "a.json/b", "a_b", "a-b/c.derived", "a/b/c"]
    for n, name in enumerate(names):
        store.write_last_run(name, LastRun(used=[f"{n:064x}.json"]))
    for n, name in enumerate(names):
        assert store.read_last_run(name) == LastRun(used=[f"{n:064x}.json"])
    assert not any(store.root.joinpath(name).exists() for name in names)


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
    store = FileStore(tmp_path)
    assert store.write("default", exchange(seq=0))
    before = store.path("default", KEY_A, 1).read_bytes()
    assert not store.write("default", exchange(seq=7, ms=40))
    assert store.path("default", KEY_A, 1).read_bytes() == before


def test_every_backend_in_the_table_implements_the_protocol(tmp_path: Path) -> None:
    for make in BACKENDS.values():
        opened: CassetteStore = make(str(tmp_path / "lib"))
        assert opened.write("default", exchange())
        assert opened.entries("default") == {KEY_A: [1]}


@pytest.mark.parametrize("given", ["{root}", "file://{root}"])
def test_open_store_opens_a_folder_or_a_file_url(tmp_path: Path, given: str) -> None:
    FileStore(tmp_path).write("default", exchange())
    opened = open_store(given.format(root=tmp_path))
    assert opened.where() == str(tmp_path) and opened.entries("default") == {KEY_A: [1]}
    assert open_store(tmp_path).where() == str(tmp_path)


def test_open_store_refuses_an_unknown_backend_and_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="file://"):
        open_store("s3://bucket/cassettes")
