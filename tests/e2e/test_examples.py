"""Each example agent replays its committed cassette offline (the upstream unreachable), and
recording it today gives that cassette again, file for file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tapeproxy.exchange.model import load_exchange
from tapeproxy.providers import BUILTIN
from tapeproxy.settings import Settings
from tests.e2e.examples import EXAMPLES, Example, record
from tests.fakes.upstream import FakeUpstream
from tests.support import ProxyServer, closed_port, committed, copy_committed

ids = pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])


def usable(example: Example) -> Example:
    why = example.missing()
    if why:
        pytest.skip(f"{example.name}: {why}")
    return example


@ids
def test_the_example_replays_its_cassette_offline(example: Example, tmp_path: Path) -> None:
    usable(example)
    assert committed(example.cassette), "no committed cassette"
    copy_committed(example.cassette, tmp_path)
    dead = f"http://127.0.0.1:{closed_port()}"
    settings = Settings.model_validate(
        {
            "port": 0,
            "cassettes": tmp_path,
            "cassette": example.cassette,
            "upstream": {name: dead for name in BUILTIN},
        }
    )
    with ProxyServer(settings) as proxy:
        output = example.run(proxy.url)
        stats = proxy.stats
    assert output.strip().splitlines()[-1] == example.answer
    assert stats["misses"] == 0 and stats["upstream_calls"] == 0
    assert stats["replayed"] == len(committed(example.cassette))
    assert [run["unused_count"] for run in stats["runs"]] == [0]


@ids
def test_recording_the_example_today_gives_its_committed_cassette(
    example: Example, fake: FakeUpstream, tmp_path: Path
) -> None:
    usable(example)
    output = record(example, tmp_path, fake)
    assert output.strip().splitlines()[-1] == example.answer
    kept = {p.name: p for p in committed(example.cassette)}
    recorded = {p.name: p for p in (tmp_path / example.cassette).glob("*.json")}
    assert sorted(recorded) == sorted(kept)
    for name, path in recorded.items():
        new, old = load_exchange(path.read_bytes()), load_exchange(kept[name].read_bytes())
        assert old.same_recording(new), f"{example.cassette}/{name} differs from the commit"
        assert b"sk-tapeproxy-recording" not in path.read_bytes()
