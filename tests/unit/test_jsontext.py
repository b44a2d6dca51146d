"""`indent2` writes what `json.dumps(indent=2)` writes, byte for byte, for any value (keys
sorted or not), and the exchange file's layout (`render`) is what a sorted copy dumped with
json.dumps gives: exchange files recorded before and after it must not differ."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tapeproxy.exchange.jsontext import indent2
from tapeproxy.exchange.layout import Record, render

scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too: orjson refuses those
    | st.floats()  # NaN, Infinity, subnormals, -0.0, 1e-05 ...
    | st.floats(min_value=-1e-3, max_value=1e-3)  # where json and orjson spell floats apart
    | st.text()  # lone surrogates, control characters, U+2028 ...
    | st.sampled_from(["é", "日本", "🙂", "\x7f", "\u2028", "a: 0.00001", "1e-5"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def expected(value: Any, ensure_ascii: bool) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=ensure_ascii).encode("utf-8")


@settings(max_examples=600)
@given(value=json_values, ensure_ascii=st.booleans())
@example(value={"a": [1e-05, 1.5e-07, 0.0001, 1e16, -0.0]}, ensure_ascii=False)
@example(value=[float("nan"), float("inf"), -math.inf], ensure_ascii=False)
@example(value={"big": 2**64, "small": -(2**63) - 1}, ensure_ascii=False)
@example(value={"é": '日本 \x00\x1f "q" \\'}, ensure_ascii=True)
@example(value=[{}, [], [[]], {"a": {}}], ensure_ascii=False)
def test_indent2_is_json_dumps_byte_for_byte(value: Any, ensure_ascii: bool) -> None:
    try:
        want = expected(value, ensure_ascii)
    except UnicodeEncodeError:  # a lone surrogate: both must refuse it alike
        with pytest.raises(UnicodeEncodeError):
            indent2(value, ensure_ascii)
        return
    assert indent2(value, ensure_ascii) == want


def test_a_tuple_and_an_int_key_are_written_as_json_dumps_writes_them() -> None:
    value = {"t": (1, 2), 3: "int key"}
    assert indent2(value) == expected(value, False)


KEYS = st.text(max_size=4) | st.sampled_from(
    ["a", "A", "b", "B", "é", "z", "\U0001f600", "\uffff", "\ud800", "1", "10", "2", "-1",
     ": 1e-05", "\n  1e-05", "json", "body"]
)  # fmt: skip
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [1e-4, 9.999999999999999e-05, 1e-05, 5e-324, -0.0, 2.2250738585072014e-308, 1e16, 1e-7,
     -1.5e-7, 0.00001234, 1.2345678901234568e20]
)  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**63, 2**64, -(2**63) - 1])
    | FLOATS
    | st.text(max_size=6)
    | st.sampled_from([": 1e-05", "\n  1e-05", "0.00001", "e-", "[1e-05", "\ud800", "\x7f"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES, ascii=st.booleans(), sort=st.booleans())
@example(value=[[1e-05], {"a": [-1e-07, [0.00001]]}], ascii=False, sort=True)
@example(value={"b": 1, "B": 2, "é": 3, "\U0001f600": 4, "\uffff": 5}, ascii=False, sort=True)
@example(value={"\ud800": 1, "a": 2}, ascii=True, sort=True)
@example(value=[math.nan, {"x": math.inf}, -0.0, 5e-324], ascii=False, sort=True)
def test_indent2_with_sorted_keys_is_json_dumps_byte_for_byte(
    value: Any, ascii: bool, sort: bool
) -> None:
    try:
        want = json.dumps(value, indent=2, ensure_ascii=ascii, sort_keys=sort).encode()
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            indent2(value, ensure_ascii=ascii, sort_keys=sort)
        return
    assert indent2(value, ensure_ascii=ascii, sort_keys=sort) == want


def _sorted_but(value: Any, verbatim: Any) -> Any:
    """The sorted copy the exchange file was made of before d9adc8b."""
    if value is verbatim:
        return value
    if isinstance(value, dict):
        return {k: _sorted_but(value[k], verbatim) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted_but(item, verbatim) for item in value]
    return value


def layout(record: Record) -> bytes:
    body = record["response"].get("body") or {}
    value = _sorted_but(record, body.get("json"))
    try:
        return json.dumps(value, indent=2, ensure_ascii=False).encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(value, indent=2, ensure_ascii=True).encode() + b"\n"


@st.composite
def records(draw: st.DrawFn) -> Record:
    """Records of any shape around a response body: its JSON a scalar, empty, non-ASCII or a
    lone surrogate where the rest is not (and the reverse), tuples anywhere."""
    body = draw(
        st.none()
        | st.just({})
        | st.dictionaries(st.sampled_from(["json", "text", "base64"]), VALUES, max_size=3)
    )
    plain = KEYS.filter(lambda k: k not in ("body", "response"))
    response = draw(st.dictionaries(plain, VALUES, max_size=3))
    response["status"] = 200
    if body is not None:
        response["body"] = body
    record = draw(st.dictionaries(plain, VALUES, max_size=4))
    record["response"] = response
    record["request"] = draw(st.dictionaries(KEYS, VALUES, max_size=3))
    return record


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(record=records())
@example(record={"response": {"body": {"json": {"z": 1, "a": [{}, []]}}}, "request": {}})
@example(record={"response": {"body": {"json": "\ud800"}}, "request": {"b": 1, "a": "é"}})
@example(record={"response": {"body": {"json": "é\n  x"}}, "request": {"x": "\ud800"}})
@example(record={"response": {"body": {"json": (1, {"b": 1e-05, "a": None})}}, "x": (2,)})
def test_render_is_the_sorted_copy_s_layout_byte_for_byte(record: Record) -> None:
    assert render(record) == layout(record)
