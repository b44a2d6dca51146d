"""Pure matching: which recording answers the n-th ask of a key, and for a miss, the closest
recorded request and the fields that differ (by JSON path)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.normalize import RequestParts
from proxy.settings import RepeatPolicy

MISSING: Any = object()


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
        if self.recorded is MISSING:
            return f"{self.path}: added {_short(self.requested, width)}"
        if self.requested is MISSING:
            return f"{self.path}: removed (was {_short(self.recorded, width)})"
        if isinstance(self.recorded, str) and isinstance(self.requested, str):
            before, after = _around_change(self.recorded, self.requested, width // 2)
            return f"{self.path}: {before} -> {after}"
        return f"{self.path}: {_short(self.recorded, width)} -> {_short(self.requested, width)}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.recorded is not MISSING:
            out["recorded"] = self.recorded
        if self.requested is not MISSING:
            out["requested"] = self.requested
        return out


def _short(value: Any, width: int) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def _around_change(old: str, new: str, room: int) -> tuple[str, str]:
    """Both strings cut down to where they differ, with a little context on each side:
    `"...weather in NYC today..."` -> `"...weather in LA today..."`."""
    if len(old) <= room and len(new) <= room:
        return json.dumps(old, ensure_ascii=False), json.dumps(new, ensure_ascii=False)
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    context = max(8, (room - max(len(old), len(new)) + start + end) // 2)

    def cut(text: str) -> str:
        left, right = max(0, start - context), min(len(text), len(text) - end + context)
        middle = json.dumps(text[left:right], ensure_ascii=False)[1:-1]
        return '"' + ("..." if left else "") + middle + ("..." if right < len(text) else "") + '"'

    return cut(old), cut(new)


def diff(recorded: Any, requested: Any, path: str = "") -> list[Difference]:
    """Leaf-level differences between two JSON values, named by JSON path."""
    if isinstance(recorded, dict) and isinstance(requested, dict):
        out: list[Difference] = []
        for key in sorted(set(recorded) | set(requested)):
            child = f"{path}.{key}" if path else str(key)
            out += diff(recorded.get(key, MISSING), requested.get(key, MISSING), child)
        return out
    if isinstance(recorded, list) and isinstance(requested, list):
        out = []
        for index in range(max(len(recorded), len(requested))):
            left = recorded[index] if index < len(recorded) else MISSING
            right = requested[index] if index < len(requested) else MISSING
            out += diff(left, right, f"{path}[{index}]")
        return out
    if recorded is MISSING or requested is MISSING or recorded != requested:
        return [Difference(path or "$", recorded, requested)]
    return []


def request_view(parts: RequestParts) -> dict[str, Any]:
    """The fields a person compares: the body's JSON unwrapped, so paths read `body.messages[0]`."""
    view = parts.to_dict()
    body = parts.body
    view["body"] = body.value if body.kind != "empty" else None
    view["query"] = {k: v for k, v in parts.query}
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
            wanted.method, wanted.upstream, wanted.path,
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
