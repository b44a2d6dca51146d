"""The S3 cache's bound, shared by every process that uses the folder: processes putting and
evicting at once keep it under the limit together and damage no entry; the shared count is
what the folder holds, and a damaged or stale count is checked against a walk."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest

from tapeproxy.store import s3budget
from tapeproxy.store.s3budget import COUNT, RECOUNT_AFTER
from tapeproxy.store.s3cache import OBJECTS, ObjectCache

LIMIT = 200_000


def held(root: Path) -> int:
    total = 0
    for folder, _, names in os.walk(root / OBJECTS):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile (no lock held)
                total += os.stat(os.path.join(folder, name)).st_size
    return total


def held_between_puts(root: Path) -> int:
    """What the folder holds, walked under the cache's lock: no put or eviction halfway."""
    lock = root / f"{OBJECTS}.count"
    with lock.open("a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return held(root)


def counted(root: Path) -> int:
    return int((root / f"{OBJECTS}.count").read_bytes().split()[2])


def content(name: str, etag: str) -> bytes:
    """What the store holds under `name` at version `etag`: known to every process."""
    seed = hashlib.sha256(f"{name}|{etag}".encode()).digest()
    return seed * (1 + seed[0] * 4)  # 32 bytes to 32 KB


def churn(root: str, seed: int) -> int:
    """Read through the cache as a replaying server does: get, else put what the store holds.
    Each object name has three versions; any one a get answers must be that version's bytes."""
    cache, rng, wrong = ObjectCache(Path(root), LIMIT), random.Random(seed), 0
    for _ in range(400):
        name, etag = f"c/{rng.randrange(40)}.json", f'"{rng.randrange(3)}"'
        got = cache.get(name, etag)
        if got is None:
            cache.put(name, etag, content(name, etag))
        elif got != content(name, etag):
            wrong += 1
    return wrong


def test_four_processes_at_once_stay_under_the_limit_together_and_damage_nothing(
    tmp_path: Path,
) -> None:
    """About 40 objects of up to 32 KB (1.3 MB) through a 200 KB cache: each process alone
    would keep it under the limit; together they counted each only its own before."""
    seen: list[int] = []
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        jobs = pool.starmap_async(churn, [(str(tmp_path), seed) for seed in range(4)])
        while not jobs.ready():
            seen.append(held_between_puts(tmp_path))
            time.sleep(0.005)  # the lock let go between samples: else the workers starve on it
        wrong = jobs.get()
    assert wrong == [0, 0, 0, 0], "a get answered bytes of another version, or torn"
    assert len(seen) > 10 and max(seen) <= LIMIT, f"{max(seen)} bytes held at once"
    assert 0 < held(tmp_path) <= LIMIT
    assert counted(tmp_path) == held(tmp_path), "the shared count is what the folder holds"


def test_threads_of_one_process_exclude_each_other_too(tmp_path: Path) -> None:
    """A server reads the store from several worker threads: the lock is taken per open of
    the count file, not per process."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        wrong = list(pool.map(churn, [str(tmp_path)] * 4, range(4)))
    assert wrong == [0, 0, 0, 0]
    assert counted(tmp_path) == held(tmp_path) <= LIMIT


def test_a_damaged_count_is_walked_again(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path, LIMIT)
    for n in range(3):
        cache.put(f"c/{n}.json", "e", b"x" * 50_000)
    (tmp_path / f"{OBJECTS}.count").write_bytes(b"\x00garbage")
    cache.put("c/3.json", "e", b"x" * 50_000)
    assert counted(tmp_path) == held(tmp_path) > 150_000
    cache.put("c/4.json", "e", b"x" * 50_000)  # past the limit: the oldest out
    assert counted(tmp_path) == held(tmp_path) <= LIMIT * 0.8


def test_a_count_last_walked_long_ago_is_walked_again(tmp_path: Path) -> None:
    """Files the count never saw (an older tapeproxy's, a process killed before it counted):
    trusted for RECOUNT_AFTER at most."""
    cache = ObjectCache(tmp_path, LIMIT)
    for n in range(4):
        cache.put(f"c/{n}.json", "e", b"x" * 50_000)
    fresh = time.time() - 10
    (tmp_path / f"{OBJECTS}.count").write_bytes(b"%s 0 %.3f\n" % (COUNT, fresh))
    cache.put("c/4.json", "e", b"x" * 50_000)
    assert counted(tmp_path) == 50_000 + 64 + 3, "fresh: trusted (no walk at each put)"
    old = time.time() - RECOUNT_AFTER - 10
    (tmp_path / f"{OBJECTS}.count").write_bytes(b"%s 0 %.3f\n" % (COUNT, old))
    cache.put("c/5.json", "e", b"x" * 50_000)
    assert counted(tmp_path) == held(tmp_path) <= LIMIT


def test_a_dropped_or_damaged_entry_is_counted_out(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path, LIMIT)
    cache.put("c/a.json", "e", b"x" * 1000)
    cache.put("c/b.json", "e", b"y" * 1000)
    cache.drop("c/a.json")
    [entry] = [path for path in (tmp_path / OBJECTS).rglob("*") if path.is_file()]
    entry.write_bytes(entry.read_bytes()[:-1] + b"z")  # its size kept: the count still right
    assert cache.get("c/b.json", "e") is None
    assert counted(tmp_path) == held(tmp_path) == 0


def test_a_lock_held_too_long_skips_the_put_and_never_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its holder stopped (SIGSTOP) or its mount hung: the object is not cached, and read
    from the store again next time; nothing waits for good."""
    monkeypatch.setattr(s3budget, "LOCK_WAIT", 0.2)
    cache = ObjectCache(tmp_path, LIMIT)
    cache.put("c/a.json", "e", b"kept")
    with (tmp_path / f"{OBJECTS}.count").open("rb") as held_by_another:
        fcntl.flock(held_by_another, fcntl.LOCK_EX)
        cache.put("c/b.json", "e", b"not kept")
        assert cache.get("c/b.json", "e") is None
        assert cache.get("c/a.json", "e") == b"kept", "reads take no lock"
    cache.put("c/b.json", "e", b"kept now")
    assert cache.get("c/b.json", "e") == b"kept now"
    assert counted(tmp_path) == held(tmp_path)


def test_a_stopped_holder_costs_one_wait_not_one_per_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server opening a cassette of a hundred objects, the lock held by a stopped process:
    the first put waits LOCK_WAIT, the others find the lock busy at once and keep nothing;
    once it is free again, a put keeps its object."""
    monkeypatch.setattr(s3budget, "LOCK_WAIT", 0.5)
    cache = ObjectCache(tmp_path, LIMIT)
    began = time.monotonic()
    with (tmp_path / f"{OBJECTS}.count").open("a+b") as held_by_another:
        fcntl.flock(held_by_another, fcntl.LOCK_EX)
        for n in range(20):
            cache.put(f"c/{n}.json", "e", b"not kept")
    assert time.monotonic() - began < 5.0, "20 puts waited 0.5 s each (10 s)"
    assert held(tmp_path) == 0
    cache.put("c/a.json", "e", b"kept")
    assert cache.get("c/a.json", "e") == b"kept"
