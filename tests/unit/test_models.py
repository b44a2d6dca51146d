"""The exchange file: sorted pretty JSON around the response body's own key order, versioned."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tapeproxy.exchange import model as models
from tapeproxy.exchange.model import (
    SCHEMA_VERSION,
    Exchange,
    Frame,
    NewerSchema,
    Outcome,
    StoredRequest,
    StoredResponse,
    dump_exchange,
    load_exchange,
)

KEY = "ab" * 32
RESPONSE_JSON = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {"message": {"role": "assistant", "content": "héllo", "refusal": None}, "index": 0},
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


def exchange(
    response_body: Any = None, frames: list[Frame] | None = None, **extra: Any
) -> Exchange:
    return Exchange(
        key=KEY,
        ordinal=1,
        seq=0,
        rules="0123456789abcdef",
        request=StoredRequest(
            method="POST",
            upstream="openai",
            path="/v1/chat/completions",
            query=[("z", "1"), ("a", "2")],
            headers={"openai-beta": "x"},
            body={"json": {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}},
        ),
        response=StoredResponse(
            status=200,
            headers={"content-type": "application/json"},
            body=response_body,
            dialect="sse" if frames is not None else None,
            frames=frames,
        ),
        **extra,
    )


def test_dump_is_pretty_sorted_json_with_a_trailing_newline() -> None:
    raw = dump_exchange(exchange({"json": {"b": 1, "a": 2}, "style": "compact"}))
    data = json.loads(raw)
    assert list(data) == sorted(data)
    assert list(data["request"]) == sorted(data["request"])
    assert list(data["request"]["body"]["json"]) == ["messages", "model"]
    assert list(data["response"]) == sorted(data["response"])
    assert raw.startswith(b'{\n  "key": ')
    assert raw.endswith(b"}\n")


def test_dump_keeps_the_response_bodys_key_order() -> None:
    raw = dump_exchange(exchange({"json": RESPONSE_JSON, "style": "compact"}))
    body = json.loads(raw)["response"]["body"]["json"]
    assert list(body) == ["id", "object", "choices", "usage"]
    assert list(body["choices"][0]) == ["message", "index"]
    assert list(body["choices"][0]["message"]) == ["role", "content", "refusal"]
    assert body["choices"][0]["message"]["refusal"] is None


def test_dump_writes_non_ascii_readable_and_leaves_out_unset_fields() -> None:
    raw = dump_exchange(exchange({"json": RESPONSE_JSON}))
    assert "héllo".encode() in raw
    data = json.loads(raw)
    assert "usage" not in data
    assert "frames" not in data["response"] and "dialect" not in data["response"]


def test_dump_is_deterministic() -> None:
    assert dump_exchange(exchange({"json": RESPONSE_JSON})) == dump_exchange(
        exchange({"json": json.loads(json.dumps(RESPONSE_JSON))})
    )


@pytest.mark.parametrize(
    "made",
    [
        exchange(),
        exchange({"json": RESPONSE_JSON, "style": "indent2+newline"}),
        exchange({"text": "plain"}),
        exchange({"base64": "AP8="}),
        exchange(frames=[Frame(ms=0, text="data: {}\n\n"), Frame(ms=12, base64="/w==")]),
        exchange({"json": [1, 2]}, outcome=Outcome.UPSTREAM_CUT, usage={"input_tokens": 3}),
    ],
)
def test_load_of_dump_gives_back_the_same_exchange(made: Exchange) -> None:
    loaded = load_exchange(dump_exchange(made))
    assert loaded == made
    assert dump_exchange(loaded) == dump_exchange(made)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=15,
)


@given(body=st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_round_trip_keeps_any_response_body_and_its_key_order(body: dict[str, Any]) -> None:
    loaded = load_exchange(dump_exchange(exchange({"json": body, "style": "compact"})))
    stored = loaded.response.body
    assert stored is not None
    assert json.dumps(stored["json"]) == json.dumps(body)


@pytest.mark.parametrize("version", [0, -1, None, "1", True])
def test_an_unsupported_schema_version_is_refused_clearly(version: Any) -> None:
    data = json.loads(dump_exchange(exchange()))
    data["schema_version"] = version
    with pytest.raises(ValueError) as caught:
        load_exchange(json.dumps(data).encode())
    message = str(caught.value)
    assert f"schema_version {version!r} is not supported" in message
    assert f"reads {SCHEMA_VERSION}" in message


def test_a_newer_schema_version_says_in_one_line_to_upgrade_tapeproxy() -> None:
    data = json.loads(dump_exchange(exchange()))
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(NewerSchema) as caught:
        load_exchange(json.dumps(data).encode())
    message = str(caught.value)
    assert "\n" not in message and "upgrade tapeproxy" in message
    assert f"schema_version {SCHEMA_VERSION + 1} was written by a newer tapeproxy" in message


def test_an_older_file_is_migrated_step_by_step_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chain with two fake steps: a file of version 1 read by an tapeproxy of version 3."""

    def migrate_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "schema_version": 2, "seq": data["seq"] + 10}

    def migrate_2_to_3(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "schema_version": 3, "rules": data["rules"].upper()}

    raw = dump_exchange(exchange())
    monkeypatch.setattr(models, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(models, "MIGRATIONS", {1: migrate_1_to_2, 2: migrate_2_to_3})
    loaded = load_exchange(raw)
    assert (loaded.schema_version, loaded.seq, loaded.rules) == (3, 10, "0123456789ABCDEF")
    assert loaded.read_as == 1
    assert loaded.record()["schema_version"] == 3
    monkeypatch.setattr(models, "MIGRATIONS", {1: migrate_1_to_2})
    with pytest.raises(ValueError, match="no migration from it"):
        load_exchange(raw)


def test_a_missing_schema_version_is_refused() -> None:
    data = json.loads(dump_exchange(exchange()))
    del data["schema_version"]
    with pytest.raises(ValueError, match="schema_version None is not supported"):
        load_exchange(json.dumps(data).encode())


def test_an_unknown_field_is_refused() -> None:
    data = json.loads(dump_exchange(exchange()))
    data["recorded_at"] = "2024-01-01"
    with pytest.raises(ValidationError, match="recorded_at"):
        load_exchange(json.dumps(data).encode())


def test_a_cut_keeps_when_it_came_and_a_file_without_it_still_loads() -> None:
    frames = [Frame(ms=5, text="data: {}\n\n")]
    made = exchange(frames=frames, outcome=Outcome.UPSTREAM_CUT)
    cut = made.model_copy(update={"response": made.response.model_copy(update={"end_ms": 1250})})
    raw = dump_exchange(cut)
    assert json.loads(raw)["response"]["end_ms"] == 1250
    assert load_exchange(raw) == cut
    assert "end_ms" not in json.loads(dump_exchange(made))["response"]
    assert load_exchange(dump_exchange(made)).response.end_ms is None


def test_a_negative_end_is_refused() -> None:
    data = json.loads(dump_exchange(exchange(frames=[Frame(ms=0, text="x")])))
    data["response"]["end_ms"] = -1
    with pytest.raises(ValidationError, match="end_ms"):
        load_exchange(json.dumps(data).encode())
