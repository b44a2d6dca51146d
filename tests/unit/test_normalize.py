"""Request normalization and match rules: what goes into a request's key, and what never does."""

from __future__ import annotations

import base64
import gzip
import json
import random
import zlib
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tapeproxy.engine.keying import (
    RequestParts,
    canonical,
    redacted,
    request_key,
    request_parts,
    stored_request,
)
from tapeproxy.engine.rules import MatchRules, build_rules, parse_path
from tapeproxy.errors import ConfigError
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.model import StoredRequest

RULES = MatchRules(
    ignore_body=("user", "metadata.request_id", "messages[*].name"),
    key_headers=frozenset({"anthropic-version"}),
)
BASE: dict[str, Any] = {
    "model": "claude-x",
    "temperature": 0.5,
    "user": "u-1",
    "metadata": {"request_id": "r-1", "team": "core"},
    "messages": [
        {"role": "user", "content": "hello", "name": "alice"},
        {"role": "assistant", "content": "hi", "name": "bot"},
    ],
    "tools": [{"name": "search", "input_schema": {"type": "object"}}],
}
JSON_HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01"}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def parts_of(
    body: Any = BASE,
    *,
    headers: dict[str, str] | None = None,
    query: str = "",
    raw: bytes | None = None,
    rules: MatchRules = RULES,
) -> RequestParts:
    data = json.dumps(body).encode() if raw is None else raw
    merged = {**JSON_HEADERS, **(headers or {})}
    return request_parts("POST", "anthropic", "/v1/messages", query, merged, data, rules)


def key_of(body: Any = BASE, rules: MatchRules = RULES, **kwargs: Any) -> str:
    return request_key(parts_of(body, rules=rules, **kwargs), rules)


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [shuffled(item, rnd) for item in value]
    return value


def with_body(**changes: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(BASE)), **changes}


@given(
    body=json_objects,
    rnd=st.randoms(use_true_random=False),
    indent=st.sampled_from([None, 0, 2, 4, "\t"]),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]),
    ensure_ascii=st.booleans(),
    trailing=st.sampled_from(["", "\n", "  \r\n"]),
)
def test_key_is_stable_under_key_order_and_json_whitespace(
    body: dict[str, Any],
    rnd: random.Random,
    indent: Any,
    separators: tuple[str, str],
    ensure_ascii: bool,
    trailing: str,
) -> None:
    compact = json.dumps(body, separators=(",", ":")).encode()
    text = json.dumps(
        shuffled(body, rnd), indent=indent, separators=separators, ensure_ascii=ensure_ascii
    )
    assert key_of(raw=(text + trailing).encode()) == key_of(raw=compact)


CREDENTIALS = ["authorization", "x-api-key", "api-key", "cookie", "Authorization", "X-Api-Key"]
TELEMETRY = ["user-agent", "x-stainless-lang", "x-stainless-os", "X-Stainless-Runtime-Version"]
secrets = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=8).map(
    lambda s: "sk-SECRET-" + s
)


@given(name=st.sampled_from(CREDENTIALS + TELEMETRY), value=secrets)
def test_credentials_and_telemetry_never_change_the_key(name: str, value: str) -> None:
    assert key_of(headers={name: value}) == key_of()


@given(name=st.sampled_from(CREDENTIALS + TELEMETRY), value=secrets)
def test_credentials_and_telemetry_never_appear_in_request_parts(name: str, value: str) -> None:
    parts = parts_of(headers={name: value})
    assert value not in json.dumps(parts.to_dict())
    assert dict(parts.headers) == {"anthropic-version": "2023-06-01"}


