"""`indent2` writes what `json.dumps(indent=2)` writes, byte for byte, for any value:
exchange files recorded before and after it must not differ."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tapeproxy.exchange.jsontext import indent2

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
