"""The bundled cassettes/example: valid under today's schema and rules, and replayable."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import openai

from tapeproxy.engine.keying import RequestParts, request_key
from tapeproxy.exchange.model import load_exchange
from tapeproxy.providers import BUILTIN
from tapeproxy.store.protocol import exchange_file
from tests.conftest import MakeProxy
from tests.support import SECRET_ANTHROPIC, SECRET_OPENAI, committed, copy_committed


def test_every_example_file_is_named_by_the_key_of_its_request() -> None:
    files = committed("example")
    assert len(files) == 3
    for path in files:
        exchange = load_exchange(path.read_bytes())
        parts = RequestParts.from_dict(exchange.request.model_dump())
        rules = BUILTIN[parts.upstream].rules
        assert request_key(parts, rules) == exchange.key
        assert exchange_file(exchange.key, exchange.ordinal) == path.name
        assert exchange.rules == rules.fingerprint()


def test_the_sdks_replay_the_example_offline(make_proxy: MakeProxy, cassettes: Path) -> None:
    copy_committed("example", cassettes)
    before = {p.name: p.read_bytes() for p in (cassettes / "example").iterdir()}
    proxy = make_proxy(
        mode="replay",
        cassette="example",
        upstream={"openai": "http://127.0.0.1:9", "anthropic": "http://127.0.0.1:9"},
    )
    question = [{"role": "user", "content": "What is the capital of France?"}]
    oai = openai.OpenAI(base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    chat = oai.chat.completions.create(model="gpt-4o-mini", messages=question)  # type: ignore[arg-type]
    stream = oai.chat.completions.create(  # type: ignore[call-overload]
        model="gpt-4o-mini",
        messages=question,
        stream=True,
        stream_options={"include_usage": True},
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert chat.choices[0].message.content == streamed == "echo: What is the capital of France?"
    ant = anthropic.Anthropic(
        base_url=proxy.url + "/anthropic",
        api_key=SECRET_ANTHROPIC,
        max_retries=0,
        default_headers={"anthropic-version": "2023-06-01"},
    )
    with ant.messages.stream(model="claude-test-1", max_tokens=64, messages=question) as events:  # type: ignore[arg-type]
        text = events.get_final_text()
    assert text == chat.choices[0].message.content
    assert proxy.stats["upstream_calls"] == 0
    after = {p.name: p.read_bytes() for p in (cassettes / "example").iterdir()}
    assert after == before
    assert json.loads(before[sorted(before)[0]])["schema_version"] == 1
