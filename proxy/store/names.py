"""Cassette names: the one check that keeps every cassette inside the library folder."""

from __future__ import annotations

import re

from llmtape.errors import BadCassetteName

_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
MAX_NAME = 200
DERIVED = ".derived"


def derived_name(name: str) -> str:
    """Where partial replay writes what its live upstreams answered."""
    return check_cassette_name(name) + DERIVED


def check_folder_name(name: str) -> str:
    """Return `name` if the store may hold it: a cassette name, or one's derived cassette."""
    base = name.removesuffix(DERIVED) if name.endswith(DERIVED) and name != DERIVED else name
    check_cassette_name(base)
    return name


def check_cassette_name(name: str) -> str:
    """Return `name` if it is a safe relative cassette name, else raise BadCassetteName.

    Letters, digits and `._-`, with `/` between segments; no empty, `.` or `..` segment,
    no leading dot (temporary files start with one) and no absolute path."""
    segments = name.split("/")
    if not name or len(name) > MAX_NAME or any(not _SEGMENT.fullmatch(s) for s in segments):
        raise BadCassetteName(
            f"cassette name {name!r} is not allowed: use letters, digits and ._- "
            f"(not starting with a dot), with / between segments, at most {MAX_NAME} characters"
        )
    return name
