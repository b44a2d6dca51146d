"""Cassette names: the one check that keeps every cassette inside the library folder."""

from __future__ import annotations

import re

from proxy.errors import BadCassetteName

_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
MAX_NAME = 200
DERIVED = ".derived"
MAX_FOLDER = MAX_NAME + len(DERIVED)  # what the store accepts: any name, or its .derived


def derived_name(name: str) -> str:
    """Where partial replay writes what its live upstreams answered."""
    return check_cassette_name(name + DERIVED, limit=MAX_FOLDER)


def check_cassette_name(name: str, limit: int = MAX_NAME) -> str:
    """Return `name` if it is a safe relative cassette name, else raise BadCassetteName.

    Letters, digits and `._-`, with `/` between segments; no empty, `.` or `..` segment,
    no leading dot (temporary files start with one) and no absolute path."""
    segments = name.split("/")
    if (
        not name
        or len(name) > limit
        or any(not _SEGMENT.fullmatch(s) for s in segments)
    ):
        raise BadCassetteName(
            f"cassette name {name!r} is not allowed: use letters, digits and ._- "
            f"(not starting with a dot), with / between segments, at most {MAX_NAME} characters"
        )
    return name
