"""json_items: a streamed JSON array's elements read piece by piece, as json.loads reads it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from tapeproxy.exchange.framing import json_items

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(VALUES, max_size=6), st.lists(st.integers(1, 9), min_size=1), st.booleans())
@example([10], [1], False)  # `[1` then `0]`: the 1 ends its piece, yet the number goes on
@example([1.5e-7, True, None], [2], False)
def test_json_items_reads_an_array_in_any_pieces(
    items: list[Any], cuts: list[int], spaced: bool
) -> None:
    data = json.dumps(items, indent=1 if spaced else None, ensure_ascii=False).encode()
    pieces, at, n = [], 0, 0
    while at < len(data):
        size = cuts[n % len(cuts)]
        pieces.append(data[at : at + size])
        at, n = at + size, n + 1
    assert list(json_items(pieces)) == items


def test_json_items_stops_at_a_cut_and_reads_no_plain_value() -> None:
    assert list(json_items([b'[{"a": 1}, {"b": ', b"2"])) == [{"a": 1}]
    assert list(json_items([b'{"a": 1}'])) == []
