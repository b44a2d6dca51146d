"""The secret filter: no credential value survives redaction, whatever the name's case."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tapeproxy.exchange.bodies import MULTIPART_BOUNDARY, Payload
from tapeproxy.redaction.credentials import (
    is_secret_field,
    is_secret_form_field,
    is_secret_header,
    is_secret_query,
)
from tapeproxy.redaction.secrets import (
    MARKER,
    looks_form,
    masked_userinfo,
    redact_form,
    redact_headers,
    redact_json,
    redact_multipart,
    redact_payload,
    redact_query,
    redact_text,
    redact_url,
)

KNOWN_SECRET_HEADERS = [
    "authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
    "proxy-authorization",
    "x-goog-api-key",
]
SAFE_HEADERS = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "anthropic-version": "2023-06-01",
    "openai-beta": "assistants=v2",
    "user-agent": "OpenAI/Python 1.40.0",
    "x-stainless-lang": "python",
}
SAFE_QUERY = [("alt", "sse"), ("limit", "10"), ("model", "gemini-pro")]

name_part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_", max_size=6)


def random_case(name: str, flips: list[bool]) -> str:
    flips = (flips + [False] * len(name))[: len(name)]
    return "".join(c.upper() if flip else c for c, flip in zip(name, flips, strict=True))


@st.composite
def secret_names(draw: st.DrawFn, known: list[str], words: list[str]) -> str:
    """A credential-ish name: a known one, or any name holding a telltale word, in any case."""
    known_name = st.sampled_from(known)
    invented = st.builds(lambda a, w, b: a + w + b, name_part, st.sampled_from(words), name_part)
    name = draw(known_name | invented)
    return random_case(name, draw(st.lists(st.booleans(), max_size=len(name))))


secret_values = st.text(min_size=6).map(lambda s: "SECRET<" + s + ">")


@given(
    names=st.lists(secret_names(KNOWN_SECRET_HEADERS, ["token", "secret", "auth"]), min_size=1),
    secret=secret_values,
)
def test_redacted_headers_never_contain_a_secret(names: list[str], secret: str) -> None:
    headers = {**SAFE_HEADERS, **{name: secret for name in names}}
    redacted = redact_headers(headers)
    assert all(secret not in k and secret not in v for k, v in redacted.items())
    assert redacted == SAFE_HEADERS


@given(
    names=st.lists(
        secret_names(
            ["key", "api_key", "token", "sig", "access_token"],
            ["secret", "password", "signature", "apikey"],
        )
    ),
    secret=secret_values,
)
def test_redacted_query_never_contains_a_secret(names: list[str], secret: str) -> None:
    pairs = [*SAFE_QUERY, *((name, secret) for name in names)]
    redacted = redact_query(pairs)
    assert all(secret not in k and secret not in v for k, v in redacted)
    assert redacted == SAFE_QUERY


@given(name=st.sampled_from(sorted(SAFE_HEADERS)), flips=st.lists(st.booleans()))
def test_safe_headers_are_kept_with_their_names_lowercased(name: str, flips: list[bool]) -> None:
    assume(not any(word in name for word in ("auth", "token", "secret")))
    assert redact_headers({random_case(name, flips): "v"}) == {name: "v"}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("AUTHORIZATION", True),
        ("X-Api-Key", True),
        ("X-Goog-Api-Key", True),
        ("Set-Cookie", True),
        ("X-Amz-Security-Token", True),
        ("OpenAI-Organization", True),
        ("x-custom-auth", True),
        ("x-session-id", True),
        ("content-type", False),
        ("anthropic-version", False),
        ("openai-beta", False),
        ("x-stainless-lang", False),
    ],
)
def test_is_secret_header(name: str, secret: bool) -> None:
    assert is_secret_header(name) is secret


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("key", True),
        ("KEY", True),
        ("api_key", True),
        ("X-Amz-Signature", True),
        ("X-Amz-Credential", True),
        ("access_token", True),
        ("token", True),
        ("client_secret", True),
        ("access_key", True),
        ("auth_key", True),
        ("subscription-key", True),
        ("private_token", True),
        ("appid", True),
        ("app_key", True),
        ("secret_key", True),
        ("private_key", True),
        ("session_key", True),
        ("hapikey", True),
        ("alt", False),
        ("model", False),
        ("limit", False),
        ("code", True),  # an OAuth authorization code
        ("page_token", False),
        ("pageToken", False),
        ("nextPageToken", False),
        ("author", False),
        ("max_tokens", False),
        ("app", False),
        ("keyword", False),
    ],
)
def test_is_secret_query(name: str, secret: bool) -> None:
    assert is_secret_query(name) is secret


@pytest.mark.parametrize(
    "name",
    ["api_token", "apiToken", "accessToken", "access-token", "auth", "X-Api-Key", "client_secret"],
)
def test_common_credential_spellings_in_queries_are_secret(name: str) -> None:
    assert is_secret_query(name)


def test_redact_url_hides_every_query_value() -> None:
    url = "http://g/v1beta/models/x:generateContent?alt=sse&key=AIzaSECRET&pageToken=p2"
    shown = redact_url(url)
    assert "AIzaSECRET" not in shown
    assert shown == (
        "http://g/v1beta/models/x:generateContent?alt=[redacted]&key=[redacted]"
        "&pageToken=[redacted]"
    ), "no query value reaches a message or a log, whatever its name"
    assert redact_url("http://g/plain") == "http://g/plain"


def test_redact_url_drops_user_and_password() -> None:
    assert redact_url("http://apiuser:UserInfoPass@127.0.0.1:9/x?key=K1&q=a") == (
        "http://127.0.0.1:9/x?key=[redacted]&q=[redacted]"
    )
    assert redact_url("https://user@host/v1") == "https://host/v1"
    assert redact_url("http://host/a@b") == "http://host/a@b"


@pytest.mark.parametrize(
    "text",
    [
        "Connection timeout to host http://127.0.0.1:9/v1beta/models?key=SECRET1&x=1",
        "400, message='Bad', url='http://127.0.0.1:9/x?api_key=SECRET1'",
        "Cannot connect via http://u:SECRET1@h:1/x [refused]",
        "see URL('https://h/p?access_token=SECRET1#frag') and (http://h/?sig=SECRET1)",
    ],
)
def test_redact_text_hides_secrets_of_every_url_in_a_message(text: str) -> None:
    shown = redact_text(text)
    assert "SECRET1" not in shown
    assert shown.split("http")[0] == text.split("http")[0]


# --- request bodies ------------------------------------------------------------------------

BODY_SECRET_NAMES = [
    "credentials",
    "credential",
    "bearer",
    "refresh_token",
    "id_token",
    "session_token",
    "api_key",
    "apiKey",
    "API-KEY",
    "x_api_key",
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "clientSecret",
    "password",
    "new_password",
    "secret",
    "secret_key",
    "private_key",
    "auth_token",
    "session_token",
    "openai_api_key",
    "passwd",
    "authorization",
    "Authorization",
    "authorization_token",
    "bot_token",
    "slackBotToken",
    "oauth_token",
    "bearer_token",
    "token",
    "Token",
]
ORDINARY_FIELDS = [
    "key",
    "max_tokens",
    "auth",
    "author",
    "tokens",
    "page_token",
    "nextPageToken",
    "keywords",
    "model",
    "messages",
    "secretary",
    "password_hint",
    "prompt_cache_key",
    "top_k",
    "max_output_tokens",
    "secret_santa",
    "authorized",
    "tokenizer",
    "token_limit",
]
CONVERSATION = [
    "messages",
    "contents",
    "input",
    "prompt",
    "system",
    "instructions",
    "systemInstruction",
]


@pytest.mark.parametrize("name", BODY_SECRET_NAMES)
def test_credential_named_body_fields_are_secret(name: str) -> None:
    assert is_secret_field(name)


@pytest.mark.parametrize("name", ORDINARY_FIELDS)
def test_ordinary_body_field_names_are_not(name: str) -> None:
    assert not is_secret_field(name)


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
plain_names = st.sampled_from([n for n in ORDINARY_FIELDS if n not in CONVERSATION]) | st.text(
    alphabet="xyzq_", max_size=5
)


@st.composite
def bodies_with_secrets(draw: st.DrawFn) -> tuple[Any, str]:
    """A JSON value with a secret placed directly under a credential name somewhere inside
    it (a string, or in a list, or under a credential name of an object held there), or as
    a credential header of a `headers` object, and the secret."""
    secret = draw(secret_values)
    hidden: Any = draw(
        st.sampled_from(
            [
                secret,
                [secret],
                [[secret], "x"],
                {"api_key": secret},
                [{"token": [secret]}],
            ]
        )
    )
    value: Any = draw(
        st.sampled_from(
            [
                {draw(st.sampled_from(BODY_SECRET_NAMES)): hidden},
                {"headers": {draw(st.sampled_from(KNOWN_SECRET_HEADERS)): secret}},
            ]
        )
    )
    for _ in range(draw(st.integers(0, 4))):  # bury it
        siblings = draw(st.dictionaries(plain_names, json_scalars, max_size=3))
        value = draw(
            st.sampled_from(
                [
                    {**siblings, draw(plain_names): value},
                    [*siblings.values(), value],
                ]
            )
        )
    return value, secret


@given(case=bodies_with_secrets())
def test_redacted_json_never_contains_a_secret_placed_under_a_credential_name(
    case: tuple[Any, str],
) -> None:
    value, secret = case
    assert secret not in repr(redact_json(value))


@given(
    value=st.recursive(
        json_scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_names, inner, max_size=3),
        max_leaves=12,
    )
)
def test_a_body_without_credential_names_is_left_as_it_is(value: Any) -> None:
    assert redact_json(value) == value


def test_a_boolean_named_like_a_secret_is_a_flag_and_stays() -> None:
    body = {"secret": True, "public": False, "api_key": None, "password": 1234}
    assert redact_json(body) == {
        "secret": True,
        "public": False,
        "api_key": None,
        "password": MARKER,
    }


@given(
    pairs=st.lists(
        st.tuples(st.sampled_from(["grant_type", "scope", "state", "q"]), st.text(max_size=6)),
        max_size=4,
    ),
    names=st.lists(
        st.sampled_from(["client_secret", "password", "refresh_token", "api_key", "token", "key"]),
        min_size=1,
        max_size=3,
    ),
    secret=secret_values,
)
def test_redacted_form_never_contains_a_secret_and_keeps_the_rest(
    pairs: list[tuple[str, str]], names: list[str], secret: str
) -> None:
    text = urlencode([*pairs, *((name, secret) for name in names)])
    redacted = redact_form(text)
    assert urlencode([(k, secret) for k in names]) not in redacted
    assert all(secret != v for _, v in parse_qsl(redacted))
    assert redacted.startswith(urlencode(pairs))


def test_redact_payload_handles_json_and_form_bodies_only() -> None:
    form = "grant_type=client_credentials&client_id=me&client_secret=S3"
    assert redact_payload(Payload("text", form), "application/x-www-form-urlencoded").value == (
        "grant_type=client_credentials&client_id=me&client_secret=[redacted]"
    )
    text = "client_secret=S3 is not a form"
    assert redact_payload(Payload("text", text), "text/plain").value == text
    assert redact_payload(Payload("json", {"api_key": "tvly-1"}), "").value == {"api_key": MARKER}


# --- what a body may hold that is not a secret, and credentials in MCP and headers --------

MCP_ANTHROPIC: dict[str, Any] = {
    "model": "claude-x",
    "mcp_servers": [
        {
            "type": "url",
            "url": "https://mcp.example.com/sse",
            "name": "gh",
            "authorization_token": "ghp_SECRET1",
        }
    ],
}
MCP_OPENAI: dict[str, Any] = {
    "model": "gpt-4.1",
    "input": "list my repos",
    "tools": [
        {
            "type": "mcp",
            "server_label": "gh",
            "server_url": "https://mcp.example.com",
            "authorization": "ghp_SECRET1",
            "require_approval": "never",
            "headers": {"Authorization": "Bearer ghp_SECRET1", "X-Region": "eu"},
        }
    ],
}
SCHEMA = {
    "model": "m",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "create_user",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "password": {"type": "string", "minLength": 8, "description": "8 chars"},
                        "api_key": {"type": "string", "enum": ["a", "b"]},
                    },
                    "required": ["password"],
                },
            },
        }
    ],
}


def gemini_tool_result(result: Any) -> dict[str, Any]:
    return {
        "contents": [
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "get_vault", "response": result}}],
            }
        ]
    }


@pytest.mark.parametrize(
    "body",
    [
        SCHEMA,
        gemini_tool_result({"secret": "1234", "password": 5, "token": ["t1", "t2"]}),
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "name": "login", "input": {"password": "hunter2"}}
                    ],
                }
            ]
        },
        {"input": [{"type": "function_call_output", "output": {"api_key": "k1"}}]},
        {
            "system": [{"type": "text", "text": "x", "secret": "s"}],
            "prompt": {"token": "t"},
            "instructions": {"password": "p"},
            "systemInstruction": {"secret": "s"},
        },
        {
            "model": "m",
            "max_tokens": 5,
            "key": "k",
            "auth": "a",
            "page_token": "p",
            "prompt_cache_key": "c",
            "top_k": 3,
            "tokens": [1, 2],
            "author": "ann",
        },
        {"password": {"type": "string"}, "secret": {"enum": ["x"]}, "token": {"id": 3}},
    ],
)
def test_what_changes_the_answer_is_never_masked(body: dict[str, Any]) -> None:
    assert redact_json(body) == body


@pytest.mark.parametrize(
    ("body", "masked"),
    [
        (
            MCP_ANTHROPIC,
            {
                **MCP_ANTHROPIC,
                "mcp_servers": [{**MCP_ANTHROPIC["mcp_servers"][0], "authorization_token": MARKER}],
            },
        ),
        (
            MCP_OPENAI,
            {
                **MCP_OPENAI,
                "tools": [
                    {
                        **MCP_OPENAI["tools"][0],
                        "authorization": MARKER,
                        "headers": {"Authorization": MARKER, "X-Region": "eu"},
                    }
                ],
            },
        ),
        (
            {"password": {"api_key": "k", "type": "string"}},
            {"password": {"api_key": MARKER, "type": "string"}},
        ),
        (
            {"password": ["a", ["b", 1], True, None, {"x": "c"}]},
            {"password": [MARKER, [MARKER, MARKER], True, None, {"x": "c"}]},
        ),
        (
            {"a": [{"headers": {"x-api-key": "k", "Cookie": "c", "accept": "*/*"}}]},
            {"a": [{"headers": {"x-api-key": MARKER, "Cookie": MARKER, "accept": "*/*"}}]},
        ),
        (
            {"messages": [{"content": {"api_key": "k", "headers": {"authorization": "k"}}}]},
            {"messages": [{"content": {"api_key": "k", "headers": {"authorization": MARKER}}}]},
        ),
        ({"x": {"messages": {"api_key": "k"}}}, {"x": {"messages": {"api_key": MARKER}}}),
    ],
)
def test_credentials_outside_the_conversation_and_in_headers_objects_are_masked(
    body: dict[str, Any], masked: dict[str, Any]
) -> None:
    assert redact_json(body) == masked


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("apikey", True),
        ("api_key", True),
        ("key", True),
        ("token", True),
        ("auth", True),
        ("client_secret", True),
        ("password", True),
        ("access_token", True),
        ("sig", True),
        ("secret_santa", False),
        ("password_hint", False),
        ("page_token", False),
        ("author", False),
        ("language", False),
        ("keyword", False),
        ("file", False),
    ],
)
def test_is_secret_form_field(name: str, secret: bool) -> None:
    assert is_secret_form_field(name) is secret


def test_a_form_masks_credential_names_only_not_names_holding_a_telltale_word() -> None:
    form = "secret_santa=alice&password_hint=pet&year=2026&key=K1&token=T1&apikey=A1"
    assert redact_form(form) == (
        "secret_santa=alice&password_hint=pet&year=2026&key=[redacted]&token=[redacted]"
        "&apikey=[redacted]"
    )


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("q=hello&target=de&key=K1", True),
        ("a=", True),
        ("a=b=c&d=e", True),
        ("q=%20x+y&z=1", True),
        ("hello", False),
        ("a=b c", False),
        ("a=b&", False),
        ("=b", False),
        ("a=b\n", False),
        ("key=K1 and more", False),
        ("", False),
    ],
)
def test_looks_form(text: str, form: bool) -> None:
    assert looks_form(text) is form


def test_a_stored_text_body_shaped_like_a_form_is_masked_without_its_content_type() -> None:
    stored = Payload("text", "q=hello&target=de&key=AIzaOLD")
    assert redact_payload(stored, "").value == "q=hello&target=de&key=[redacted]"
    prose = Payload("text", "key=AIzaOLD is my key")
    assert redact_payload(prose, "") == prose


DELIMITER = b"--" + MULTIPART_BOUNDARY


def multipart(*parts: tuple[str, bytes]) -> bytes:
    """A multipart/form-data body with tapeproxy's fixed boundary; a part named `file` is an
    upload with a file name and a content type."""
    out = b""
    for name, content in parts:
        upload = b'; filename="a.png"\r\nContent-Type: image/png' if name == "file" else b""
        out += (
            DELIMITER
            + b'\r\nContent-Disposition: form-data; name="'
            + name.encode()
            + b'"'
            + upload
            + b"\r\n\r\n"
            + content
            + b"\r\n"
        )
    return out + DELIMITER + b"--\r\n"


@given(
    parts=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "apikey",
                    "api_key",
                    "key",
                    "password",
                    "language",
                    "file",
                    "model",
                    "secret_santa",
                ]
            ),
            st.binary(max_size=30).filter(lambda b: DELIMITER not in b),
        ),
        max_size=5,
    ),
)
def test_a_multipart_body_masks_the_content_of_credential_parts_and_keeps_every_other_byte(
    parts: list[tuple[str, bytes]],
) -> None:
    secret = {"apikey", "api_key", "key", "password"}
    expected = [(n, MARKER.encode() if n in secret else c) for n, c in parts]
    assert redact_multipart(multipart(*parts)) == multipart(*expected)


def test_a_multipart_part_name_is_read_from_its_content_disposition_not_its_file_name() -> None:
    body = (
        DELIMITER + b'\r\ncontent-disposition: form-data; filename="key"; name="doc"'
        b"\r\n\r\nDATA\r\n" + DELIMITER + b"\r\nContent-Disposition: form-data; name=apikey"
        b"\r\n\r\nK8SECRET\r\n" + DELIMITER + b"--\r\n"
    )
    assert redact_multipart(body) == body.replace(b"K8SECRET", MARKER.encode())


@pytest.mark.parametrize("content_type", ["multipart/form-data; boundary=x", ""])
def test_redact_payload_masks_a_stored_multipart_body_whatever_the_content_type_says(
    content_type: str,
) -> None:
    raw = multipart(("apikey", b"K8SECRET"), ("file", b"\x89PNG"))
    payload = Payload("base64", base64.b64encode(raw).decode())
    masked = base64.b64decode(redact_payload(payload, content_type).value)
    assert masked == multipart(("apikey", MARKER.encode()), ("file", b"\x89PNG"))
    other = Payload("base64", base64.b64encode(b"\x89PNG apikey=K8").decode())
    assert redact_payload(other, content_type) == other


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        ("https://user:pw@host/v1", "https://***@host/v1"),
        ("ftp://token@host", "ftp://***@host"),
        ("https://a@b:p@w@host:8080/x@y?q=@#f@", "https://***@host:8080/x@y?q=@#f@"),
        ("user:pw@host/v1", "***@host/v1"),  # no scheme: still a URL's authority
        ("https://host/a@b", "https://host/a@b"),  # an @ in the path is no userinfo
        ("https://host?to=a@b", "https://host?to=a@b"),
        ("https://host", "https://host"),
        ("", ""),
    ],
)
def test_a_refused_url_is_quoted_without_its_userinfo(typed: str, shown: str) -> None:
    assert masked_userinfo(typed) == shown
