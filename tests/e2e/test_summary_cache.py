"""The summary cache of `ls` (and report, the viewer's library page) through the real CLI and
the folder store: it sees what changed behind its back, rebuilds what is damaged, and two
processes that update it at once corrupt nothing; no cassette is written."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import tracemalloc
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.engine.keying import request_key, stored_request
from tapeproxy.exchange.model import Exchange, dump_exchange
from tapeproxy.providers import Rulebook, provider_table
from tapeproxy.store.files import FileStore
from tapeproxy.store.state import MAX_STATE, STATE_DIR
from tapeproxy.tools.listing import show
from tapeproxy.tools.summaries import cache_name, cached_rows, dump, load, total_name
from tests.support import files_under
from tests.support.exchanges import exchange

runner = CliRunner()


def library(root: Path, count: int = 5) -> FileStore:
    store = FileStore(root)
    for n in range(count):
        store.write("trip", tokens(n, 10 + n))
    return store


def tokens(n: int, given: int) -> Exchange:
    key = f"{n:064x}"
    return exchange(key, usage={"input_tokens": given, "output_tokens": 1}, seq=n)


def ls(root: Path) -> dict[str, object]:
    result = runner.invoke(app, ["ls", "--cassettes", str(root), "--json"])
    assert result.exit_code == 0, result.output
    [found] = json.loads(result.output)
    assert isinstance(found, dict)
    return found


def cache_file(root: Path) -> Path:
    return root / STATE_DIR / cache_name("trip")


def test_ls_keeps_a_summary_per_file_in_the_state_folder_and_no_cassette_is_written(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cassettes"
    library(root)
    before = files_under(root)
    first = ls(root)
    assert first["exchanges"] == 5 and first["input_tokens"] == sum(range(10, 15))
    assert len(load(cache_file(root).read_bytes(), "trip")) == 5
    assert ls(root) == first, "warm: the same answer from the cache"
    assert files_under(root) == before, "only the state folder was written"


def test_a_file_changed_added_or_deleted_behind_its_back_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    store = library(root)
    ls(root)
    path = root / "trip" / f"{0:064x}.json"
    path.write_bytes(dump_exchange(tokens(0, 99)))  # in place: same inode, same size
    assert ls(root)["input_tokens"] == sum(range(11, 15)) + 99
    store.write("trip", tokens(7, 1000))
    assert ls(root)["exchanges"] == 6
    (root / "trip" / f"{1:064x}.json").unlink()
    found = ls(root)
    assert found["exchanges"] == 5 and found["input_tokens"] == 12 + 13 + 14 + 99 + 1000
    assert len(load(cache_file(root).read_bytes(), "trip")) == 5, "the deleted one dropped"


def test_a_damaged_cache_is_never_trusted_and_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    library(root)
    truth = ls(root)
    raw = cache_file(root).read_bytes()
    total = root / STATE_DIR / total_name("trip")  # the cassette's sum, kept by its stamps
    summed = total.read_bytes()
    total.write_bytes(summed.replace(b'"input_tokens": 60', b'"input_tokens": 61'))
    assert total.read_bytes() != summed
    assert ls(root) == truth, "a damaged sum is not trusted"
    damaged = raw.replace(b"10,", b"77,", 1)  # a flipped digit
    assert damaged != raw
    cache_file(root).write_bytes(damaged)
    total.unlink()
    assert ls(root) == truth
    assert load(cache_file(root).read_bytes(), "trip"), "written again, whole"

    entries = load(cache_file(root).read_bytes(), "trip")
    name = next(iter(entries))
    entries[name] = [entries[name][0], "not", "a", "row"]  # a sound file, a bad entry
    cache_file(root).write_bytes(dump(entries, "trip"))
    total.unlink()
    assert ls(root) == truth
    assert len(load(cache_file(root).read_bytes(), "trip")[name]) > 4, "that entry rebuilt"

    cache_file(root).write_bytes(b"\x00garbage")
    total.write_bytes(b"\x00garbage")
    assert ls(root) == truth


def churn(root: str, seed: int) -> None:
    """Rewrite files of the cassette and list it, over and over, as another process does."""
    store = FileStore(root)
    for turn in range(40):
        n = (seed + turn) % 5
        store.write("trip", tokens(n, 10 + n + (turn % 2)), fresh=True)
        cached_rows(store, "trip")


def test_two_processes_updating_it_at_once_corrupt_nothing(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    library(root)
    ls(root)
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=churn, args=(str(root), seed)) for seed in (0, 3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    assert load(cache_file(root).read_bytes(), "trip"), "a whole cache, whoever wrote last"
    store = FileStore(root)
    assert cached_rows(store, "trip") == show(store, "trip"), "and true to the files"
    leftovers = [p for p in (root / STATE_DIR).rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers and os.listdir(root / "trip")


def keyed_library(root: Path) -> FileStore:
    """Five recordings keyed as tapeproxy keys them (verify checks each key)."""
    rules = Rulebook.build(provider_table({}), ()).for_upstream("openai")
    store = FileStore(root)
    for n in range(5):
        base = exchange(seq=n)
        request = base.request.model_copy(update={"body": {"json": {"question": n}}})
        key = request_key(stored_request(request), rules)
        store.write(
            "trip",
            base.model_copy(update={"key": key, "request": request, "rules": rules.fingerprint()}),
        )
    return store


def verify(root: Path) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(app, ["verify", "trip", "--cassettes", str(root), "--json"])
    return result.exit_code, json.loads(result.output)


def test_verify_reads_again_only_what_changed_and_trusts_no_damaged_note(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    keyed_library(root)
    assert verify(root)[0] == 0
    kept = root / STATE_DIR / "verified"
    [note] = kept.iterdir()
    assert verify(root)[0] == 0 and verify(root)[1][0]["checked"] == 5
    path = sorted((root / "trip").glob("*.json"))[2]
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"question": ', b'"question":-'))  # same size, same inode
    code, found = verify(root)
    assert code == 1 and found[0]["problems"][0]["file"] == path.name, found
    path.write_bytes(raw)
    assert verify(root)[0] == 0
    note.write_bytes(note.read_bytes().replace(b'"ok"', b'"ko"'))  # damaged: not trusted
    path.write_bytes(b"{}")
    assert verify(root)[0] == 1


def test_a_cache_well_formed_but_holding_values_of_other_types_is_never_trusted(
    tmp_path: Path,
) -> None:
    """A cache file whose digest matches (written by hand, or by a hostile hand) but whose
    rows hold a value of another type (a list for a text, a text for a count): ls neither
    crashes on it nor believes it, for every field."""
    root = tmp_path / "cassettes"
    library(root)
    truth = ls(root)
    entries = load(cache_file(root).read_bytes(), "trip")
    total = root / STATE_DIR / total_name("trip")
    others: list[Any] = [[1], {"x": 1}, "77", 77, True]
    for field in range(1, len(next(iter(entries.values()))) - 1):
        for other in others:
            name = next(iter(entries))
            if entries[name][field] is None or type(other) is type(entries[name][field]):
                continue  # of its type (a field that may be None may be this too)
            hostile = dict(entries)
            hostile[name] = [*entries[name][:field], other, *entries[name][field + 1 :]]
            cache_file(root).write_bytes(dump(hostile, "trip"))
            total.unlink(missing_ok=True)
            assert ls(root) == truth, (field, other)
    cache_file(root).write_bytes(dump(entries, "trip"))
    assert ls(root) == truth
    kept: dict[str, Any] = json.loads(total.read_bytes().partition(b"\n")[2])
    for field in kept["summary"]:
        for other in [*others[:3], 1.5, None]:
            if field == "cost_usd" or type(other) is type(kept["summary"][field]):
                continue  # (a cost of None or a number: either may be true)
            summed = {**kept, "summary": {**kept["summary"], field: other}}
            body = json.dumps(summed).encode()
            total.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
            assert ls(root) == truth, (field, other)


def test_a_file_changed_again_within_its_mtime_resolution_is_seen(tmp_path: Path) -> None:
    """On a file system that keeps mtimes to the second (or two), a file changed in place
    again in the same tick keeps its inode, size and mtime: a row read in that tick must not
    be trusted afterwards (here the tick is made by putting the mtime back)."""
    root = tmp_path / "cassettes"
    library(root)
    path = root / "trip" / f"{0:064x}.json"
    was = path.stat().st_mtime_ns
    ls(root)
    path.write_bytes(dump_exchange(tokens(0, 99)))  # in place: same inode, same size
    os.utime(path, ns=(was, was))
    assert ls(root)["input_tokens"] == sum(range(11, 15)) + 99


def test_a_huge_cache_file_is_not_read_and_is_rebuilt(tmp_path: Path) -> None:
    """A cache file far larger than any tapeproxy writes (sparse here: no disk taken) is not
    read into memory; ls answers from the files and writes a cache of the right size."""
    root = tmp_path / "cassettes"
    library(root)
    truth = ls(root)
    with cache_file(root).open("r+b") as handle:
        handle.truncate(MAX_STATE + 1)
    (root / STATE_DIR / total_name("trip")).unlink()
    tracemalloc.start()
    try:
        assert ls(root) == truth
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_STATE / 4, f"{peak} bytes at the peak: the file was read"
    assert cache_file(root).stat().st_size < 2**20, "rebuilt"


def test_a_file_changed_in_place_with_its_old_mtime_put_back_is_seen(tmp_path: Path) -> None:
    """`cp -p`, `touch -r`, `rsync -t`: a file rewritten in place (same inode, same size)
    with an older mtime given back to it; its change time says it changed."""
    root = tmp_path / "cassettes"
    library(root)
    path = root / "trip" / f"{0:064x}.json"
    past = path.stat().st_mtime_ns - 60 * 10**9  # long enough ago to be trusted
    for one in (root / "trip").iterdir():
        os.utime(one, ns=(past, past))
    ls(root)
    path.write_bytes(dump_exchange(tokens(0, 99)))  # in place: same inode, same size
    os.utime(path, ns=(past, past))
    assert ls(root)["input_tokens"] == sum(range(11, 15)) + 99
