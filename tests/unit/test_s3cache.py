"""The S3 store's local cache: an object comes back only under its name and ETag and only
while its content matches the digest it was kept with; a newer version replaces the older;
a listing round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from tapeproxy.store.s3cache import OBJECTS, ObjectCache, cache_root


def entries(root: Path) -> list[Path]:
    """The cached objects (the shared count of what they take sits beside them)."""
    return [path for path in (root / OBJECTS).rglob("*") if path.is_file()]


def test_an_object_comes_back_under_its_name_and_etag_only(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path)
    cache.put("default/a.json", '"etag-1"', b'{"a": 1}\n')
    assert cache.get("default/a.json", '"etag-1"') == b'{"a": 1}\n'
    assert cache.get("default/a.json", '"etag-2"') is None, "another version of the object"
    assert cache.get("default/b.json", '"etag-1"') is None


def test_a_newer_version_of_an_object_takes_the_place_of_the_older(tmp_path: Path) -> None:
    """A cassette recorded anew over weeks: the cache holds each name once, not each version."""
    cache = ObjectCache(tmp_path)
    for version in range(5):
        cache.put("default/a.json", f'"etag-{version}"', b"x" * 1000 + str(version).encode())
    cache.put("default/b.json", '"etag-0"', b"{}")
    assert len(entries(tmp_path)) == 2
    assert cache.get("default/a.json", '"etag-4"') == b"x" * 1000 + b"4"
    assert cache.get("default/a.json", '"etag-3"') is None


@pytest.mark.parametrize("damage", [b"x", b""], ids=["changed-byte", "truncated"])
def test_an_entry_whose_content_does_not_match_its_digest_is_dropped(
    tmp_path: Path, damage: bytes
) -> None:
    cache = ObjectCache(tmp_path)
    cache.put("default/a.json", "e", b'{"answer": "kept"}\n')
    [entry] = entries(tmp_path)
    raw = entry.read_bytes()
    entry.write_bytes(raw[:-3] + damage if damage else raw[:-3])
    assert cache.get("default/a.json", "e") is None
    assert not entry.exists(), "a damaged entry is removed, and read from the store again"


def test_a_listing_round_trips_and_a_missing_one_is_none(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path)
    assert cache.listing("default") is None
    cache.keep_listing("default", {"a.json": "e1", "b.2.json": "e2"})
    assert cache.listing("default") == {"a.json": "e1", "b.2.json": "e2"}
    assert cache.listing("default/nested") is None


def test_each_store_location_has_a_folder_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    one, two = cache_root("http://a|s3://b/p"), cache_root("http://a|s3://b/q")
    assert one != two and one.parent == tmp_path / "tapeproxy" / "s3"


def test_a_user_without_a_home_gets_a_private_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """An arbitrary uid in a container, with no HOME: Path.home() raises RuntimeError."""

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    root = cache_root("http://a|s3://b/p")
    private = root.parents[2]
    assert private.is_dir() and private.stat().st_mode & 0o077 == 0
    ObjectCache(root).put("default/a.json", "e", b"{}")
    assert ObjectCache(root).get("default/a.json", "e") == b"{}"


def test_a_cached_listing_follows_a_write_and_a_delete_made_here(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path)
    cache.listed("default", "a.json", "e2")
    assert cache.listing("default") is None, "no listing cached: none is made"
    cache.keep_listing("default", {"a.json": "e1", "b.json": "e1"})
    cache.listed("default", "a.json", "e2")
    cache.listed("default", "b.json", None)
    cache.listed("default", "c.json", "e1")
    assert cache.listing("default") == {"a.json": "e2", "c.json": "e1"}


def test_a_dropped_object_leaves_no_entry(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path)
    cache.put("default/a.json", "e1", b"{}")
    cache.drop("default/a.json")
    cache.drop("default/never.json")
    assert cache.get("default/a.json", "e1") is None
    assert not entries(tmp_path)