@given(name=st.sampled_from(CREDENTIALS), value=secrets, other=secrets)
def test_a_credential_a_rule_keys_on_is_stored_and_keyed_as_its_digest_only(
    name: str, value: str, other: str
) -> None:
    assume(value != other)
    rules = MatchRules(key_headers=frozenset({name.lower()}))
    parts = parts_of(headers={name: value}, rules=rules)
    assert value not in json.dumps(parts.to_dict())
    assert dict(parts.headers)[name.lower()].startswith("sha256:")
    assert request_key(parts, rules) == key_of(headers={name: value}, rules=rules)
    assert request_key(parts, rules) != key_of(headers={name: other}, rules=rules)
    assert request_key(parts, rules) != key_of(rules=rules)


@pytest.mark.parametrize(
    "name", ["x-tenant", "x-session-id", "x-author", "X-Tokenizer", "authorization"]
)
def test_a_key_header_rule_keys_requests_apart_whatever_the_header_is_called(name: str) -> None:
    rules = MatchRules(key_headers=frozenset({name.lower()}))
    one, two = (key_of(headers={name: value}, rules=rules) for value in ("one", "two"))
    assert one != two
    stored = dict(parts_of(headers={name: "one"}, rules=rules).headers)[name.lower()]
    assert stored == "one" if name == "x-tenant" else stored.startswith("sha256:")


def test_query_params_are_sorted_by_name_keeping_repeated_values_in_order() -> None:
    parts = parts_of(query="b=2&a=1&a=0")
    assert parts.query == (("a", "1"), ("a", "0"), ("b", "2"))
    assert key_of(query="b=2&a=1&a=0") == key_of(query="a=1&a=0&b=2")


@pytest.mark.parametrize("secret_param", ["key", "api_key", "KEY", "access_token"])
def test_key_like_query_params_are_dropped(secret_param: str) -> None:
    parts = parts_of(query=f"alt=sse&{secret_param}=AIza-SECRET")
    assert parts.query == (("alt", "sse"),)
    assert key_of(query=f"alt=sse&{secret_param}=AIza-SECRET") == key_of(query="alt=sse")


@given(value=st.text())
def test_an_ignored_query_param_never_changes_the_key(value: str) -> None:
    rules = MatchRules(ignore_query=frozenset({"ts"}), key_headers=RULES.key_headers)
    query = urlencode([("alt", "sse"), ("TS", value)])
    assert key_of(rules=rules, query=query) == key_of(rules=rules, query="alt=sse")
    assert ("TS", value) in parts_of(rules=rules, query=query).query  # stored, just not keyed


def test_a_non_secret_query_param_changes_the_key() -> None:
    assert key_of(query="alt=sse") != key_of(query="alt=json")
    assert key_of(query="alt=sse") != key_of()


def test_provider_key_header_changes_the_key() -> None:
    assert key_of(headers={"anthropic-version": "2023-06-01"}) != key_of(
        headers={"anthropic-version": "2024-01-01"}
    )
    without = request_parts(
        "POST",
        "anthropic",
        "/v1/messages",
        "",
        {"content-type": "application/json"},
        json.dumps(BASE).encode(),
        RULES,
    )
    assert request_key(without, RULES) != key_of()


def test_key_header_name_case_and_value_padding_do_not_matter() -> None:
    assert key_of(headers={"Anthropic-Version": " 2023-06-01 "}) == key_of()


@pytest.mark.parametrize(
    ("field", "place"),
    [
        ("user", lambda body, v: body.__setitem__("user", v)),
        ("metadata.request_id", lambda body, v: body["metadata"].__setitem__("request_id", v)),
        ("messages[0].name", lambda body, v: body["messages"][0].__setitem__("name", v)),
        ("messages[1].name", lambda body, v: body["messages"][1].__setitem__("name", v)),
    ],
)
@given(value=json_values)
def test_an_ignored_body_field_never_changes_the_key(field: str, place: Any, value: Any) -> None:
    body = with_body()
    place(body, value)
    assert key_of(body) == key_of()


@given(value=json_values)
def test_dropping_an_ignored_body_field_does_not_change_the_key(value: Any) -> None:
    body = with_body(user=value)
    del body["user"]
    del body["messages"][0]["name"]
    assert key_of(body) == key_of()


