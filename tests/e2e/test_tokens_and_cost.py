"""Tokens and cost as `tapeproxy ls` and `show` report them, for answers recorded by the real
server from the fake upstream in every dialect and every form an answer is stored in."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_GEMINI, SECRET_OPENAI

runner = CliRunner()
USER = [{"role": "user", "content": "What is the capital of France?"}]
CONTENTS = {"contents": [{"parts": [{"text": "hi there you"}]}]}
GEMINI = "/gemini/v1beta/models/gemini-2.0-flash"
# An embeddings answer whose float (-0.000016) Python prints as -1.6e-05: no JSON layout gives
# back its bytes, so the answer is stored as text.
EMBEDDING_AS_TEXT = (
    '{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": '
    '[-0.000016, 0.25]}], "model": "text-embedding-3-small", '
    '"usage": {"prompt_tokens": 8, "total_tokens": 8}}'
)
GEMINI_ARRAY = [
    {
        "candidates": [{"content": {"parts": [{"text": "Par"}]}}],
        "modelVersion": "gemini-2.0-flash-001",
    },
    {
        "candidates": [{"content": {"parts": [{"text": "is"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 3},
    },
]
KEYS = {
    "authorization": f"Bearer {SECRET_OPENAI}",
    "x-api-key": SECRET_ANTHROPIC,
    "anthropic-version": "2023-06-01",
}
Usage = Callable[[list[Any]], tuple[int, int]]


def last(payloads: list[Any], pick: Callable[[Any], Any]) -> Any:
    """What `pick` finds in the last payload where it finds something."""
    found = [pick(p) for p in payloads if isinstance(p, dict) and pick(p)]
    return found[-1]


def openai_chat(payloads: list[Any]) -> tuple[int, int]:
    block = last(payloads, lambda p: p.get("usage"))
    return block["prompt_tokens"], block.get("completion_tokens", 0)


def openai_responses(payloads: list[Any]) -> tuple[int, int]:
    block = last(payloads, lambda p: (p.get("response") or p).get("usage"))
    return block["input_tokens"], block["output_tokens"]


def anthropic(payloads: list[Any]) -> tuple[int, int]:
    started = [p["message"]["usage"] for p in payloads if p.get("type") == "message_start"]
    block = last(payloads, lambda p: p.get("usage"))
    return (started or [block])[0]["input_tokens"], block["output_tokens"]


def gemini(payloads: list[Any]) -> tuple[int, int]:
    block = last(payloads, lambda p: p.get("usageMetadata"))
    return block["promptTokenCount"], block["candidatesTokenCount"]


def ollama(payloads: list[Any]) -> tuple[int, int]:
    done = last(payloads, lambda p: p if p.get("done") else None)
    return done["prompt_eval_count"], done["eval_count"]


@dataclass(frozen=True)
class Case:
    path: str
    body: dict[str, Any]
    usage: Usage
    reply: Reply | None = None  # a canned answer of the fake's, for one stored form


CASES: dict[str, Case] = {
    "openai-chat": Case(
        "/openai/v1/chat/completions", {"model": "gpt-4o-mini", "messages": USER}, openai_chat
    ),
    "openai-chat-stream": Case(
        "/openai/v1/chat/completions",
        {
            "model": "gpt-4o",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        openai_chat,
    ),
    "openai-responses": Case(
        "/openai/v1/responses", {"model": "gpt-4.1", "input": "hi there"}, openai_responses
    ),
    "openai-responses-stream": Case(
        "/openai/v1/responses",
        {"model": "gpt-4.1", "input": "hi there", "stream": True},
        openai_responses,
    ),
    "openai-embeddings-as-text": Case(
        "/openai/v1/embeddings",
        {"model": "text-embedding-3-small", "input": "a b c"},
        openai_chat,
        Reply(body=EMBEDDING_AS_TEXT, headers={"content-type": "application/json"}),
    ),
    "mistral-chat-stream": Case(
        "/mistral/v1/chat/completions",
        {
            "model": "mistral-large-2411",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        openai_chat,
    ),
    "anthropic": Case(
        "/anthropic/v1/messages",
        {"model": "claude-3-5-haiku-20241022", "max_tokens": 9, "messages": USER},
        anthropic,
    ),
    "anthropic-stream": Case(
        "/anthropic/v1/messages",
        {"model": "claude-3-5-haiku-20241022", "max_tokens": 9, "messages": USER, "stream": True},
        anthropic,
    ),
    "gemini": Case(f"{GEMINI}:generateContent?key={SECRET_GEMINI}", CONTENTS, gemini),
    "gemini-sse": Case(
        f"{GEMINI}:streamGenerateContent?alt=sse&key={SECRET_GEMINI}", CONTENTS, gemini
    ),
    "gemini-json-stream": Case(
        f"{GEMINI}:streamGenerateContent?key={SECRET_GEMINI}", CONTENTS, gemini
    ),
    "gemini-one-json-array": Case(
        f"{GEMINI}:streamGenerateContent?key={SECRET_GEMINI}",
        {"contents": [{"parts": [{"text": "array"}]}]},
        gemini,
        Reply(body=GEMINI_ARRAY),
    ),
    "ollama-chat-stream": Case("/ollama/api/chat", {"model": "llama3.2", "messages": USER}, ollama),
    "ollama-generate": Case(
        "/ollama/api/generate", {"model": "llama3.2", "prompt": "hi you", "stream": False}, ollama
    ),
}


def decoded(answer: httpx.Response) -> list[Any]:
    """The JSON payloads the client got: a body, SSE data lines, NDJSON lines, an array."""
    text = answer.text
    if "text/event-stream" in answer.headers.get("content-type", ""):
        lines = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        return [json.loads(line) for line in lines if line.startswith("{")]
    if "ndjson" in answer.headers.get("content-type", ""):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    value = json.loads(text)
    return value if isinstance(value, list) else [value]


def record_every_case(make_proxy: MakeProxy, fake: FakeUpstream) -> dict[str, tuple[int, int]]:
    """Each case into its own cassette; the usage numbers its client received."""
    proxy = make_proxy(mode="record")
    received = {}
    for name, case in CASES.items():
        if case.reply is not None:
            fake.script("/" + case.path.split("?")[0].split("/", 2)[2], case.reply)
        answer = httpx.post(
            proxy.url + case.path, json=case.body, headers={**KEYS, "x-tapeproxy-cassette": name}
        )
        assert answer.status_code == 200, (name, answer.text)
        received[name] = case.usage(decoded(answer))
    proxy.stop()
    return received


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_ls_json_token_counts_equal_the_usage_the_fake_sent_in_every_dialect(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    received = record_every_case(make_proxy, fake)
    code, out = run("ls", "--cassettes", str(cassettes), "--json")
    assert code == 0, out
    listed = {c["name"]: c for c in json.loads(out)}
    assert set(listed) == set(CASES)
    for name, (input_tokens, output_tokens) in received.items():
        assert input_tokens > 0, name
        assert (listed[name]["input_tokens"], listed[name]["output_tokens"]) == (
            input_tokens,
            output_tokens,
        ), name
        assert listed[name]["exchanges"] == 1
    stored = json.loads(next((cassettes / "openai-embeddings-as-text").glob("*.json")).read_text())
    assert "text" in stored["response"]["body"], "the case stores its answer as text"
    array = json.loads(next((cassettes / "gemini-one-json-array").glob("*.json")).read_text())
    assert isinstance(array["response"]["body"]["json"], list), "stored as one JSON array"
    # priced models cost something; the fake's llama has no price: null, never a guess
    assert listed["openai-chat"]["cost_usd"] == pytest.approx((6 * 0.15 + 7 * 0.6) / 1e6)
    assert all(listed[n]["cost_usd"] > 0 for n in CASES if not n.startswith("ollama")), listed
    assert listed["ollama-chat-stream"]["cost_usd"] is None
    assert listed["ollama-chat-stream"]["unpriced_models"] == ["llama3.2"]


def record_chat(make_proxy: MakeProxy, *models: str) -> None:
    proxy = make_proxy(mode="record")
    for model in models:
        body = {"model": model, "messages": USER}
        answer = httpx.post(proxy.url + "/openai/v1/chat/completions", json=body, headers=KEYS)
        assert answer.status_code == 200
    proxy.stop()


def cost(out: str) -> Any:
    [cassette] = json.loads(out)
    return cassette["cost_usd"]


def test_a_user_price_file_overrides_the_shipped_one_from_flag_variable_or_toml(
    make_proxy: MakeProxy, tmp_path: Path, cassettes: Path
) -> None:
    record_chat(make_proxy, "gpt-4o-mini")  # 6 tokens in, 7 out
    shipped = (6 * 0.15 + 7 * 0.6) / 1e6
    assert cost(run("ls", "--cassettes", str(cassettes), "--json")[1]) == pytest.approx(shipped)
    own = tmp_path / "prices.json"
    own.write_text(json.dumps({"models": {"gpt-4o-mini": {"input": 1_000_000, "output": 0}}}))
    flag = run("ls", "--cassettes", str(cassettes), "--prices", str(own), "--json")
    assert cost(flag[1]) == 6.0
    variable = run(
        "ls", "--cassettes", str(cassettes), "--json", env={"TAPEPROXY_PRICES": str(own)}
    )
    assert cost(variable[1]) == 6.0
    toml = tmp_path / "tapeproxy.toml"
    toml.write_text(f'prices = "{own}"\n')
    from_file = run("ls", "--cassettes", str(cassettes), "--config", str(toml), "--json")
    assert cost(from_file[1]) == 6.0
    code, out = run("show", "default", "--cassettes", str(cassettes), "--prices", str(own))
    assert code == 0 and "$6.000000" in out


def test_a_model_without_a_price_costs_unknown_never_a_guess(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record_chat(make_proxy, "gpt-4o-mini", "gpt-4o-mini-preview-x")
    code, out = run("show", "default", "--cassettes", str(cassettes), "--json")
    assert code == 0
    costs = {row["model"]: row["cost_usd"] for row in json.loads(out)["exchanges"]}
    assert costs["gpt-4o-mini-preview-x"] is None and costs["gpt-4o-mini"] > 0
    code, out = run("show", "default", "--cassettes", str(cassettes))
    assert "unknown" in out
    [summary] = json.loads(run("ls", "--cassettes", str(cassettes), "--json")[1])
    assert summary["cost_usd"] == costs["gpt-4o-mini"], "the known part, with the rest named"
    assert summary["unpriced"] == 1 and summary["unpriced_models"] == ["gpt-4o-mini-preview-x"]


@pytest.mark.parametrize(
    "content",
    ['{"models": {"m": {"output": 1}}}', "not json", '{"models": {"m": {"input": -1}}}'],
)
def test_a_bad_price_file_is_a_clear_error(
    make_proxy: MakeProxy, tmp_path: Path, cassettes: Path, content: str
) -> None:
    record_chat(make_proxy, "gpt-4o-mini")
    own = tmp_path / "prices.json"
    own.write_text(content)
    code, out = run("ls", "--cassettes", str(cassettes), "--prices", str(own), "--json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["type"] == "config_error" and str(own) in error["message"]
    code, out = run("ls", "--cassettes", str(cassettes), "--prices", str(tmp_path / "none"))
    assert code == 2 and "cannot be read" in out


def test_a_stream_without_a_usage_block_has_unknown_tokens_and_counts_as_unpriced(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}  # no include_usage
    answer = httpx.post(proxy.url + "/openai/v1/chat/completions", json=body, headers=KEYS)
    assert answer.status_code == 200
    proxy.stop()
    code, out = run("show", "default", "--cassettes", str(cassettes), "--json")
    assert code == 0, out
    [row] = json.loads(out)["exchanges"]
    assert row["usage_known"] is False and row["cost_usd"] is None
    code, out = run("show", "default", "--cassettes", str(cassettes))
    assert "0/0" not in out and "unknown" in out
    [summary] = json.loads(run("ls", "--cassettes", str(cassettes), "--json")[1])
    assert summary["unpriced"] == 1 and summary["cost_usd"] is None
