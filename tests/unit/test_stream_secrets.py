"""Secrets split across stream frames, in every stream dialect: a pattern is matched in the
text the client joins, at every split point of the secret over 2 and 3 frames, and every
frame stays a valid frame of its dialect. And the well-known key formats: what they catch,
what they leave alone, and opting out of them."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapeproxy.errors import ConfigError
from tapeproxy.exchange.framing import frame_payload
from tapeproxy.redaction import streams
from tapeproxy.redaction.formats import (
    FORMATS,
    GATED,
    HINTS,
    UNDERSCORED_HINTS,
    check_keep,
    may_hold_key,
)
from tapeproxy.redaction.memo import Memo
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import MARKER

# Built here, not written whole: a secret scanner looking at the repository finds no key.
SECRET = "sk-" + "proj-" + "ABCDEF" + "GHIJKLMNOPQRSTUVWXYZ" + "0123456789"
PATTERN = r"sk-proj-[A-Za-z0-9]+"
USER_ONLY = Scrubber.build((), [PATTERN], keep=["all"])
DEFAULTS = Scrubber.build()


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sse(event: str | None, payload: Any, end: str = "\n") -> str:
    head = f"event: {event}{end}" if event else ""
    return f"{head}data: {compact(payload)}{end}{end}"


@dataclass(frozen=True)
class Dialect:
    """How one provider streams text: `frames` of text pieces, `read` back the client's text."""

    name: str
    wire: str  # sse, ndjson or json
    frames: Callable[[list[str]], list[str]]
    read: Callable[[Any], str]  # one decoded payload -> the piece of text it carries
    tail: tuple[str, ...] = ()  # frames after the text (the final frame)


def chat(field: str) -> Callable[[list[str]], list[str]]:
    def build(pieces: list[str]) -> list[str]:
        out = []
        for piece in pieces:
            delta: dict[str, Any] = {field: piece}
            if field == "arguments":
                delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            out.append(sse(None, {"id": "c1", "choices": [{"index": 0, "delta": delta}]}))
        return out

    return build


def chat_read(payload: Any) -> str:
    delta = payload["choices"][0]["delta"]
    if "tool_calls" in delta:
        return str(delta["tool_calls"][0]["function"]["arguments"])
    return "".join(str(v) for k, v in delta.items() if k != "role")


def responses(kind: str) -> Callable[[list[str]], list[str]]:
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    return lambda pieces: [sse(kind, {"type": kind, **where, "delta": p}) for p in pieces]


def anthropic(kind: str, field: str) -> Callable[[list[str]], list[str]]:
    def build(pieces: list[str]) -> list[str]:
        return [
            sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": kind, field: p}},
            )
            for p in pieces
        ]

    return build


def gemini(pieces: list[str]) -> list[str]:
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": p}], "role": "model"}}]} for p in pieces
    ]
    return [sse(None, chunk, "\r\n") for chunk in chunks]