@pytest.mark.parametrize(
    ("field", "strategy"),
    [
        ("model", st.text()),
        ("temperature", st.floats(allow_nan=False) | st.integers()),
        ("tools", st.lists(json_values, max_size=3)),
        ("stream", st.booleans()),
    ],
)
@given(data=st.data())
def test_a_non_ignored_body_field_always_changes_the_key(
    field: str, strategy: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    value = data.draw(strategy)
    assume(value != BASE.get(field, object()))
    assert key_of(with_body(**{field: value})) != key_of()


@given(content=st.text() | st.lists(st.dictionaries(st.text(max_size=5), scalars, max_size=3)))
def test_message_content_always_changes_the_key(content: Any) -> None:
    assume(content != "hello")
    body = with_body()
    body["messages"][0]["content"] = content
    assert key_of(body) != key_of()


@given(first=st.text(), second=st.text())
def test_swapping_two_messages_changes_the_key(first: str, second: str) -> None:
    assume(first != second)
    one, two = {"role": "user", "content": first}, {"role": "user", "content": second}
    assert key_of(with_body(messages=[one, two])) != key_of(with_body(messages=[two, one]))


@pytest.mark.parametrize("rule", ["messages[*]", "messages[0]", "messages[1]", "tools[*]"])
def test_an_array_item_rule_never_removes_items(rule: str) -> None:
    rules = MatchRules(ignore_body=(rule,))
    parts = parts_of(rules=rules)
    assert canonical(parts, rules).body.value["messages"] == BASE["messages"]
    shorter = with_body(messages=BASE["messages"][:1])
    assert key_of(shorter, rules=rules) != key_of(rules=rules)


@given(
    body=json_objects,
    query=st.lists(st.tuples(st.sampled_from("abcxyz"), st.text(max_size=5)), max_size=4),
    version=st.text(alphabet="0123456789-", min_size=1, max_size=10),
)
def test_request_parts_round_trip_gives_the_same_key(
    body: dict[str, Any], query: list[tuple[str, str]], version: str
) -> None:
    parts = parts_of(body, query=urlencode(query), headers={"anthropic-version": version})
    stored = json.loads(json.dumps(parts.to_dict()))
    again = RequestParts.from_dict(stored)
    assert again == parts
    assert request_key(again, RULES) == request_key(parts, RULES)


@pytest.mark.parametrize(
    "other",
    [
        MatchRules(ignore_body=("user",)),
        MatchRules(ignore_body=("user", "metadata")),
        MatchRules(ignore_query=frozenset({"ts"})),
        MatchRules(key_headers=frozenset({"openai-beta"})),
    ],
)
def test_rules_fingerprint_changes_when_rules_change(other: MatchRules) -> None:
    assert other.fingerprint() != MatchRules().fingerprint()
    assert other.fingerprint() != RULES.fingerprint()


def test_rules_fingerprint_is_stable_and_ignores_listing_order() -> None:
    one = MatchRules(ignore_body=("a", "b"), ignore_query=frozenset({"x", "y"}))
    two = MatchRules(ignore_body=("b", "a"), ignore_query=frozenset({"y", "x"}))
    assert one.fingerprint() == two.fingerprint()
    assert len(one.fingerprint()) == 16


@pytest.mark.parametrize(
    ("path", "tokens"),
    [
        ("user", ("user",)),
        ("a.b[0].c", ("a", "b", 0, "c")),
        ("a[*].b", ("a", "*", "b")),
        ("messages[*].name", ("messages", "*", "name")),
        ("a[0][12]", ("a", 0, 12)),
    ],
)
def test_parse_path_accepts(path: str, tokens: tuple[str | int, ...]) -> None:
    assert parse_path(path) == tokens


@pytest.mark.parametrize("path", ["a..b", "a[x]", "", ".a", "a.", "a[]", "a[-1]", "a[0"])
def test_parse_path_rejects(path: str) -> None:
    with pytest.raises(ConfigError, match="JSON path"):
        parse_path(path)


def test_build_rules_takes_star_and_this_upstreams_specs_only() -> None:
    base = MatchRules(ignore_body=("user",), key_headers=frozenset({"openai-beta"}))
    specs = [
        "*:body:metadata.request_id",
        "openai:query:TS",
        "openai:header:OpenAI-Beta",
        "openai:key-header:X-Tenant",
        "anthropic:body:system",
        "*:body:user",
    ]
    rules = build_rules(base, "openai", specs)
    assert rules.ignore_body == ("user", "metadata.request_id")
    assert rules.ignore_query == frozenset({"ts"})
    assert rules.ignore_headers == frozenset({"openai-beta"})
    assert rules.headers() == frozenset({"x-tenant"})
    other = build_rules(base, "anthropic", specs)
    assert other.ignore_body == ("user", "metadata.request_id", "system")
    assert other.ignore_query == frozenset()


@pytest.mark.parametrize(
    "spec",
    ["openai:body", "openai:nope:x", ":body:user", "openai", "openai:body:a..b", "*:body:a[x]"],
)
def test_build_rules_rejects_a_bad_spec_naming_it(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_rules(MatchRules(), "openai", [spec])
    assert repr(spec) in caught.value.message


def test_pagination_tokens_stay_in_the_key_so_each_page_has_its_own_recording() -> None:
    rules = MatchRules()

    def key(query: str) -> str:
        parts = request_parts("GET", "search", "/v1/items", query, {}, b"", rules)
        return request_key(parts, rules)

    assert key("page_token=abc") != key("page_token=def")
    assert key("pageToken=abc&author=ann") != key("pageToken=abc&author=bob")
    assert key("key=SECRET1&page=2") == key("key=SECRET2&page=2")


def test_repeated_query_parameters_keep_their_order_in_the_key() -> None:
    rules = MatchRules()

    def key(query: str) -> str:
        return request_key(request_parts("GET", "t", "/x", query, {}, b"", rules), rules)

    assert key("ids=1&ids=2") != key("ids=2&ids=1")
    assert key("a=1&b=2") == key("b=2&a=1")


def test_a_lone_surrogate_escape_in_a_json_body_keys_like_any_string() -> None:
    rules = MatchRules()
    raw = b'{"text": "cut \\ud83d"}'
    parts = request_parts(
        "POST", "openai", "/v1/x", "", {"content-type": "application/json"}, raw, rules
    )
    assert request_key(parts, rules) == request_key(parts, rules)
    other = request_parts("POST", "openai", "/v1/x", "", {}, b'{"text": "cut \\ud83e"}', rules)
    assert request_key(other, rules) != request_key(parts, rules)


def test_the_same_upload_keys_the_same_whatever_multipart_boundary_the_client_picked() -> None:
    rules = MatchRules()

    def key(boundary: str, data: bytes = b"RIFF-audio-bytes") -> str:
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="a.wav"\r\n\r\n'
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
        return request_key(
            request_parts("POST", "openai", "/v1/audio", "", headers, body, rules), rules
        )

    assert key("a1b2c3") == key("zz9988")
    assert key("a1b2c3") != key("a1b2c3", b"other-audio")


def floats_for_ints(value: Any) -> Any:
    """The same JSON value as Python would send it with every number a float: 1 -> 1.0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: floats_for_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats_for_ints(item) for item in value]
    return value


@given(body=json_objects)
def test_a_number_keys_the_same_written_as_1_or_as_1_0(body: dict[str, Any]) -> None:
    as_floats = json.dumps(floats_for_ints(body)).encode()
    assert key_of(raw=as_floats) == key_of(raw=json.dumps(body).encode())


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        (b'{"t": 1.0}', b'{"t": 1}', True),
        (b'{"t": -0.0}', b'{"t": 0}', True),
        (b'{"t": 2e3}', b'{"t": 2000}', True),
        (b'{"t": 1.5}', b'{"t": 1}', False),
        (b'{"t": true}', b'{"t": 1}', False),
        (b'{"t": false}', b'{"t": 0.0}', False),
        (b'{"t": 1e300}', b'{"t": 1.0000000000000001e300}', True),
        (b'{"t": 9007199254740993.0}', b'{"t": 9007199254740992}', True),
        (b'{"t": 1e20}', b'{"t": 100000000000000000000}', False),
        (b'{"t": NaN}', b'{"t": NaN}', True),
        (b'{"t": Infinity}', b'{"t": NaN}', False),
    ],
)
def test_numbers_key_by_value_not_by_how_they_are_written(
    one: bytes, other: bytes, same: bool
) -> None:
    assert (key_of(raw=one) == key_of(raw=other)) is same


@pytest.mark.parametrize(
    ("raw", "content_type", "secret"),
    [
        (b'{"api_key": "tvly-SECRET1", "query": "hotels"}', "application/json", b"SECRET1"),
        (b'{"auth": {"client_secret": "SECRET1"}, "q": "hotels"}', "application/json", b"SECRET1"),
        (
            b"grant_type=client_credentials&client_id=me&client_secret=SECRET1",
            "application/x-www-form-urlencoded",
            b"SECRET1",
        ),
    ],
)
def test_a_credential_in_a_body_is_neither_stored_nor_keyed(
    raw: bytes, content_type: str, secret: bytes
) -> None:
    rules = MatchRules()

    def parts(body: bytes) -> RequestParts:
        headers = {"content-type": content_type}
        return request_parts("POST", "search", "/search", "", headers, body, rules)

    stored = parts(raw)
    assert secret.decode() not in json.dumps(stored.to_dict())
    other = parts(raw.replace(secret, b"OTHERKEY2"))
    assert request_key(stored, rules) == request_key(other, rules)
    changed = parts(raw.replace(b"hotels", b"museums").replace(b"me", b"you"))
    assert request_key(changed, rules) != request_key(stored, rules)


def as_stored(parts: RequestParts) -> RequestParts:
    """`parts` written to a file by an older build, then read back as tapeproxy reads them."""
    return stored_request(StoredRequest.model_validate(parts.to_dict()))


def test_a_credential_an_older_tapeproxy_stored_keys_as_if_it_had_been_masked() -> None:
    rules = MatchRules()
    old = as_stored(
        RequestParts(
            "GET",
            "tool",
            "/find",
            (("appid", "OWM-OLD"), ("q", "x")),
            (),
            Payload("json", {"api_key": "tvly-OLD", "query": "hotels"}),
        )
    )
    new = request_parts(
        "GET",
        "tool",
        "/find",
        "appid=OWM-NEW&q=x",
        {},
        b'{"api_key": "tvly-NEW", "query": "hotels"}',
        rules,
    )
    assert request_key(old, rules) == request_key(new, rules)
    assert "OLD" not in json.dumps(canonical(old, rules).to_dict())


def mcp_anthropic(token: str) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "list my repos"}],
        "mcp_servers": [
            {
                "type": "url",
                "url": "https://mcp.example.com/sse",
                "name": "gh",
                "authorization_token": token,
            }
        ],
    }


def mcp_openai(token: str) -> dict[str, Any]:
    return {
        "model": "gpt-4.1",
        "input": "list my repos",
        "tools": [
            {
                "type": "mcp",
                "server_label": "gh",
                "server_url": "https://mcp.example.com",
                "headers": {"Authorization": f"Bearer {token}"},
                "authorization": token,
            }
        ],
    }


def password_tool(min_length: int) -> dict[str, Any]:
    return {
        "model": "m",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "create_user",
                    "parameters": {
                        "type": "object",
                        "properties": {"password": {"type": "string", "minLength": min_length}},
                    },
                },
            }
        ],
    }


def vault_answer(code: str) -> dict[str, Any]:
    return {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_vault", "response": {"secret": code}}}
                ],
            }
        ]
    }


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        (mcp_anthropic("ghp_ALICE"), mcp_anthropic("ghp_BOB"), True),
        (mcp_openai("ghp_ALICE"), mcp_openai("ghp_BOB"), True),
        (password_tool(8), password_tool(64), False),
        (vault_answer("1234"), vault_answer("9876"), False),
    ],
)
def test_credentials_key_alike_and_what_changes_the_answer_keys_apart(
    one: dict[str, Any], other: dict[str, Any], same: bool
) -> None:
    assert (key_of(one) == key_of(other)) is same
    if same:
        assert "ghp_" not in json.dumps(parts_of(one).to_dict())


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("secret_santa=alice&year=2026", "secret_santa=bob&year=2026", False),
        ("password_hint=cat&q=x", "password_hint=dog&q=x", False),
        ("q=x&key=K1&token=T1", "q=x&key=K2&token=T2", True),
    ],
)
def test_a_form_keys_apart_on_fields_named_like_secrets_but_alike_on_credentials(
    one: str, other: str, same: bool
) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert (
        key_of(raw=one.encode(), headers=form) == key_of(raw=other.encode(), headers=form)
    ) is same


def upload(boundary: str, apikey: str, language: str = "eng") -> tuple[dict[str, str], bytes]:
    """An ocr.space-style multipart upload: the key travels as a form field."""

    def part(name: str, content: bytes, extra: str = "") -> bytes:
        return (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'
            ).encode()
            + content
            + b"\r\n"
        )

    body = (
        part("apikey", apikey.encode())
        + part("language", language.encode())
        + part("file", b"\x89PNG bytes", '; filename="a.png"\r\nContent-Type: image/png')
        + f"--{boundary}--\r\n".encode()
    )
    return {"content-type": f"multipart/form-data; boundary={boundary}"}, body


def test_a_credential_part_of_a_multipart_upload_is_neither_stored_nor_keyed() -> None:
    rules = MatchRules()

    def parts(boundary: str, apikey: str, language: str = "eng") -> RequestParts:
        headers, body = upload(boundary, apikey, language)
        return request_parts("POST", "ocr", "/parse/image", "", headers, body, rules)

    stored = parts("b0undary1", "K8SECRET1")
    assert stored.body.kind == "base64"
    raw = base64.b64decode(stored.body.value)
    assert b"K8SECRET1" not in raw and b"\x89PNG bytes" in raw and b"eng" in raw
    assert request_key(stored, rules) == request_key(parts("other2", "K8SECRET2"), rules)
    assert request_key(stored, rules) != request_key(parts("b0undary1", "K8SECRET1", "deu"), rules)


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", lambda raw: gzip.compress(raw, mtime=1000)),
        ("gzip", lambda raw: gzip.compress(raw, mtime=2000)),
        ("deflate", zlib.compress),
    ],
)
def test_a_compressed_body_is_keyed_and_stored_as_what_it_holds(encoding: str, encode: Any) -> None:
    raw = json.dumps({**BASE, "api_key": "sk-BODYSECRET"}).encode()
    packed = parts_of(raw=encode(raw), headers={"content-encoding": encoding})
    assert packed.body == parts_of(raw=raw).body
    assert packed.body.kind == "json" and packed.body.value["api_key"] == "[redacted]"
    assert request_key(packed, RULES) == key_of(raw=raw)


def test_a_form_an_older_tapeproxy_stored_in_clear_is_masked_and_keys_as_today() -> None:
    rules = MatchRules()
    old = as_stored(
        RequestParts(
            "POST", "translate", "/v2", (), (), Payload("text", "q=hello&target=de&key=AIzaOLD")
        )
    )
    new = request_parts(
        "POST",
        "translate",
        "/v2",
        "",
        {"content-type": "application/x-www-form-urlencoded"},
        b"q=hello&target=de&key=AIzaNEW",
        rules,
    )
    assert redacted(old).body == Payload("text", "q=hello&target=de&key=[redacted]")
    assert request_key(old, rules) == request_key(new, rules)
