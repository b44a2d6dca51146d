"""Pure: a recorded answer's shape against a live one's, as findings with a level: `info` (a
field added, a new event type among the others), `warn` (an enum value never seen), `error`
(a field removed or retyped, the status or content type changed, recorded event types
reordered or missing, a tool removed or its input schema changed)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from tapeproxy.exchange.shape import Shape, collapse

Level = Literal["info", "warn", "error"]
LEVELS: tuple[Level, ...] = ("info", "warn", "error")


@dataclass(frozen=True)
class Change:
    """One difference: its level, where (a JSON path, `status`, `content-type`, `body`,
    `events`, `<event>`, `tools.NAME`), what it was and what it is, and what it means."""

    level: Level
    path: str
    recorded: Any
    live: Any
    what: str


def compare(recorded: Shape, live: Shape, omits_defaults: bool = False) -> list[Change]:
    """Every change from `recorded` to `live`. A changed status, or a body of another kind,
    is all that is said: the rest of two different answers would only be noise.
    `omits_defaults`: the provider leaves out a field at its default (proto3 JSON: 0, "",
    false, []), so a scalar or a list gone may be one at its default."""
    if recorded.status != live.status:
        return [Change("error", "status", recorded.status, live.status, "status changed")]
    changes = []
    if recorded.content_type != live.content_type:
        changes.append(
            Change(
                "error",
                "content-type",
                recorded.content_type,
                live.content_type,
                "content type changed",
            )
        )
    if recorded.body != live.body:
        return [*changes, Change("error", "body", recorded.body, live.body, "body kind changed")]
    changes += _paths(recorded, live, omits_defaults)
    changes += _enums(recorded, live)
    changes += _events(recorded, live)
    changes += _tools(recorded.tools, live.tools)
    return changes


def _paths(recorded: Shape, live: Shape, omits_defaults: bool) -> Iterator[Change]:
    for path, types in sorted(recorded.paths.items()):
        now = live.paths.get(path)
        if now is None:
            if not _unseen_items(path, live) and _holds(path, live):
                yield _removed(path, types, recorded, live, omits_defaults)
            continue
        before, after = types - {"null"}, now - {"null"}
        # A field null on one side says nothing of its type: content, not shape.
        if before and after and before != after:
            yield Change("error", _shown(path), _types(types), _types(now), "field retyped")
    for path, types in sorted(live.paths.items()):
        if (
            path not in recorded.paths
            and not _unseen_items(path, recorded)
            and _holds(path, recorded)
        ):
            yield Change("info", _shown(path), None, _types(types), "field added")


def _removed(
    path: str, types: frozenset[str], recorded: Shape, live: Shape, omits_defaults: bool
) -> Change:
    """A field the live answer lacks: an error, unless it was only ever null (a provider may
    leave a null out), a scalar or list its provider leaves out at its default, or the
    answer is of another kind there (a tool call for a text)."""
    if types == {"null"}:
        return Change("info", _shown(path), "null", None, "null field left out")
    if omits_defaults and "object" not in types:
        return Change("info", _shown(path), _types(types), None, "left out (at its default?)")
    if _of_another_kind(path, recorded, live):
        return Change("info", _shown(path), _types(types), None, "field absent: another kind")
    return Change("error", _shown(path), _types(types), None, "field removed")


def _of_another_kind(path: str, recorded: Shape, live: Shape) -> bool:
    """Whether a container of `path` (below the answer's or event's root) has an enum-like
    field with a recorded value the live answer lacks there (`finish_reason` `tool_calls`,
    a block's `type` `tool_use`): the fields of a kind not given are absent, not removed
    (the new value itself is a warning). A discriminator itself gone explains nothing."""
    containers = set()
    at = _parent(path)
    while at and not (at.startswith("<") and at.endswith(">")):
        containers.add(at)
        at = _parent(at)
    return any(
        _parent(field) in containers and field in live.enums and not values <= live.enums[field]
        for field, values in recorded.enums.items()
    )


def _unseen_items(path: str, other: Shape) -> bool:
    """Whether `path` lies inside array items that `other` holds none of (an empty list
    there): nothing to compare, rather than a field removed or added."""
    at = path.rfind("[]")
    while at != -1:
        items, array = path[: at + 2], path[:at]
        if items not in other.paths:
            return "array" in other.paths.get(array, frozenset())
        at = path.rfind("[]", 0, at)
    return False


def _parent(path: str) -> str | None:
    """The path holding `path` (`a[]` holds `a[].b`, `a` holds `a[]`); None for a root. An
    event's root (`<ping>`) is said by the events' comparison: held by nothing here."""
    if path.startswith("<") and path.endswith(">"):
        return ""
    if path.endswith("[]"):
        return path[:-2]
    start = path.find(">") + 1 if path.startswith("<") else 0
    dot = path.rfind(".", start)
    if dot != -1:
        return path[:dot]
    if path and not path.endswith(">"):
        return path[:start]
    return None


def _holds(path: str, shape: Shape) -> bool:
    """Whether `shape` has the container `path` lies in, of its kind (an object for a field,
    an array for items): its fields are then each news; else the container itself is
    (removed, added or retyped), said once, at its own path."""
    parent = _parent(path)
    if parent is None:
        return True
    kind = "array" if path.endswith("[]") else "object"
    return kind in shape.paths.get(parent, frozenset())


def _enums(recorded: Shape, live: Shape) -> Iterator[Change]:
    for path, values in sorted(live.enums.items()):
        before = recorded.enums.get(path)
        if before is None:
            continue  # a field added: said once, by _paths
        for value in sorted(values - before, key=repr):
            yield Change("warn", _shown(path), _values(before), value, "enum value never seen")


def _events(recorded: Shape, live: Shape) -> Iterator[Change]:
    if not recorded.event_types and not live.event_types:
        return
    for label in sorted(recorded.event_types - live.event_types):
        yield Change("error", f"<{label}>", label, None, "event type missing")
    for label in sorted(live.event_types - recorded.event_types):
        yield Change("info", f"<{label}>", None, label, "new event type")
    common = recorded.event_types & live.event_types
    before = collapse(e for e in recorded.events if e in common)
    after = collapse(e for e in live.events if e in common)
    if before != after:
        yield Change("error", "events", " ".join(before), " ".join(after), "events reordered")


def _tools(recorded: dict[str, str] | None, live: dict[str, str] | None) -> Iterator[Change]:
    if recorded is None:
        return
    live = live or {}
    for name, schema in sorted(recorded.items()):
        now = live.get(name)
        if now is None:
            yield Change("error", f"tools.{name}", name, None, "tool removed")
        elif now != schema:
            yield Change("error", f"tools.{name}.inputSchema", schema, now, "tool schema changed")
    for name in sorted(set(live) - set(recorded)):
        yield Change("info", f"tools.{name}", None, name, "tool added")


def _shown(path: str) -> str:
    return path or "$"


def _types(types: frozenset[str]) -> str:
    return "|".join(sorted(types))


def _values(values: frozenset[Any]) -> list[Any]:
    return sorted(values, key=repr)
