"""Attacks on the spares (store/spares.py) through a real store and its journal: a file placed
from a spare must be the file a plain open in its folder makes (its group, its mode), and
what the spares remember of folders must stay bounded whatever cassettes are named."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmtape.store import journal as journal_module
from llmtape.store import spares as spares_module
from llmtape.store.fs import FileStore
from llmtape.store.spares import WANT, Spares
from tests.support import wait_for
from tests.unit.test_journal import journaling, make_exchange

pytestmark = pytest.mark.skipif(
    not spares_module.SUPPORTED or not journal_module.SUPPORTED, reason="no O_TMPFILE here"
)


@pytest.fixture(autouse=True)
def slow_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "CHECKPOINT_S", 3600.0)


def started(store: FileStore) -> Spares:
    journal = journaling(store)
    spares = journal._spares
    assert spares is not None
    wait_for(lambda: spares.ready == WANT)
    return spares


@contextlib.contextmanager
def mounted(*args: str) -> Iterator[None]:
    target = args[-1]
    done = subprocess.run(["mount", *args], capture_output=True, timeout=10)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", target], capture_output=True, timeout=10)


def remembered(spares: Spares) -> int:
    """How many things the spares hold in their sets, dicts and lists."""
    held = [v for v in vars(spares).values() if isinstance(v, (set, dict, list))]
    return sum(len(v) for v in held)


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
def test_what_the_spares_remember_of_folders_stays_bounded(tmp_path: Path) -> None:
    """A folder of the library that is a bind mount of the same filesystem (a second
    `docker -v` into the library) has the library's st_dev, so the journal takes its files,
    but no link reaches it (EXDEV). Cassettes are named by a request header: one folder each
    under it must not grow the spares' memory without end (the journal's own per-folder
    map is bounded at 4096)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=128m", "tmpfs", str(disk)):
        (disk / "lib" / "team").mkdir(parents=True)
        (disk / "elsewhere").mkdir()
        with mounted("--bind", str(disk / "elsewhere"), str(disk / "lib" / "team")):
            store = FileStore(disk / "lib")
            store.open()
            try:
                spares = started(store)
                deadline = time.monotonic() + 60
                for n in range(5000):
                    while not spares.ready and time.monotonic() < deadline:
                        time.sleep(0.0002)
                    store.write(f"team/c{n}", make_exchange(content=f"answer {n}"))
                assert remembered(spares) <= 4096 + WANT
            finally:
                store.close()
