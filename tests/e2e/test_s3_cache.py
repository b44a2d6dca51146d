"""The S3 store's local read-through cache stays under `--cache-size` (least recently used
out first), through the real server, the openai SDK and a real SeaweedFS."""

from __future__ import annotations

import hashlib
from pathlib import Path

import openai
import pytest

from tapeproxy.settings import MIB
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI

LIMIT = 10 * MIB


def cache_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def ask_all(url: str, count: int) -> list[str]:
    """`count` questions of 1 MB each; the fake echoes each (so 2 MB an exchange)."""
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    said = []
    for n in range(count):
        text = hashlib.sha256(str(n).encode()).hexdigest() * (MIB // 64)
        answer = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
        )
        said.append(hashlib.sha256((answer.choices[0].message.content or "").encode()).hexdigest())
    return said


def test_the_cache_stays_under_its_limit_across_a_replay_of_50_mb(
    make_proxy: MakeProxy,
    fake: FakeUpstream,
    s3_library: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = {"cassettes": s3_library, "cache_size": LIMIT}
    recorder = make_proxy(mode="record", cassette="big", **settings)
    said = ask_all(recorder.url, 25)
    recorder.stop()
    assert cache_bytes(tmp_path / "cache") <= LIMIT
    fake.stop()  # replay only: every answer comes from the store, through the cache
    replayer = make_proxy(mode="replay", cassette="big", **settings)
    assert ask_all(replayer.url, 25) == said
    replayer.stop()
    assert cache_bytes(tmp_path / "cache") <= LIMIT
    again = make_proxy(mode="replay", cassette="big", **settings)  # what is left serves too
    assert ask_all(again.url, 25) == said
    again.stop()
    cached = cache_bytes(tmp_path / "cache")
    assert 0 < cached <= LIMIT, f"{cached} bytes cached, over the {LIMIT} limit"
