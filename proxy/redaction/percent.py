"""Text as a server reads it after percent-decoding: a path may spell a key `ghp%5F...` or
`%67hp_...`, or hide its start behind an escape (`x%3Dghp_...`: the `D` is a word character,
so no key format sees a key start there), and the upstream decodes it to the key all the
same. The scrubber matches the decoded text and replaces the raw span each match came from."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

PatternsFor = Callable[[str], Iterable[re.Pattern[str]]]  # the patterns worth running on a text

_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
ROUNDS = 3  # as many decodings as a chain of servers might apply (as check_path takes)


def escaped(text: str) -> bool:
    """Whether `text` holds a percent escape (a quick test first: most text holds no `%`)."""
    return "%" in text and _ESCAPE.search(text) is not None


def decoded(text: str) -> str:
    """`text` with its escapes decoded, each to the one character of its byte, ROUNDS times
    (key alphabets are ASCII: no UTF-8 sequence need be joined to see one)."""
    for _ in range(ROUNDS):
        if not escaped(text):
            break
        text = _ESCAPE.sub(lambda m: chr(int(m.group(0)[1:], 16)), text)
    return text


def decoded_with_starts(text: str) -> tuple[str, list[int]]:
    """`decoded(text)`, and where each of its characters starts in `text` (one more entry:
    the length of `text`), so a match over the decoded text names its raw span."""
    starts = list(range(len(text) + 1))
    for _ in range(ROUNDS):
        if not escaped(text):
            break
        chars: list[str] = []
        onward: list[int] = []
        at = 0
        for escape in _ESCAPE.finditer(text):
            chars.append(text[at : escape.start()])
            onward.extend(starts[at : escape.start()])
            chars.append(chr(int(escape.group(0)[1:], 16)))
            onward.append(starts[escape.start()])
            at = escape.end()
        chars.append(text[at:])
        onward.extend(starts[at:])
        text, starts = "".join(chars), onward
    return text, starts


def raw_spans(starts: list[int], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans of the decoded text as spans of the raw text, in order, overlaps merged."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted((starts[s], starts[e]) for s, e in spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def scrub_decoded(text: str, patterns_for: PatternsFor, marker: str) -> str:
    """`text` with each match over its decoded text replaced by `marker`, over the raw span
    it came from (`/keys/ghp%5F...` -> `/keys/[redacted]`); escapes elsewhere kept."""
    if not escaped(text):
        return text
    plain, starts = decoded_with_starts(text)
    spans = [m.span() for p in patterns_for(plain) for m in p.finditer(plain) if m.group(0)]
    out, at = [], 0
    for start, end in raw_spans(starts, spans):
        out += [text[at:start], marker]
        at = end
    return "".join([*out, text[at:]])


def matches_decoded(text: str, patterns_for: PatternsFor) -> bool:
    """Whether a pattern matches something in `text`'s decoded text (when it has escapes)."""
    if not escaped(text):
        return False
    plain = decoded(text)
    return any(m.group(0) for p in patterns_for(plain) for m in p.finditer(plain))
