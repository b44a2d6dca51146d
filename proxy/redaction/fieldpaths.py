"""A value at a field path replaced by the marker: what `--redact-field` does to a JSON value."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tapeproxy.redaction.secrets import MARKER

Path = tuple[str | int, ...]


def at_path(value: Any, path: Path) -> Any:
    """`value` with what is at `path` replaced by MARKER (a null stays null: it holds nothing).
    Untouched branches are shared, not copied."""
    if not path:
        return value if value is None or value == MARKER else MARKER
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and isinstance(head, str):
        keys = list(value) if head == "*" else [head] if head in value else []
        if not keys:
            return value
        copy = dict(value)
        for key in keys:
            copy[key] = at_path(value[key], rest)
        return copy
    if isinstance(value, list) and (head == "*" or isinstance(head, int)):
        if head == "*":
            indexes: Iterable[int] = range(len(value))
        else:
            indexes = [int(head)] if 0 <= int(head) < len(value) else []
        copy_list = list(value)
        for index in indexes:
            copy_list[index] = at_path(value[index], rest)
        return copy_list
    return value
