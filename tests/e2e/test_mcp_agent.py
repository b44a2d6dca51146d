"""The MCP example agent: its model calls and its tool calls in one cassette. CI replays it
offline; recording it today gives the committed cassette; with `--live openai` the model runs
live while every tool call is served from the cassette, and a tool call the cassette lacks is
refused with a JSON-RPC error, never run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tapeproxy.exchange.model import load_exchange
from tapeproxy.providers import BUILTIN
from tapeproxy.settings import Settings
from tests.e2e.mcp_example import ANSWER, CASSETTE, record, run_agent
from tests.fakes.mcp_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import ProxyServer, closed_port, committed, copy_committed


def settings(library: Path, model: str, tools: str, **more: Any) -> Settings:
    upstream = {**{name: model for name in BUILTIN}, "tools": tools}
    values = {"port": 0, "cassettes": library, "cassette": CASSETTE, "upstream": upstream}
    return Settings.model_validate({**values, **more})


def test_the_mcp_agent_replays_its_cassette_offline(tmp_path: Path) -> None:
    assert committed(CASSETTE), "no committed cassette"
    copy_committed(CASSETTE, tmp_path)
    dead = f"http://127.0.0.1:{closed_port()}"
    with ProxyServer(settings(tmp_path, dead, dead)) as proxy:
        output = run_agent(proxy.url)
        stats = proxy.stats
    assert output.strip().splitlines()[-1] == ANSWER
    assert stats["misses"] == 0 and stats["upstream_calls"] == 0
    assert stats["replayed"] == len(committed(CASSETTE))


def test_recording_the_mcp_agent_today_gives_its_committed_cassette(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    assert record(tmp_path, fake).strip().splitlines()[-1] == ANSWER
    kept = {p.name: p for p in committed(CASSETTE)}
    recorded = {p.name: p for p in (tmp_path / CASSETTE).glob("*.json")}
    assert sorted(recorded) == sorted(kept)
    for name, path in recorded.items():
        new, old = load_exchange(path.read_bytes()), load_exchange(kept[name].read_bytes())
        assert old.same_recording(new), f"{CASSETTE}/{name} differs from the commit"
        assert b"sk-tapeproxy-recording" not in path.read_bytes()


def tool_call_to(city: str) -> Reply:
    """The model's answer that calls get_weather for `city`."""
    call = {"name": "get_weather", "arguments": f'{{"city":"{city}"}}'}
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_lima", "type": "function", "function": call}],
    }
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return Reply(body={"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]})


def test_with_the_model_live_tool_calls_stay_frozen_and_new_ones_are_refused(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    copy_committed(CASSETTE, tmp_path)
    with ToolServer() as tools:
        replay = settings(tmp_path, fake.url, tools.url, mode="replay", live=["openai"])
        with ProxyServer(replay) as proxy:
            # Another question: the live model asks for Paris's weather again, from the tape.
            frozen = run_agent(proxy.url, "Paris: shorts or a coat?")
            proxy.put_cassette(cassette=CASSETTE)  # the next run serves the tape anew
            fake.script("/v1/chat/completions", tool_call_to("Lima"))
            refused = run_agent(proxy.url, "And in Lima?")
            stats = proxy.stats
        assert tools.calls == [], "no tool call reached the tool server"
    assert frozen.strip().splitlines()[-1] == ANSWER
    assert fake.count("/v1/chat/completions") == 4  # the model ran live, twice a run
    assert "tool error -32001: tool call get_weather" in refused
    assert '{"city": "Lima"}' in refused and "never sent to the tool server" in refused
    assert stats["misses"] == 1
