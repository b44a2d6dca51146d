"""`tapeproxy verify` of a large local library shares its cassettes among worker processes:
run as a user runs it (its own process), it finds exactly what a check of each cassette in
turn finds, problems, leftovers and older files included, and `--upgrade` writes from the
workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tapeproxy.engine.keying import request_key, stored_request
from tapeproxy.exchange.blobs import BLOB_MIN
from tapeproxy.exchange.model import dump_exchange
from tapeproxy.providers import Rulebook, provider_table
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.store.files import FileStore
from tapeproxy.tools.verify import verify
from tapeproxy.tools.verifyall import PARALLEL_FROM, _workers
from tests.support.exchanges import exchange
from tests.support.serve import TAPEPROXY

RULES = Rulebook.build(provider_table({}), ()).for_upstream("openai")
CASSETTES = ["a", "b", "c", "d/e"]


def keyed_library(root: Path) -> FileStore:
    """Enough keyed recordings over four cassettes to be checked in parallel."""
    store = FileStore(root)
    each = PARALLEL_FROM // len(CASSETTES) + 10
    for cassette in CASSETTES:
        for n in range(each):
            base = exchange(seq=n)
            body = {"json": {"question": f"{cassette} {n}"}}
            request = base.request.model_copy(update={"body": body})
            key = request_key(stored_request(request), RULES)
            update = {"key": key, "request": request, "rules": RULES.fingerprint()}
            store.write(cassette, base.model_copy(update=update), fresh=True)
    return store


def spoil(root: Path) -> Path:
    """A problem in one cassette, a leftover in another, and an older file with a large
    string (an `--upgrade` puts it out as a blob) in a third; the older file's path."""
    first = sorted((root / "b").glob("*.json"))[0]
    first.write_bytes(first.read_bytes().replace(b'"question"', b'"questions"'))
    (root / "c" / ".0123.json.x1y2.tmp").write_bytes(b"{")
    older = sorted((root / "d" / "e").glob("*.json"))[3]
    store = FileStore(root)
    key = older.name.removesuffix(".json")
    found = store.read("d/e", key, 1)
    big = {"json": {"question": "d/e 3", "note": "n" * BLOB_MIN}}
    request = found.request.model_copy(update={"body": big})
    key = request_key(stored_request(request), RULES)
    older.unlink()
    moved = older.with_name(f"{key}.json")
    moved.write_bytes(dump_exchange(found.model_copy(update={"key": key, "request": request})))
    return moved


def cli(root: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    done = subprocess.run(
        [*TAPEPROXY, "verify", "--cassettes", str(root), "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return done.returncode, json.loads(done.stdout)


def test_a_large_library_is_checked_in_parallel_and_found_as_each_cassette_alone(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cassettes"
    store = keyed_library(root)
    older = spoil(root)
    if len(os.sched_getaffinity(0)) >= 2:
        assert _workers(store, store.cassettes()) >= 2, "a library this size is shared out"
    alone = [verify(store, name, lambda _: RULES, keys=Scrubber.build()) for name in CASSETTES]
    code, found = cli(root)
    assert code == 1
    assert found == [
        {"cassette": v.cassette, "checked": v.checked, "outdated": v.outdated}
        | {"problems": v.problems, "upgraded": v.upgraded, "warnings": v.warnings}
        for v in alone
    ]
    by_name = {v["cassette"]: v for v in found}
    assert [p["file"] for p in by_name["b"]["problems"]] == [sorted(os.listdir(root / "b"))[0]]
    assert by_name["c"]["warnings"] and by_name["d/e"]["outdated"] == [older.name]
    code, found = cli(root, "--upgrade")
    assert {v["cassette"]: v["upgraded"] for v in found}["d/e"] == [older.name]
    assert json.loads(older.read_text())["schema_version"] == 2
    assert len(os.listdir(root / "d" / "e" / "blobs")) == 1
    assert cli(root)[1] == cli(root)[1], "the verdicts kept by the workers hold"


@pytest.mark.parametrize("count", [1, PARALLEL_FROM - 1])
def test_a_small_library_is_checked_in_this_process(tmp_path: Path, count: int) -> None:
    store = FileStore(tmp_path)
    for n in range(count):
        store.write("a" if n % 2 else "b", exchange(key=f"{n:064x}"), fresh=True)
    assert _workers(store, store.cassettes()) == 1


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: checked in one process")
def test_an_ignored_ctrl_c_is_ignored_by_the_workers_too(tmp_path: Path) -> None:
    """A verify started with Ctrl-C ignored (`verify &` in a script: the shell ignores SIGINT
    for it) goes on when its process group gets one, as a verify in one process does."""
    root = tmp_path / "cassettes"
    keyed_library(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    process = subprocess.Popen(
        [*TAPEPROXY, "verify", "--cassettes", str(root), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as `sh` does for `&`
    )
    while process.poll() is None and not _children(process.pid):
        time.sleep(0.01)  # polled: the workers start once the library is listed
    assert process.poll() is None, "a library this size is checked by worker processes"
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert [v["cassette"] for v in json.loads(out)] == CASSETTES


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: checked in one process")
def test_the_workers_of_a_killed_verify_end_too(tmp_path: Path) -> None:
    """A verify killed as a CI job's timeout or the OOM killer kills (its process alone) leaves
    no worker behind holding its output open (its reader would wait for ever)."""
    root = tmp_path / "cassettes"
    keyed_library(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    process = subprocess.Popen(
        [*TAPEPROXY, "verify", "--cassettes", str(root), "--json"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    workers: list[str] = []
    while process.poll() is None and not workers:
        workers = _children(process.pid)
        time.sleep(0.01)  # polled: the workers start once the library is listed
    assert workers, "a library this size is checked by worker processes"
    process.kill()
    try:
        process.communicate(timeout=30)  # ends once no worker holds the output open
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while [pid for pid in workers if _running(pid)] and time.monotonic() < deadline:
        time.sleep(0.01)  # polled: a worker that closed its output is ending
    assert not [pid for pid in workers if _running(pid)]


def _running(pid: str) -> bool:
    """Whether the process is there and not ended (a zombie not yet reaped has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in "ZX"
    except OSError:
        return False
