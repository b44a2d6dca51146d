"""Review of stop 11's scribe changes: the scribe in a process group of its own, ignoring
SIGINT and SIGTERM. A server killed outright (itself, or its whole group) must never leave a
scribe behind, nor a journal the next `tapeproxy serve` on the library mishandles."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from tapeproxy.store import journal
from tapeproxy.store.fs import FileStore
from tests.e2e.test_review_scribe import in_thread, post, record_in_own_group, state
from tests.e2e.test_scribe import until
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.skipif(
    not journal.SUPPORTED or not Path("/proc/self/stat").exists(),
    reason="the scribe runs where the journal does; its process is found through /proc",
)


def in_session(session: int) -> list[int]:
    """Every live process of a session (the server started a session of its own: its scribe
    stays in it, whoever its parent is once the server is gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == session and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def scribes_of(session: int) -> list[int]:
    found = []
    for pid in in_session(session):
        with contextlib.suppress(OSError):
            if b"tapeproxy.scribe" in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                found.append(pid)
    return found


@contextlib.contextmanager
def serving(folder: Path, fake: FakeUpstream) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The real CLI recording in `folder`, in a session of its own; whatever is left of that
    session at the end is killed (a test that fails leaves nothing running)."""
    process = record_in_own_group(folder, fake, session=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split("ready on ")[-1].strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield process, url
    finally:
        for pid in in_session(process.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=10)


def kill_server(process: subprocess.Popen[str], whole_group: bool) -> None:
    if whole_group:
        os.killpg(process.pid, signal.SIGKILL)
    else:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(10)


def scribe_running(process: subprocess.Popen[str], url: str) -> int:
    until(
        lambda: (
            post(url, f"warm up {time.monotonic()}").status_code == 200
            and bool(scribes_of(process.pid))
        ),
        "the scribe starts",
    )
    time.sleep(0.3)  # ready, and holding the journal
    [scribe] = scribes_of(process.pid)
    return scribe


def next_start_is_clean(folder: Path, fake: FakeUpstream) -> str:
    """The next server on the library: it records, stops, and leaves no journal. Its log."""
    with serving(folder, fake) as (process, url):
        assert post(url, "after the kill").status_code == 200
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    assert not (folder / "cassettes" / journal.JOURNAL_DIR).exists(), err
    return err


def readable(folder: Path) -> int:
    """Every recording of the library loads (none torn): how many."""
    store = FileStore(folder / "cassettes")
    count = 0
    for key, ordinals in store.entries("default").items():
        for ordinal in ordinals:
            store.read("default", key, ordinal)
            count += 1
    return count


@pytest.mark.parametrize("whole_group", [False, True], ids=["server", "group"])
def test_a_killed_idle_server_leaves_no_scribe_and_no_journal(
    tmp_path: Path, fake: FakeUpstream, whole_group: bool
) -> None:
    with serving(tmp_path, fake) as (process, url):
        scribe = scribe_running(process, url)
        kill_server(process, whole_group)
        until(lambda: state(scribe) in (None, "Z"), "the scribe ends with its server", limit=5)
        _, err = process.communicate(timeout=10)
        assert not in_session(process.pid), "nothing left of the server"
        assert "Traceback" not in err, err
        assert not (tmp_path / "cassettes" / journal.JOURNAL_DIR).exists(), "journal closed"
    next_start_is_clean(tmp_path, fake)
    assert readable(tmp_path) >= 2


@pytest.mark.parametrize("whole_group", [False, True], ids=["server", "group"])
def test_a_server_killed_with_recordings_in_flight_leaves_no_scribe_and_no_noise(
    tmp_path: Path, fake: FakeUpstream, whole_group: bool
) -> None:
    """SIGKILL while the scribe writes: it ends by itself, quietly (the server's log is no
    place for a scribe's traceback of a broken pipe), and the next start is clean."""
    fake.frame_delay = 0.01
    with serving(tmp_path, fake) as (process, url):
        scribe = scribe_running(process, url)
        prompts = [f"in flight at the kill {n}" for n in range(24)]
        asking = [
            in_thread(partial(post, url, text, stream=n % 2 == 1)) for n, text in enumerate(prompts)
        ]
        until(lambda: sum(1 for _, out in asking if out) >= 4, "some are recorded")
        kill_server(process, whole_group)
        until(lambda: state(scribe) in (None, "Z"), "the scribe ends with its server", limit=5)
        _, err = process.communicate(timeout=10)
        for thread, _ in asking:
            thread.join(20)
        assert not in_session(process.pid), "nothing left of the server"
        assert "Traceback" not in err, err
    whole = [
        text
        for text, (_, out) in zip(prompts, asking, strict=True)
        if out and isinstance(out[0], httpx.Response) and out[0].status_code == 200
    ]
    next_start_is_clean(tmp_path, fake)
    store = FileStore(tmp_path / "cassettes")
    recorded = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert set(whole) <= recorded, "every answer a client had whole is on disk"


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.2, 0.3])
def test_a_server_killed_while_its_scribe_starts_leaves_none(
    tmp_path: Path, fake: FakeUpstream, delay: float
) -> None:
    """The first recording starts the scribe; the server's group is killed before (or as)
    the scribe is ready: no scribe is left, and the next start is clean."""
    with serving(tmp_path, fake) as (process, url):
        first, _ = in_thread(partial(post, url, "the first recording"))
        time.sleep(delay)
        kill_server(process, whole_group=True)
        until(lambda: not in_session(process.pid), "nothing left of the server", limit=5)
        _, err = process.communicate(timeout=10)
        first.join(20)
        assert "Traceback" not in err, err
    next_start_is_clean(tmp_path, fake)
    readable(tmp_path)


def test_a_stopped_scribe_whose_server_is_killed_does_not_stay_behind(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """A scribe stopped (SIGSTOP, a debugger) when its server is killed sees no EOF until it
    runs again: in a process group of its own, orphaned, it gets SIGHUP and SIGCONT from the
    kernel, and must not stay behind stopped forever."""
    with serving(tmp_path, fake) as (process, url):
        scribe = scribe_running(process, url)
        os.kill(scribe, signal.SIGSTOP)
        until(lambda: state(scribe) == "T", "the scribe is stopped", limit=5)
        kill_server(process, whole_group=True)
        until(lambda: state(scribe) in (None, "Z"), "the stopped scribe ends", limit=5)
    next_start_is_clean(tmp_path, fake)
