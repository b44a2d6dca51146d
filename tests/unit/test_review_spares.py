"""Attacks on the spares (store/spares.py) through a real store and its journal: a file placed
from a spare must be the file a plain open in its folder makes (its group, its mode), and
what the spares remember of folders must stay bounded whatever cassettes are named."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tapeproxy.store import journal as journal_module
from tapeproxy.store import spares as spares_module
from tapeproxy.store.fs import FileStore
from tapeproxy.store.spares import WANT, Spares
from tests.support import wait_for
from tests.unit.test_journal import journaling, make_exchange

pytestmark = pytest.mark.skipif(
    not spares_module.SUPPORTED or not journal_module.SUPPORTED, reason="no O_TMPFILE here"
)


@pytest.fixture(autouse=True)
def slow_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "CHECKPOINT_S", 3600.0)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """A known umask while the spares are made (they take it when made, not when placed)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def another_group() -> int:
    """A group this process may give a folder, other than its own."""
    if os.geteuid() == 0:
        return 1 if os.getegid() != 1 else 2
    others = [gid for gid in os.getgroups() if gid != os.getegid()]
    if not others:
        pytest.skip("needs a second group to give the cassette folder")
    return others[0]


def plain_open_gives(folder: Path) -> os.stat_result:
    """What a file made by a plain open in `folder` is given (as durable.put makes one)."""
    reference = folder / ".reference"
    reference.touch()
    try:
        return reference.stat()
    finally:
        reference.unlink()


def started(store: FileStore) -> Spares:
    journal = journaling(store)
    spares = journal._spares
    assert spares is not None
    wait_for(lambda: spares.ready == WANT)
    return spares


def test_a_file_in_a_setgid_folder_gets_the_folder_s_group_as_a_plain_open_gives_it(
    tmp_path: Path,
) -> None:
    """A cassette folder shared by a team (`chgrp team; chmod g+s`): every file made in it
    belongs to the team, so that the team can re-record over it. A spare is made in
    `.tapeproxy`, whose group it keeps when linked into the folder."""
    group = another_group()
    store = FileStore(tmp_path / "lib")
    store.open()
    try:
        started(store)
        folder = tmp_path / "lib" / "team"
        folder.mkdir()
        os.chown(folder, -1, group)
        folder.chmod(0o2775)
        exchange = make_exchange(content="in a folder shared by a team")
        store.write("team", exchange)
        written = (folder / f"{exchange.key}.json").stat()
        assert plain_open_gives(folder).st_gid == group
        assert written.st_gid == group
    finally:
        store.close()


def _minimal_acl(perm: int) -> bytes:
    """A `system.posix_acl_*` value: user::, group:: and other:: entries all `perm`."""
    entries = ((0x01, perm), (0x04, perm), (0x20, perm))  # USER_OBJ, GROUP_OBJ, OTHER
    return struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", t, p, 0xFFFFFFFF) for t, p in entries
    )


def test_a_file_in_a_folder_with_a_default_acl_gets_the_mode_a_plain_open_gives_it(
    tmp_path: Path, umask_022: None
) -> None:
    """`setfacl -d -m g::rw,o::rw` on a cassette folder: its new files are 0666, whatever the
    umask. A spare takes the umask (or `.tapeproxy`'s ACL) instead."""
    store = FileStore(tmp_path / "lib")
    store.open()
    try:
        started(store)
        folder = tmp_path / "lib" / "shared"
        folder.mkdir()
        try:
            os.setxattr(folder, "system.posix_acl_default", _minimal_acl(6))
        except OSError as exc:
            pytest.skip(f"no POSIX ACLs here: {exc}")
        exchange = make_exchange(content="in a folder with a default ACL")
        store.write("shared", exchange)
        written = (folder / f"{exchange.key}.json").stat()
        assert plain_open_gives(folder).st_mode & 0o777 == 0o666
        assert written.st_mode & 0o777 == 0o666
    finally:
        store.close()


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
