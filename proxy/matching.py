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
