"""Cassette names for tests (the pytest plugin): readable where the node id allows, always
valid, never shared."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.store.names import MAX_NAME, check_cassette_name
from tapeproxy.store.names import cassette_for_test as cassette_name


@pytest.mark.parametrize(
    ("nodeid", "prefix", "name"),
    [
        ("tests/test_chat.py::test_hello", "tests", "test_chat/test_hello"),
        ("tests/test_chat.py::test_hello", None, "tests/test_chat/test_hello"),
        (
            "tests/api/test_chat.py::TestChat::test_hello",
            "tests",
            "api/test_chat/TestChat/test_hello",
        ),
        ("test_chat.py::test_hello", "tests", "test_chat/test_hello"),
        (
            "tests/test_chat.py::test_model[gpt-4o-mini]",
            "tests",
            "test_chat/test_model.gpt-4o-mini",
        ),
        ("test_chat.py::test_hello", ".", "test_chat/test_hello"),
    ],
)
def test_a_plain_node_id_reads_as_its_path(nodeid: str, prefix: str | None, name: str) -> None:
    assert cassette_name(nodeid, prefix) == name


def test_characters_a_name_cannot_hold_are_replaced_and_the_name_hashed() -> None:
    spaced = cassette_name("tests/test_chat.py::test_model[a b]", "tests")
    underscored = cassette_name("tests/test_chat.py::test_model[a_b]", "tests")
    assert underscored == "test_chat/test_model.a_b"
    assert spaced.startswith("test_chat/test_model.a_b-") and spaced != underscored
    assert cassette_name("../up/test_x.py::test_a").startswith("_/up/test_x/test_a-")


def test_a_long_node_id_is_cut_and_made_unique() -> None:
    first = cassette_name("tests/test_x.py::test_a[" + "x" * 300 + "1]", "tests")
    second = cassette_name("tests/test_x.py::test_a[" + "x" * 300 + "2]", "tests")
    assert len(first) == len(second) == MAX_NAME
    assert first != second


@given(
    st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=6),
    st.sampled_from([None, "tests", "."]),
)
def test_every_node_id_gives_a_valid_cassette_name(parts: list[str], prefix: str | None) -> None:
    nodeid = "/".join(parts[:2]) + ".py::" + "::".join(parts[2:] or ["test"])
    assert check_cassette_name(cassette_name(nodeid, prefix))


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_two_parameter_ids_never_share_a_cassette(a: str, b: str) -> None:
    if a != b:
        one = cassette_name(f"tests/test_x.py::test_a[{a}]", "tests")
        two = cassette_name(f"tests/test_x.py::test_a[{b}]", "tests")
        assert one != two


def test_a_test_s_cassette_name_holds_no_key_its_parameter_s_id_held() -> None:
    """A test parametrized by a key (`test_auth[ghp_...]`) gets a cassette all the same, its
    name a valid one: the key is `key`, and the node id's hash tells such tests apart."""
    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    name = cassette_name(f"tests/test_auth.py::test_auth[{key}]", "tests")
    assert check_cassette_name(name) == name
    assert name.startswith("test_auth/test_auth.key-") and key[4:] not in name
    other = cassette_name(f"tests/test_auth.py::test_auth[{key[:-1]}X]", "tests")
    assert other != name
