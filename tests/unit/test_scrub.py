"""The Scrubber: field paths and patterns over JSON values, text, bodies and stream frames."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.errors import ConfigError
from tapeproxy.exchange.bodies import Payload, payload_bytes, response_payload
from tapeproxy.exchange.layout import frame
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import MARKER

EMAIL = r"[a-z]+@example\.com"
scrub = Scrubber.build(["user.email", "messages[*].content"], [EMAIL, r"\d{3}-\d{4}"])


def test_fields_and_patterns_in_a_json_value() -> None:
    value: Any = {
        "user": {"email": "x", "name": "call 555-1234, or ann@example.com"},
        "messages": [{"role": "user", "content": [{"type": "text"}]}, {"content": None}],
        "n": 5551234,
        "phone": 555.1234,
    }
    assert scrub.value(value) == {
        "user": {"email": MARKER, "name": f"call {MARKER}, or {MARKER}"},
        "messages": [{"role": "user", "content": MARKER}, {"content": None}],
        "n": 5551234,
        "phone": 555.1234,
    }
    assert value["user"]["email"] == "x", "the value given is not changed"
    assert Scrubber.build(patterns=[r"555\d+"]).value({"n": 5551234}) == {"n": MARKER}


def test_a_json_body_keeps_its_layout_and_renders_to_valid_json() -> None:
    raw = b'{\n  "to": "ann@example.com",\n  "x": 1\n}'
    stored = response_payload(raw, "application/json")
    assert stored.style == "indent2"
    out = payload_bytes(scrub.payload(stored))
    assert json.loads(out) == {"to": MARKER, "x": 1}
    assert out == raw.replace(b"ann@example.com", MARKER.encode())


def test_json_stored_as_text_is_scrubbed_as_json_and_stays_valid() -> None:
    text = '{"v": -0.000016, "to": "ann@example.com", "user": {"email": "e"}}'
    out = scrub.payload(Payload("text", text))
    assert out.kind == "text"
    assert json.loads(out.value) == {"v": -0.000016, "to": MARKER, "user": {"email": MARKER}}
    only_pattern = Scrubber.build(patterns=[EMAIL]).payload(Payload("text", text))
    assert only_pattern.value == text.replace("ann@example.com", MARKER), "layout kept"


def test_plain_text_and_binary_bodies() -> None:
    assert scrub.payload(Payload("text", "hi ann@example.com")).value == f"hi {MARKER}"
    binary = Payload("base64", "YW5uQGV4YW1wbGUuY29t")
    assert scrub.payload(binary) is binary


def test_sse_frames_keep_their_event_lines_and_ends() -> None:
    frames = [
        frame(0, 'event: delta\r\ndata: {"t":"to ann@example.com"}\r\n\r\n'),
        frame(3, "data: [DONE]\n\n"),
    ]
    out = scrub.frames(frames, "sse")
    assert out[0]["text"] == f'event: delta\r\ndata: {{"t":"to {MARKER}"}}\r\n\r\n'
    assert out[0]["ms"] == 0 and out[1] is frames[1]


def test_ndjson_and_a_streamed_json_document() -> None:
    [line] = scrub.frames([frame(1, '{"c":"ann@example.com"}\n')], "ndjson")
    assert line["text"] == f'{{"c":"{MARKER}"}}\n'
    pieces = [frame(0, '[{"c": "ann@exa'), frame(5, 'mple.com"}]')]
    out = scrub.frames(pieces, "json")
    assert json.loads("".join(f["text"] for f in out)) == [{"c": MARKER}]
    assert [f["ms"] for f in out] == [0, 5]


@pytest.mark.parametrize(
    ("fields", "patterns", "problem"),
    [
        ([], ["(unclosed"], "not a valid regular expression"),
        ([], ["acted"], "matches the marker"),
        (["a..b"], [], "empty segment"),
        (["a[b]"], [], "is not of the form"),
    ],
)
def test_bad_rules_are_clear_errors(fields: list[str], patterns: list[str], problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        Scrubber.build(fields, patterns)


def test_a_pattern_that_matches_nothing_at_all_changes_nothing() -> None:
    assert Scrubber.build(patterns=["x*"]).text("abc") == "abc"
    assert not Scrubber.build(keep=["all"])
    assert Scrubber.build(), "the key formats are scrubbed by default"


json_values: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="ab@.xe-1 "),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet="abe", max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
PROPERTY = Scrubber.build(["a", "b[*].e"], [r"a+@", r"x-?1"])


@given(json_values)
def test_no_match_is_left_and_scrubbing_twice_changes_nothing(value: Any) -> None:
    once = PROPERTY.value(value)
    strings = re.findall(r'"((?:[^"\\]|\\.)*)"\s*(?!:)', json.dumps(once, ensure_ascii=False))
    assert not any(p.search(s) for p in PROPERTY.patterns for s in strings)
    assert PROPERTY.value(once) == once
    text = json.dumps(value)
    assert json.loads(PROPERTY.json_text(text)) == once


def test_matches_sees_only_a_match_of_something() -> None:
    assert not Scrubber.build(patterns=["x*"]).matches("abc")
    assert Scrubber.build(patterns=["b+"]).matches("abc")


def test_what_redact_checks_sees_binary_bodies_and_not_tapeproxys_own_fields() -> None:
    from tapeproxy.exchange.model import Exchange, StoredRequest, StoredResponse
    from tapeproxy.tools.redact import recorded_text

    def exchange(body: dict[str, Any]) -> Exchange:
        request = StoredRequest(method="POST", upstream="files", path="/v1/upload", body=body)
        return Exchange(
            key="ab12" * 16,
            ordinal=1,
            seq=1234,
            rules="cd34" * 16,
            request=request,
            response=StoredResponse(status=200),
        )

    hex_or_digits = Scrubber.build((), [r"[0-9a-f]{8}", r"\d{4}"])
    assert not hex_or_digits.matches(recorded_text(exchange({"text": "plain"})))
    binary = {"base64": "YW5uQGV4YW1wbGUuY29t"}  # ann@example.com, as multipart would be
    assert scrub.matches(recorded_text(exchange(binary)))


def test_a_request_path_and_query_values_are_scrubbed_for_its_key() -> None:
    from tapeproxy.engine.keying import RequestParts

    parts = RequestParts(
        "GET", "search", "/v1/users/ann@example.com", (("q", "555-1234"),), (), Payload("empty")
    )
    scrubbed = scrub.request(parts)
    assert scrubbed.path == f"/v1/users/{MARKER}" and scrubbed.query == (("q", MARKER),)
    assert scrub.request(scrubbed) is scrubbed


def test_header_values_are_scrubbed_by_patterns_and_key_formats_names_kept() -> None:
    """A keyed request header and every answer header (a repeated one's each value): by the
    user's patterns as by the key formats, whatever the header's name."""
    from tapeproxy.engine.keying import RequestParts

    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    parts = RequestParts(
        "GET", "tools", "/x", (), (("x-tenant", "ann@example.com"), ("x-k", key)), Payload("empty")
    )
    scrubbed = scrub.request(parts)
    assert scrubbed.headers == (("x-tenant", MARKER), ("x-k", MARKER))
    assert scrub.request(scrubbed) is scrubbed
    record = {
        "request": {"method": "GET", "path": "/x", "headers": {"x-k": key}},
        "response": {
            "status": 200,
            "headers": {"x-echo-key": f"Bearer {key}", "link": ["<a>; 555-1234", "<b>"]},
        },
    }
    out = scrub.record(record)
    assert out["request"]["headers"] == {"x-k": MARKER}
    assert out["response"]["headers"] == {
        "x-echo-key": f"Bearer {MARKER}",
        "link": [f"<a>; {MARKER}", "<b>"],
    }


def test_a_percent_encoded_key_is_scrubbed_over_the_raw_span_it_came_from() -> None:
    """A path spells a key percent-encoded, or hides its start behind an escape (`%3D`);
    the decoded text's match is replaced in the raw text. Escapes around no key stay as they
    came (a path holding no key keys as it did), and a key spelled out is scrubbed still."""
    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    formats = Scrubber.build()
    tail = key[4:]
    assert formats.text(f"/k/ghp%5F{tail}/x%20y") == f"/k/{MARKER}/x%20y"
    assert formats.text(f"/k/%67hp_{tail}") == f"/k/{MARKER}"
    assert formats.text(f"/k/ghp%255F{tail}") == f"/k/{MARKER}", "encoded twice"
    assert formats.text(f"/k/a%3D{key}%2Fb") == f"/k/a%3D{MARKER}%2Fb"
    assert formats.text(f"/k/{key}%41") == f"/k/{MARKER}%41", "raw, the key's end is seen"
    assert formats.matches(f"/k/ghp%5F{tail}") and not formats.matches("/k/a%20b%5F")
    plain = "/v1/files/report%202024%5Ffinal?x=100%25"
    assert formats.text(plain) is plain
    assert scrub.text("/users/ann%40example.com") == f"/users/{MARKER}", "the user's patterns"


def test_a_key_as_a_query_parameter_s_name_is_scrubbed() -> None:
    """`?ghp_...` (a bare token, no `=`) is parsed as a name with an empty value: it was
    stored as it came, where a value was scrubbed."""
    from tapeproxy.engine.keying import RequestParts

    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    query = ((key, ""), ("q", "x"))
    parts = RequestParts("GET", "tools", "/x", query, (), Payload("empty"))
    assert scrub.request(parts).query == ((MARKER, ""), ("q", "x"))
    plain = RequestParts("GET", "tools", "/x", (("q", "x"),), (), Payload("empty"))
    assert scrub.request(plain) is plain
    record = {"request": {"method": "GET", "path": "/x", "query": [[key, ""]]}, "response": {}}
    assert scrub.record(record)["request"]["query"] == [[MARKER, ""]]


PIECE = "Fake0Key" * 5
KEYS = [
    "sk-" + "proj-" + PIECE,
    "sk-" + "ant-" + "api03-" + PIECE,
    "AIza" + PIECE[:35],
    "ghp" + "_" + PIECE[:36],
    "AKIA" + "FAKEKEY234567ABC",
    "xox" + "b-" + "123456789012-" + PIECE[:12],
    "eyJ" + "hbGciOiJub25lIn0" + "." + "eyJ" + "zdWIiOiJmYWtlIn0" + "." + "fakesig0",
]


@given(
    st.sampled_from(KEYS),
    st.lists(st.booleans(), min_size=80, max_size=80),
    st.integers(1, 3),
    st.sampled_from(["/", "=", ":", " "]),
)
def test_a_key_with_any_of_its_characters_escaped_is_scrubbed(
    key: str, escape: list[bool], times: int, before: str
) -> None:
    """Whichever characters of a key are percent-encoded (once, twice or three times), and
    whatever escaped character comes before it, nothing of it is left; the precheck that
    passes over most text never passes over one."""
    spelled = "".join(
        f"%{'25' * (times - 1)}{ord(c):02X}" if flip else c
        for c, flip in zip(key, escape, strict=False)
    )
    text = f"/a/b%{'25' * (times - 1)}{ord(before):02X}{spelled}/c"
    assert Scrubber.build().text(text) == f"/a/b%{'25' * (times - 1)}{ord(before):02X}{MARKER}/c"
