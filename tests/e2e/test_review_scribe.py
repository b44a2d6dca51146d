"""Review of the scribe (scribe.py): ways to lose a recording, a stale write-back, a hung or
dead scribe, seen from outside through a real server, a fake upstream and real files."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from llmtape.store import journal
from llmtape.store.fs import FileStore
from tests.conftest import MakeProxy
from tests.e2e.test_scribe import ask, scribe_at_work, scribes, until
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.skipif(
    not journal.SUPPORTED or not Path("/proc/self/stat").exists(),
    reason="the scribe runs where the journal does; its process is found through /proc",
)


def in_thread(call: object) -> tuple[threading.Thread, list[object]]:
    """Run `call` in a thread; its result lands in the list."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)  # type: ignore[operator]
    thread.start()
    return thread, out


def test_an_answer_not_kept_gives_back_its_ordinal_without_losing_a_later_one(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    """Two identical requests recorded at once; the first one's stream carries an error
    frame (not kept), the second is whole. The second's recording must survive the run."""
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGSTOP)  # both answers are numbered before the scribe says a word
    try:
        fake.stream_error_after = 1
        failing, _ = in_thread(lambda: ask(proxy, "asked twice at once", stream=True))
        until(lambda: fake.count() and fake.frames_sent, "the first answer streams")
        time.sleep(0.5)  # its error frame came: it is numbered and sent to the scribe
        fake.stream_error_after = None
        whole, answers = in_thread(lambda: ask(proxy, "asked twice at once", stream=True))
        time.sleep(1.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    failing.join(20)
    whole.join(20)
    answer = answers[0]
    assert isinstance(answer, httpx.Response) and answer.status_code == 200
    key = answer.headers["x-llmtape-key"]
    assert FileStore(cassettes).entries("default").get(key), "the whole answer was recorded"
    assert ask(proxy, "asked twice at once", stream=True).status_code == 200  # a third time
    proxy.stop()  # the run ends: what it superseded is dropped
    ordinals = FileStore(cassettes).entries("default").get(key)
    assert ordinals is not None and len(ordinals) == 2, f"two whole answers kept: {ordinals}"
