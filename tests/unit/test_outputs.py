"""Files written where the user names them: whole, and never in place of a device or a pipe."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tapeproxy.outputs import write_whole


def test_a_file_is_written_whole_and_readable_by_all(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "ca.pem"
    assert write_whole(path, lambda out: out.write(b"pem\n")) == 4
    assert path.read_bytes() == b"pem\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["ca.pem"]  # nothing left aside


def test_a_failed_write_leaves_the_old_file_and_nothing_aside(tmp_path: Path) -> None:
    path = tmp_path / "out.har"
    path.write_bytes(b"old")

    def half(out: object) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_whole(path, half)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.har"]


def test_a_pipe_is_written_to_not_replaced(tmp_path: Path) -> None:
    # (as root, `-o /dev/stdout` or `--ready-file /dev/null` renamed a file over the node)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_whole(fifo, lambda out: out.write(b"url\n"))
    reader.join(timeout=10)
    assert got == [b"url\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