def gemini_array(pieces: list[str]) -> list[str]:
    """A JSON array document, cut into frames inside each item (as a network would)."""
    items = [compact({"candidates": [{"content": {"parts": [{"text": p}]}}]}) for p in pieces]
    document = "[" + ",\r\n".join(items) + "]"
    cuts = sorted({document.index(item) + len(item) // 2 for item in items})
    return [document[a:b] for a, b in itertools.pairwise([0, *cuts, len(document)])]


def ollama(pieces: list[str], field: str = "content") -> list[str]:
    line = {"model": "m", "done": False}
    return [compact({**line, "message": {"role": "assistant", field: p}}) + "\n" for p in pieces]


def anthropic_read(payload: Any) -> str:
    delta = payload["delta"]
    return str(delta.get("text", delta.get("partial_json", "")))


DIALECTS = [
    Dialect("chat-content", "sse", chat("content"), chat_read, ("data: [DONE]\n\n",)),
    Dialect("chat-tool-arguments", "sse", chat("arguments"), chat_read),
    Dialect("chat-refusal", "sse", chat("refusal"), chat_read),
    Dialect(
        "responses-text",
        "sse",
        responses("response.output_text.delta"),
        lambda p: str(p["delta"]),
    ),
    Dialect(
        "responses-arguments",
        "sse",
        responses("response.function_call_arguments.delta"),
        lambda p: str(p["delta"]),
    ),
    Dialect("anthropic-text", "sse", anthropic("text_delta", "text"), anthropic_read),
    Dialect("anthropic-json", "sse", anthropic("input_json_delta", "partial_json"), anthropic_read),
    Dialect(
        "gemini-sse",
        "sse",
        gemini,
        lambda p: "".join(part["text"] for part in p["candidates"][0]["content"]["parts"]),
    ),
    Dialect(
        "gemini-json",
        "json",
        gemini_array,
        lambda p: "".join(part["text"] for part in p["candidates"][0]["content"]["parts"]),
    ),
    Dialect("ollama", "ndjson", ollama, lambda p: str(p["message"]["content"])),
    # Reasoning a client joins too (a model may think a key through before it answers).
    Dialect("chat-reasoning", "sse", chat("reasoning_content"), chat_read),
    Dialect("chat-reasoning-or", "sse", chat("reasoning"), chat_read),
    Dialect(
        "responses-reasoning-summary",
        "sse",
        responses("response.reasoning_summary_text.delta"),
        lambda p: str(p["delta"]),
    ),
    Dialect(
        "responses-mcp-arguments",
        "sse",
        responses("response.mcp_call_arguments.delta"),
        lambda p: str(p["delta"]),
    ),
    Dialect(
        "ollama-thinking",
        "ndjson",
        lambda pieces: ollama(pieces, "thinking"),
        lambda p: str(p["message"]["thinking"]),
    ),
]


def client_text(dialect: Dialect, texts: list[str]) -> str:
    """What the client reads, every frame checked for a valid frame of its dialect."""
    if dialect.wire == "json":
        return "".join(map(dialect.read, json.loads("".join(texts))))
    pieces = []
    for text in texts:
        if text in dialect.tail:
            continue
        payload = frame_payload(dialect.wire, text)  # type: ignore[arg-type]
        assert payload is not None, f"not a valid frame any more: {text!r}"
        pieces.append(dialect.read(payload))
    return "".join(pieces)


def leftovers(secret: str, text: str, size: int = 8) -> list[str]:
    return [
        secret[i : i + size] for i in range(len(secret) - size + 1) if secret[i : i + size] in text
    ]


def check_split(
    dialect: Dialect,
    scrubber: Scrubber,
    secret: str,
    cuts: tuple[int, ...],
    before: str,
    after: str,
) -> None:
    pieces = [secret[a:b] for a, b in itertools.pairwise([0, *cuts, len(secret)])]
    pieces[0], pieces[-1] = before + pieces[0], pieces[-1] + after
    texts = [*dialect.frames(pieces), *dialect.tail]
    frames = [{"ms": n, "text": text} for n, text in enumerate(texts)]
    scrubbed = [f["text"] for f in scrubber.frames(frames, dialect.wire)]
    assert client_text(dialect, texts) == before + secret + after  # the test's own frames
    assert client_text(dialect, scrubbed) == before + MARKER + after
    assert not leftovers(secret, json.dumps(scrubbed)), (dialect.name, cuts, scrubbed)
    assert not leftovers(secret, "".join(scrubbed))
    if dialect.wire == "sse":  # the same events, the same lines around their data
        assert len(scrubbed) == len(texts)
        for old, new in zip(texts, scrubbed, strict=True):
            assert [line for line in old.splitlines() if not line.startswith("data:")] == [
                line for line in new.splitlines() if not line.startswith("data:")
            ]
    if dialect.wire == "ndjson":
        assert len(scrubbed) == len(texts) and all(t.endswith("\n") for t in scrubbed)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_pattern_split_over_two_frames_at_every_point_is_scrubbed(dialect: Dialect) -> None:
    for cut in range(1, len(SECRET)):
        check_split(dialect, USER_ONLY, SECRET, (cut,), "Your key is ", " ok")


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_pattern_split_over_three_frames_at_every_pair_of_points_is_scrubbed(
    dialect: Dialect,
) -> None:
    for cuts in itertools.combinations(range(1, len(SECRET)), 2):
        check_split(dialect, USER_ONLY, SECRET, cuts, "", ".")


# Text around the secret that cannot run on into its match (no letter or digit), with JSON
# escapes and characters beyond ASCII.
AROUND = st.text(alphabet=st.sampled_from(list(' .,:;!?\n"\\😀\u2028')), max_size=12)


@settings(max_examples=150)
@given(
    dialect=st.sampled_from(DIALECTS),
    cuts=st.lists(st.integers(1, len(SECRET) - 1), min_size=1, max_size=2, unique=True),
    before=AROUND.map(lambda t: "Key " + t),
    after=AROUND,
)
def test_split_anywhere_with_any_text_around_it_the_secret_leaves_no_trace(
    dialect: Dialect, cuts: list[int], before: str, after: str
) -> None:
    check_split(dialect, USER_ONLY, SECRET, tuple(sorted(cuts)), before, after)
    check_split(dialect, DEFAULTS, SECRET, tuple(sorted(cuts)), before, after)


def test_two_secrets_in_one_frame_and_one_split_are_all_scrubbed() -> None:
    [dialect] = [d for d in DIALECTS if d.name == "chat-content"]
    pieces = [f"a {SECRET} b {SECRET[:9]}", f"{SECRET[9:]} c"]
    frames = [{"ms": 0, "text": t} for t in dialect.frames(pieces)]
    scrubbed = [f["text"] for f in USER_ONLY.frames(frames, "sse")]
    assert client_text(dialect, scrubbed) == f"a {MARKER} b {MARKER} c"


def test_texts_of_different_choices_and_blocks_are_not_joined() -> None:
    """Choice 0 ends with the start of a key and choice 1 holds its end: no client joins
    them, so choice 0's own match is scrubbed and choice 1 keeps its text."""
    frames: list[dict[str, Any]] = [
        {
            "ms": 0,
            "text": sse(None, {"choices": [{"index": 0, "delta": {"content": SECRET[:20]}}]}),
        },
        {
            "ms": 1,
            "text": sse(None, {"choices": [{"index": 1, "delta": {"content": SECRET[20:]}}]}),
        },
    ]
    assert USER_ONLY.frames(frames, "sse") == [
        {**frames[0], "text": frames[0]["text"].replace(SECRET[:20], MARKER)},
        frames[1],
    ]


def keys() -> dict[str, str]:
    """One realistic key of each format, made up here at runtime."""
    alnum = "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zC"
    return {
        "openai": "sk-" + "proj-" + alnum + alnum,
        "anthropic": "sk-" + "ant-api03-" + alnum + alnum + "AA",
        "google": "AI" + "za" + "Sy" + alnum + "Q",
        "github": "gh" + "p_" + alnum + "abcd",
        "openai-ephemeral": "e" + "k_" + alnum,
        "aws": "AK" + "IA" + "IOSFODNN7EXAMPLE",
        "aws-session": "X-Amz-Security-" + "Token=IQoJb3JpZ2luX2VjEFoaCXVz" + alnum,
        "slack": "xo" + "xb-" + "1234567890-" + "0987654321-" + alnum[:24],
        "jwt": "ey" + "JhbGciOiJIUzI1NiJ9" + ".ey" + "JzdWIiOiIxMjM0NTY3ODkwIn0" + ".sig" + alnum,
    }


def test_every_format_has_a_key_here() -> None:
    assert set(keys()) == set(FORMATS)


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_key_of_each_format_is_scrubbed_by_default_and_kept_when_opted_out(name: str) -> None:
    key = keys()[name]
    body = {"messages": [{"role": "user", "content": f"use {key} please"}], "n": 1}
    assert DEFAULTS.value(body)["messages"][0]["content"] == f"use {MARKER} please"
    for keep in ([name], ["all"]):
        assert Scrubber.build(keep=keep).value(body) == body
    others = [other for other in FORMATS if other != name]
    assert Scrubber.build(keep=others).text(key) == MARKER


@pytest.mark.parametrize(
    "text",
    [
        "sk-learn-is-a-python-library-for-machine-learning",  # no digit
        "task-0123456789abcdef0123456789abcdef0123",  # `sk-` inside a word
        "sk-short-123",
        "AIzaTooShort123",
        "AKIAlowercase12345678",
        "ghp_short123",
        "xoxb-no-digits-here-at-all",
        "eyJhbGciOiJIUzI1NiJ9 alone",
        "chatcmpl-0123456789abcdefABCDEF0123456789",
        "sha256:0123456789abcdef0123456789abcdef",
        "msg_01XFDUDYJgAACzvnptvVoYEL toolu_01A09q90qw90lq917835lq9",
    ],
)
def test_ordinary_text_that_resembles_a_key_is_left_alone(text: str) -> None:
    assert DEFAULTS.text(text) == text


@pytest.mark.parametrize(
    "shown",
    [
        "x-amz-security-token:{token}\n",  # AWS's canonical string, in its 403
        "?X-Amz-Security-Token={token}&X-Amz-Date=1",  # a presigned URL
        '{{"X-Amz-Security-Token": "{token}"}}',  # headers as JSON
        "{{'X-Amz-Security-Token': b'{token}'}}",  # botocore's debug line
    ],
)
def test_an_aws_session_token_is_scrubbed_wherever_aws_quotes_it_by_name(shown: str) -> None:
    token = "IQoJb3JpZ2luX2VjEFoaCXVzLWVhc3QtMSJHMEUCIQD+abc/def=="
    assert token[-16:] not in DEFAULTS.text(shown.format(token=token))


@pytest.mark.parametrize("dialect", ["sse", "ndjson", "eventstream"])
def test_a_frame_nested_past_the_json_parsers_depth_is_scrubbed_as_text(dialect: str) -> None:
    """A hostile upstream's event `[[[[...]]]]`: RecursionError escaped the scrub."""
    deep = "[" * 100_000 + f'"{keys()["openai"]}"' + "]" * 100_000
    text = {"sse": f"data: {deep}\n\n", "ndjson": f"{deep}\n", "eventstream": deep}[dialect]
    (scrubbed,) = DEFAULTS.frames([{"ms": 0, "text": text}], dialect)
    assert keys()["openai"] not in scrubbed["text"]


def test_an_unknown_format_to_keep_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no key format named 'stripe'; known formats: openai"):
        check_keep(["jwt", "stripe"])
    assert check_keep(["JWT", "All"]) == ("jwt", "all")


def test_a_request_keys_the_same_scrubbed_twice() -> None:
    """A stored request is scrubbed already: scrubbing it again (replay keys the incoming
    request through the same Scrubber) changes nothing."""
    once = DEFAULTS.value({"input": f"key {keys()['github']} and {keys()['aws']}"})
    assert DEFAULTS.value(once) == once == {"input": f"key {MARKER} and {MARKER}"}


def test_a_secret_split_over_raw_chunks_of_text_is_scrubbed() -> None:
    """A chunked answer that is no stream dialect (`chunks`): its text is joined, scrubbed,
    and laid back over its chunks."""
    chunks = [{"ms": 0, "text": "Your key is " + SECRET[:9]}, {"ms": 1, "text": SECRET[9:] + " ok"}]
    scrubbed = USER_ONLY.frames(chunks, "chunks")
    assert "".join(f["text"] for f in scrubbed) == f"Your key is {MARKER} ok"
    assert not leftovers(SECRET, json.dumps(scrubbed))


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_key_holds_a_hint_so_the_quick_check_never_skips_one(name: str) -> None:
    assert may_hold_key(keys()[name])
    assert not may_hold_key("an ordinary sentence, with-dashes and no key at all")


def test_every_hint_is_behind_gates_it_holds_so_the_gates_never_skip_one() -> None:
    gated = [hint for _, hints in GATED for hint in hints]
    assert sorted(gated) == sorted((*HINTS, *UNDERSCORED_HINTS))
    for gates, hints in GATED:
        assert all(gate in hint for gate in gates for hint in hints), (gates, hints)


@pytest.mark.parametrize("hint", [*HINTS, *UNDERSCORED_HINTS])
def test_each_hint_alone_or_in_ordinary_text_may_hold_a_key(hint: str) -> None:
    assert may_hold_key(hint)
    assert may_hold_key(f"text before {hint} and after, with-dashes_and_underscores")
    assert may_hold_key(f"escaped: {hint[:-1]}%{ord(hint[-1]):02X}rest")


def test_a_long_text_is_searched_once_and_the_memory_stays_bounded() -> None:
    seen: list[str] = []

    def test(text: str) -> bool:
        seen.append(text)
        return "x" in text

    memo = Memo(test, least=10, limit=100)
    long_one, other = "a" * 40 + "x", "b" * 40
    assert [memo(long_one), memo(long_one), memo(other), memo(other)] == [True, True, False, False]
    assert seen == [long_one, other], "each long text searched once"
    assert [memo("short x"), memo("short x")] == [True, True] and seen[-2:] == ["short x"] * 2
    memo("c" * 40)  # 121 characters would be held: it starts afresh
    assert len(memo) == 1
    memo("d" * 101)  # longer than the limit: searched, never held
    assert len(memo) == 1


def test_a_key_in_a_long_message_sent_again_is_scrubbed_again() -> None:
    """A conversation is sent again on every turn: the second time its long message is
    answered from memory, and scrubbed all the same."""
    scrubber = Scrubber.build()
    message = "context " * 400 + keys()["aws"]
    body = {"messages": [{"role": "user", "content": message}]}
    first, again = scrubber.value(body), scrubber.value(json.loads(json.dumps(body)))
    assert first == again and first["messages"][0]["content"].endswith(MARKER)
    assert len(scrubber.holds) == 1


@pytest.mark.parametrize("unit", ["sk-", "-eyJ", "sk-proj-", "_-eyJ"])
def test_a_body_of_key_prefixes_is_scrubbed_in_linear_time(unit: str) -> None:
    """Every start of a key is at the start of a run of key characters: a body that repeats
    a prefix (a request's text, scrubbed on the event loop as it is keyed) is not searched
    again from each repeat to the end of the run (quadratic: 30 KB took 4 s)."""
    text = unit * (60_000 // len(unit))
    started = time.perf_counter()
    assert DEFAULTS.text(text) == text
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("before", ["-", "_", "a", "é"])
def test_a_key_right_after_a_key_character_is_part_of_that_word(before: str) -> None:
    for name in ("openai", "jwt"):
        assert DEFAULTS.text(before + keys()[name]) == before + keys()[name]
        assert DEFAULTS.text("=" + keys()[name]) == "=" + MARKER


@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d.wire != "json"], ids=lambda d: d.name)
def test_a_stream_too_large_to_hold_is_scrubbed_in_windows_that_cut_no_key(
    dialect: Dialect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of a few frames: every frame boundary splits a key, so every window's edge
    does, and none is left."""
    monkeypatch.setattr(streams, "WINDOW_BYTES", 1_000)
    monkeypatch.setattr(streams, "CARRY_BYTES", 300)
    key = keys()["openai"]
    texts = [f"{key[20:] if n else ''} text {n} {key[:20] if n < 29 else ''}" for n in range(30)]
    frames = [{"ms": n, "text": text} for n, text in enumerate(dialect.frames(texts))]
    scrubbed = list(streams.windowed(frames, lambda window: DEFAULTS.frames(window, dialect.wire)))
    assert [f["ms"] for f in scrubbed] == list(range(30))
    assert not leftovers(key, json.dumps(scrubbed))
    assert client_text(dialect, [f["text"] for f in scrubbed]).count(MARKER) == 29


def test_a_stream_of_many_split_keys_is_laid_back_in_linear_time() -> None:
    """Each match is laid back over the pieces it touches only (every piece for each match
    took minutes for 20,000 of them)."""
    key = keys()["openai"]
    pieces = [f"{key[20:] if n else ''} {key[:20] if n < 19_999 else ''}" for n in range(20_000)]
    started = time.perf_counter()
    scrubbed = streams.scrub_pieces(pieces, [re.compile(FORMATS["openai"][0])])
    assert time.perf_counter() - started < 2.0
    assert "".join(scrubbed).count(MARKER) == 19_999 and not leftovers(key, "".join(scrubbed))


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_percent_encoded_key_split_over_two_frames_is_scrubbed(dialect: Dialect) -> None:
    """A key percent-encoded in a stream's text (a URL the model writes out) is scrubbed as
    in a body: else a fresh recording held a key that `verify` then flags."""
    encoded = SECRET.replace("-", "%2D")
    for cut in range(1, len(encoded)):
        check_split(dialect, DEFAULTS, encoded, (cut,), "see ", " ok")


@settings(max_examples=80, deadline=None)
@given(
    pieces=st.lists(st.text(alphabet="ab \n,-", max_size=40), max_size=8),
    most=st.integers(1, 30),
)
def test_a_long_texts_pieces_cut_again_after_a_space_join_to_it_and_stay_bounded(
    pieces: list[str], most: int
) -> None:
    cut = list(streams.spaced(pieces, most))
    assert "".join(cut) == "".join(pieces)
    longest = max(map(len, pieces), default=0)
    assert all(len(piece) <= longest + most + 1 for piece in cut)
    assert all(piece[-1] in "\n," or len(piece) > most for piece in cut[:-1] if piece)
