"""The S3 store's local cache shared by several processes (a pytest-xdist run's servers, `serve`
beside `ls`): real `tapeproxy serve` processes replaying from one library on a real SeaweedFS
keep the cache folder under `--cache-size` together, and what they put and evict at once
damages nothing; `ls` of an S3 library reads the objects once, then only listings."""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import json
import os
import random
import shutil
import threading
from pathlib import Path

import httpx

from tapeproxy.settings import MIB
from tests.conftest import MakeProxy
from tests.e2e.test_s3_library import DOWN, cli, objects
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI
from tests.support.seaweed import SeaweedFS
from tests.support.serve import Serve

LIMIT = 10 * MIB
COUNT = 25  # questions of 1 MB, echoed: 25 exchange files of 2 MB, 50 MB in all


def question(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest() * (MIB // 64)


def ask(url: str, n: int) -> bytes:
    """The answer's body, as sent (raw HTTP: what a replay must give back byte for byte)."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": question(n)}]}
    headers = {"authorization": f"Bearer {SECRET_OPENAI}"}
    answer = httpx.post(f"{url}/openai/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    return answer.content


def cache_root(tmp_path: Path) -> Path:
    found = list((tmp_path / "cache" / "tapeproxy" / "s3").iterdir())
    assert len(found) == 1, found
    return found[0]


def objects_bytes(root: Path) -> int:
    """What the cached objects take, walked under the cache's own lock: a picture no put or
    eviction is halfway through."""
    with (root / "objects-by-name.count").open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return sum(p.stat().st_size for p in (root / "objects-by-name").rglob("*") if p.is_file())


def sample(root: Path, stop: threading.Event, seen: list[int]) -> None:
    while not stop.wait(0.02):
        if (root / "objects-by-name.count").exists():
            seen.append(objects_bytes(root))


def entries_match_the_store(seaweed: SeaweedFS, library: str, root: Path) -> int:
    """Every cached object holds the store's bytes under a digest that matches: how many."""
    checked = 0
    for name, data in objects(seaweed, library).items():
        hashed = hashlib.sha256(name.encode()).hexdigest()
        path = root / "objects-by-name" / hashed[:2] / hashed
        if path.exists():
            raw = path.read_bytes()
            digest, body = raw[:64], raw[65:]
            assert digest.decode() == hashlib.sha256(body).hexdigest(), name
            assert body.partition(b"\n")[2] == data, name
            checked += 1
    return checked


def test_three_servers_sharing_one_cache_keep_it_under_the_limit_and_replay_every_byte(
    make_proxy: MakeProxy, fake: FakeUpstream, seaweed: SeaweedFS, s3_library: str, tmp_path: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="big", cassettes=s3_library, cache_size=LIMIT)
    recorded = [ask(recorder.url, n) for n in range(COUNT)]
    recorder.stop()
    fake.stop()  # replay only: every answer comes from the store, through the shared cache
    root = cache_root(tmp_path)
    shutil.rmtree(root / "objects-by-name", ignore_errors=True)  # cold: all read through it
    args = ["--cassettes", s3_library, "--cassette", "big", "--upstream", DOWN, "--repeat", "cycle"]
    servers = [Serve([*args, "--cache-size", "10MiB"], tmp_path) for _ in range(3)]
    assert all("replay ready on" in server.ready for server in servers), servers[0].stop()

    def replay(seed: int) -> list[tuple[int, bytes]]:
        order = [n for n in range(COUNT)] * 2  # twice: what was evicted is read again
        random.Random(seed).shuffle(order)
        return [(n, ask(servers[seed].url, n)) for n in order]

    stop, seen = threading.Event(), list[int]()
    sampler = threading.Thread(target=sample, args=(root, stop, seen))
    sampler.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            replayed = [answer for job in pool.map(replay, range(3)) for answer in job]
    finally:
        stop.set()
        sampler.join()
    stops = [server.stop() for server in servers]
    assert [code for code, _ in stops] == [0, 0, 0], stops
    assert all(body == recorded[n] for n, body in replayed), "every replayed byte as recorded"
    assert len(seen) > 10 and max(seen) <= LIMIT, f"sampled {max(seen)} bytes, limit {LIMIT}"
    at_end = objects_bytes(root)
    assert 0 < at_end <= LIMIT, at_end
    count = (root / "objects-by-name.count").read_bytes().split()
    assert int(count[2]) == at_end, "the shared count is what the folder holds"
    assert entries_match_the_store(seaweed, s3_library, root) >= 3


def test_a_warm_ls_reads_no_object_and_a_cold_one_reads_each_once(
    make_proxy: MakeProxy, seaweed: SeaweedFS, s3_library: str, tmp_path: Path
) -> None:
    """Cold (no summaries, no cached object), `ls` has nothing but the listing to go on: it
    reads each exchange file, and the blobs it uses (an exchange is read whole: a row's MCP
    tool call may be in one, and a missing blob makes the row unreadable), to sum tokens and
    cost. Warm (the summaries kept, the objects evicted or deleted), it lists, reads nothing."""
    recorder = make_proxy(mode="record", cassette="agent", cassettes=s3_library)
    ask(recorder.url, 1)
    ask(recorder.url, 2)
    picture = {"role": "user", "content": "x" * (100 * 1024)}  # stored as a blob, its echo too
    httpx.post(
        f"{recorder.url}/openai/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": [picture]},
        headers={"authorization": f"Bearer {SECRET_OPENAI}"},
    ).raise_for_status()
    recorder.stop()
    stored = objects(seaweed, s3_library)
    blobs = [name for name in stored if "/blobs/" in name]
    exchanges = [name for name in stored if name.startswith("agent/") and "/blobs/" not in name]
    assert len(exchanges) == 3 and blobs, sorted(stored)  # the question's, the echo's runs
    shutil.rmtree(tmp_path / "cache")

    cold = cli("ls", "--cassettes", s3_library, "--json")
    assert cold.returncode == 0, cold.stderr
    root = cache_root(tmp_path)
    read = {p.name for p in (root / "objects-by-name").rglob("*") if p.is_file()}
    assert read == {hashlib.sha256(name.encode()).hexdigest() for name in stored}, (
        "cold: each exchange file read (and cached), and the blobs it uses"
    )

    shutil.rmtree(root / "objects-by-name")  # the object cache cleared, the summaries kept
    os.unlink(root / "objects-by-name.count")
    warm = cli("ls", "--cassettes", s3_library, "--json")
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout) == json.loads(cold.stdout)
    assert not (root / "objects-by-name").exists(), "warm: no object read from the store"
