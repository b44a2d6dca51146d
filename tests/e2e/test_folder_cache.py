"""The walk that finds a library's cassettes keeps each folder's findings by the folder's
stamp (`store/folders.py`): `ls` lists only the folders that changed, and whatever changes
behind its back (a cassette added, removed, nested, left over; a damaged or hostile cache)
is seen, as a walk of every folder sees it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.store import folders
from tapeproxy.store.files import FileStore
from tapeproxy.store.state import STATE_DIR
from tests.support import files_under
from tests.support.exchanges import exchange

runner = CliRunner()


def ls(root: Path) -> list[str]:
    result = runner.invoke(app, ["ls", "--cassettes", str(root), "--json"])
    assert result.exit_code == 0, result.output
    return [found["cassette"] for found in json.loads(result.output)]


def settled(root: Path) -> None:
    """Every folder's mtime put back past the racy window (a folder changed in the last
    seconds is never kept: it could change again within its mtime's tick)."""
    past = (folders.RACY + 10) * 1e9
    for folder, _, _ in os.walk(root):
        st = os.stat(folder)
        os.utime(folder, ns=(st.st_atime_ns, int(st.st_mtime_ns - past)))


def cache(root: Path) -> Path:
    return root / STATE_DIR / folders.CACHE


def test_what_changes_behind_its_back_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    store = FileStore(root)
    for name in ("a", "b", "nested/c"):
        store.write(name, exchange())
    settled(root)
    assert ls(root) == ["a", "b", "nested/c"]
    kept = cache(root).read_bytes()
    assert b'"nested"' in kept
    settled(root)
    before = files_under(root)
    assert ls(root) == ["a", "b", "nested/c"] and files_under(root) == before, "nothing rewritten"
    store.write("nested/d/e", exchange())  # a folder made in a folder kept as it was
    store.write("f", exchange())
    shutil.rmtree(root / "b")
    assert ls(root) == ["a", "f", "nested/c", "nested/d/e"]
    settled(root)
    ls(root)
    (root / "a" / f"{'a' * 64}.json").unlink()  # its only file: no cassette now
    os.rename(root / "f", root / ".hidden")
    (root / "nested" / "c" / ".x.json.1a2b.tmp").write_bytes(b"{")
    assert ls(root) == ["nested/c", "nested/d/e"]


def test_a_cassette_of_leftovers_only_is_listed_and_a_blobs_folder_is_not(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    FileStore(root).write("a", exchange())
    (root / "a" / "blobs").mkdir()
    (root / "a" / "blobs" / ".f.1234.tmp").write_bytes(b"")
    (root / "killed").mkdir()
    (root / "killed" / ".f.json.1234.tmp").write_bytes(b"{")
    for _ in range(2):
        settled(root)
        assert ls(root) == ["a", "killed"]


def test_a_damaged_or_hostile_cache_is_never_trusted(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    store = FileStore(root)
    store.write("a", exchange())
    store.write("b", exchange())
    outside = tmp_path / "outside"
    FileStore(outside).write("x", exchange())
    for _ in range(2):  # the first makes the state folder: a change to the root
        settled(root)
        assert ls(root) == ["a", "b"]
    good = cache(root).read_bytes()
    body = json.loads(good.partition(b"\n")[2])
    cache(root).write_bytes(good[:-9] + b"garbage!}")
    assert ls(root) == ["a", "b"], "its digest does not match"
    stamp = body["folders"][""][0]
    for inner in (["../outside/x"], [".."], [str(outside)], ["a", 7], "a"):
        hostile = {**body, "folders": {**body["folders"], "": [stamp, False, False, inner]}}
        text = json.dumps(hostile).encode()
        cache(root).write_bytes(hashlib.sha256(text).hexdigest().encode() + b"\n" + text)
        # What a walk outside found would be skipped (no cassette's name), not listed.
        skipped: dict[str, str] = {}
        assert store.cassettes(skipped) == ["a", "b"] and not skipped, inner
        assert ls(root) == ["a", "b"], inner
    lying = {**body, "folders": {**body["folders"], "": [stamp, False, False, []]}}
    text = json.dumps(lying).encode()
    cache(root).write_bytes(hashlib.sha256(text).hexdigest().encode() + b"\n" + text)
    os.utime(root)  # the folder's stamp changes: what is kept for it is looked at again
    assert ls(root) == ["a", "b"]


def test_a_hostile_cache_cannot_lead_the_walk_through_a_link(tmp_path: Path) -> None:
    """A link to a folder is never walked into (os.walk does not), even when the cache says
    it is a folder of the library with the stamp of the folder it leads to."""
    root = tmp_path / "cassettes"
    FileStore(root).write("a", exchange())
    outside = tmp_path / "outside"
    FileStore(outside).write("x", exchange())
    (root / "out").symlink_to(outside, target_is_directory=True)
    for _ in range(2):  # the first makes the state folder: a change to the root
        settled(root)
        assert ls(root) == ["a"]
    body = json.loads(cache(root).read_bytes().partition(b"\n")[2])
    kept = body["folders"]
    root_stamp, there = kept[""][0], os.stat(outside)
    kept[""] = [root_stamp, False, False, ["a", "out"]]
    kept["out"] = [f"{there.st_ino}:{there.st_mtime_ns}:{there.st_ctime_ns}", False, False, ["x"]]
    inner = os.stat(outside / "x")
    kept["out/x"] = [f"{inner.st_ino}:{inner.st_mtime_ns}:{inner.st_ctime_ns}", True, False, []]
    text = json.dumps(body).encode()
    cache(root).write_bytes(hashlib.sha256(text).hexdigest().encode() + b"\n" + text)
    assert ls(root) == ["a"]


def test_a_folder_changed_in_the_last_seconds_is_not_kept(tmp_path: Path) -> None:
    """A folder changed within RACY could change again within its mtime's tick (a second on
    some file systems) keeping its stamp: what was found in it is looked at again next time."""
    root = tmp_path / "cassettes"
    FileStore(root).write("old", exchange())
    settled(root)
    FileStore(root).write("fresh", exchange())
    assert ls(root) == ["fresh", "old"]
    kept = json.loads(cache(root).read_bytes().partition(b"\n")[2])["folders"]
    assert "old" in kept and "fresh" not in kept and "" not in kept
