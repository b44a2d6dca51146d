"""Pure matching: which recording answers the n-th ask of a key, and for a miss, the closest
recorded request and the fields that differ (by JSON path)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from tapeproxy.engine.keying import RequestParts
from tapeproxy.settings import RepeatPolicy

MISSING: Any = object()
MAX_ALIGNED = 250_000  # items of one list times items of the other


def pick_ordinal(ordinals: Sequence[int], ask: int, policy: RepeatPolicy) -> int | None:
    """The recorded ordinal that answers the `ask`-th (1-based) identical request of a run."""
    if not ordinals:
        return None
    if ask <= len(ordinals):
        return ordinals[ask - 1]
    if policy is RepeatPolicy.REPEAT_LAST:
        return ordinals[-1]
    if policy is RepeatPolicy.CYCLE:
        return ordinals[(ask - 1) % len(ordinals)]
    return None


@dataclass(frozen=True)
class Difference:
    path: str
    recorded: Any
    requested: Any

    def render(self, width: int = 80) -> str:
        """One line, however long the values: long strings are cut around the change."""
        if self.recorded is MISSING:
            line = f"{self.path}: added {_short(self.requested, width)}"
        elif self.requested is MISSING:
            line = f"{self.path}: removed (was {_short(self.recorded, width)})"
        elif isinstance(self.recorded, str) and isinstance(self.requested, str):
            before, after = _around_change(self.recorded, self.requested, width // 2)
            line = f"{self.path}: {before} -> {after}"
        else:
            line = f"{self.path}: {_short(self.recorded, width)} -> {_short(self.requested, width)}"
        return _clip(line, 4 * width)

    def to_dict(self) -> dict[str, Any]:
        """As JSON, a large value cut to an excerpt: a miss report (and the journal of them)
        holds differences, never whole bodies."""
        out: dict[str, Any] = {"path": self.path}
        if self.recorded is not MISSING:
            out["recorded"] = excerpt(json_safe(self.recorded))
        if self.requested is not MISSING:
            out["requested"] = excerpt(json_safe(self.requested))
        return out


MAX_EXCERPT = 1000  # characters of a value shown in a difference's JSON


def excerpt(value: Any) -> Any:
    """`value` itself when its JSON is short, else the start of its JSON text and its size."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) <= MAX_EXCERPT:
        return value
    return f"{text[:MAX_EXCERPT]}... ({len(text):,} characters in all)"


