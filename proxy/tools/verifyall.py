"""`verify` of many cassettes at once: each cassette checked whole by `verify.verify`, the
cassettes shared among worker processes when the library is large and a local folder (the
checks are Python: one process uses one core, and a cold library is read file by file)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tapeproxy.errors import TapeproxyError
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.verify import RulesFor, Verdict, verify

# Fewer files than this are checked in this process: a worker's start costs more than it saves.
PARALLEL_FROM = 2_000
MOST_WORKERS = 8  # each holds its own copy of what it reads (bounded memory, times N)

Job = tuple[CassetteStore, RulesFor, bool, Scrubber | None]
_JOB: Job | None = None  # what a worker checks with, inherited through fork (never pickled)


def verify_all(
    store: CassetteStore,
    names: list[str],
    rules_for: RulesFor,
    upgrade: bool = False,
    keys: Scrubber | None = None,
    forkable: bool = False,
) -> list[Verdict]:
    """Each cassette's verdict, in the order of `names`. `forkable`: the store may be used
    in a forked child (a local folder; an S3 client's threads would not survive a fork)."""
    job: Job = (store, rules_for, upgrade, keys)
    workers = _workers(store, names) if forkable else 1
    if workers <= 1:
        return [verify(store, name, rules_for, upgrade, keys) for name in names]
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(workers, context, _adopt, (job,)) as pool:
            return list(pool.map(_one, names))
    except BrokenProcessPool as exc:  # Ctrl-C, or the system killed one (out of memory?)
        raise TapeproxyError(
            "verify stopped: a worker process ended before its cassettes were checked "
            "(interrupted, or killed by the system); run it again"
        ) from exc


def _workers(store: CassetteStore, names: list[str]) -> int:
    """How many processes check `names`: one per core (at most MOST_WORKERS), where fork is
    safe (Linux: macOS's system libraries are not fork-safe) and the library is large."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if len(names) < 2 or cores < 2 or not sys.platform.startswith("linux"):
        return 1
    files = 0
    for name in names:  # a listing each: nothing is read
        files += len(store.names(name))
        if files >= PARALLEL_FROM:
            return min(cores, len(names), MOST_WORKERS)
    return 1


def _adopt(job: Job) -> None:
    global _JOB
    _JOB = job
    # A parent killed alone (a CI job's timeout, the OOM killer) would leave its workers
    # waiting for work for ever, holding its output open: each ends once it is gone.
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_orphaned, args=(parent.sentinel,), daemon=True).start()
    # Ctrl-C reaches the whole process group: a worker just ends (no traceback of its own),
    # and the parent stops as one process would; unless it was started with Ctrl-C ignored
    # (`verify &` in a script), which its workers ignore too.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _orphaned(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])  # readable once the parent has ended
    os._exit(1)


def _one(name: str) -> Verdict:
    assert _JOB is not None, "a worker is given its job as it starts"
    store, rules_for, upgrade, keys = _JOB
    return verify(store, name, rules_for, upgrade, keys)