def json_safe(value: Any) -> Any:
    """`value` as strict JSON can carry it: NaN and the infinities (which Python's json
    reads and writes, but JSON has not) become the strings "NaN", "Infinity", "-Infinity"."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def _clip(text: str, limit: int) -> str:
    """`text` with its middle left out when it is longer than `limit`."""
    if len(text) <= limit:
        return text
    half = max(4, (limit - 3) // 2)
    return text[:half] + "..." + text[-half:]


def _short(value: Any, width: int) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _clip_escaped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return _escaped(text)
    return _escaped(text[: limit // 2]) + "..." + _escaped(text[-(limit // 2) :])


def common_ends(old: Sequence[Any], new: Sequence[Any]) -> tuple[int, int]:
    """How many items the two sequences share at their head, and then at their tail."""
    shortest = min(len(old), len(new))
    head = 0
    while head < shortest and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < shortest - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, tail


def _around_change(old: str, new: str, room: int) -> tuple[str, str]:
    """Both strings cut down to where they differ, with a little context on each side:
    `"...weather in NYC today..."` -> `"...weather in LA today..."`. A long differing span
    keeps only its two ends."""
    if len(old) <= room and len(new) <= room:
        return json.dumps(old, ensure_ascii=False), json.dumps(new, ensure_ascii=False)
    start, end = common_ends(old, new)
    context = max(8, (room - max(len(old), len(new)) + start + end) // 2)

    def cut(text: str) -> str:
        left, stop = max(0, start - context), len(text) - end
        right = min(len(text), stop + context)
        middle = _escaped(text[left:start]) + _clip_escaped(text[start:stop], max(room, 16))
        middle += _escaped(text[stop:right])
        return '"' + ("..." if left else "") + middle + ("..." if right < len(text) else "") + '"'

    return cut(old), cut(new)


def same(recorded: Any, requested: Any) -> bool:
    """Equal as JSON values: `1` is `1.0`, but `true` is not `1` (Python says it is), and
    NaN is NaN (as it is in the key)."""
    if isinstance(recorded, bool) or isinstance(requested, bool):
        return type(recorded) is type(requested) and recorded == requested
    if isinstance(recorded, int | float) and isinstance(requested, int | float):
        return recorded == requested or (recorded != recorded and requested != requested)
    return type(recorded) is type(requested) and bool(recorded == requested)


def diff(recorded: Any, requested: Any, path: str = "") -> list[Difference]:
    """Leaf-level differences between two JSON values, named by JSON path. Lists are aligned
    first, so a message inserted in the middle is one addition, not a shift of all after."""
    if isinstance(recorded, dict) and isinstance(requested, dict):
        out: list[Difference] = []
        for key in sorted(set(recorded) | set(requested)):
            child = f"{path}.{key}" if path else str(key)
            out += diff(recorded.get(key, MISSING), requested.get(key, MISSING), child)
        return out
    if isinstance(recorded, list) and isinstance(requested, list):
        return _diff_lists(recorded, requested, path)
    if recorded is MISSING or requested is MISSING or not same(recorded, requested):
        return [Difference(path or "$", recorded, requested)]
    return []


def _diff_lists(recorded: list[Any], requested: list[Any], path: str) -> list[Difference]:
    out: list[Difference] = []
    for tag, i1, i2, j1, j2 in _aligned(recorded, requested):
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)
        for n in range(paired):
            out += diff(recorded[i1 + n], requested[j1 + n], f"{path}[{j1 + n}]")
        out += [Difference(f"{path}[{j}]", MISSING, requested[j]) for j in range(j1 + paired, j2)]
        out += [Difference(f"{path}[{i}]", recorded[i], MISSING) for i in range(i1 + paired, i2)]
    return out


def _aligned(recorded: list[Any], requested: list[Any]) -> Sequence[tuple[str, int, int, int, int]]:
    """Opcodes (as difflib's) that turn `recorded` into `requested`, by the items' canonical
    JSON. The common head and tail are taken off first, so a single insertion, removal or
    change is always found exactly (difflib alone may not, among repeated items); index by
    index for huge lists, where aligning would cost more than it tells."""
    if len(recorded) * len(requested) > MAX_ALIGNED:
        return [("replace", 0, len(recorded), 0, len(requested))]
    old, new = [_canonical(item) for item in recorded], [_canonical(item) for item in requested]
    head, tail = common_ends(old, new)
    middle = SequenceMatcher(
        None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=False
    )
    return [
        (tag, i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in middle.get_opcodes()
    ]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_view(parts: RequestParts) -> dict[str, Any]:
    """The fields a person compares: the body's JSON unwrapped, so paths read `body.messages[0]`,
    and a repeated query parameter as the list of its values."""
    view = parts.to_dict()
    body = parts.body
    view["body"] = body.value if body.kind != "empty" else None
    query: dict[str, list[str]] = {}
    for name, value in parts.query:
        query.setdefault(name, []).append(value)
    view["query"] = {name: vs[0] if len(vs) == 1 else vs for name, vs in query.items()}
    return view


@dataclass(frozen=True)
class Closest:
    parts: RequestParts
    differences: list[Difference]


def closest(wanted: RequestParts, candidates: Iterable[RequestParts]) -> Closest | None:
    """The recorded request nearest to `wanted`: same method, upstream and path first,
    then the fewest differing leaves."""
    wanted_view = request_view(wanted)
    best: tuple[tuple[int, int], Closest] | None = None
    for parts in candidates:
        differences = diff(request_view(parts), wanted_view)
        same_route = (parts.method, parts.upstream, parts.path) == (
            wanted.method,
            wanted.upstream,
            wanted.path,
        )
        rank = (0 if same_route else 1, len(differences))
        if best is None or rank < best[0]:
            best = (rank, Closest(parts, differences))
    return None if best is None else best[1]


@dataclass(frozen=True)
class Recorded:
    """One recording's place in the recorded order of a cassette."""

    key: str
    ordinal: int
    upstream: str
    summary: str  # `POST openai /v1/chat/completions`, for messages


def next_expected(order: Sequence[Recorded], cursor: int, live: frozenset[str]) -> int:
    """The position of the next recording a strict-order replay must serve, skipping the
    recordings of upstreams that now run live (partial replay)."""
    while cursor < len(order) and order[cursor].upstream in live:
        cursor += 1
    return cursor


def follow_order(
    order: Sequence[Recorded], cursor: int, live: frozenset[str], key: str, ordinal: int
) -> int | tuple[int, Recorded | None]:
    """--strict-order: the new cursor when recording (`key`, `ordinal`) is the next one due;
    else (its position, the recording that was due there, or None past the end)."""
    position = next_expected(order, cursor, live)
    expected = order[position] if position < len(order) else None
    if expected is not None and (expected.key, expected.ordinal) == (key, ordinal):
        return position + 1
    return position, expected
