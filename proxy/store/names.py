"""Cassette names: the one check that keeps every cassette inside the library folder, and the
name of a test's cassette (the pytest plugin)."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable

from tapeproxy.errors import BadCassetteName
from tapeproxy.redaction.formats import formats_pattern, may_hold_key

log = logging.getLogger("tapeproxy")

_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 200
_KEYS = formats_pattern()  # every well-known key format, whatever a server keeps
DERIVED = ".derived"


def derived_name(name: str) -> str:
    """Where partial replay writes what its live upstreams answered."""
    return check_cassette_name(name) + DERIVED


def check_folder_name(name: str) -> str:
    """Return `name` if the store may hold it: a cassette name, or one's derived cassette."""
    base = name.removesuffix(DERIVED) if name.endswith(DERIVED) and name != DERIVED else name
    check_cassette_name(base)
    return name


def named_cassettes(
    found: Iterable[str], where: str, skipped: dict[str, str] | None = None
) -> list[str]:
    """The folders of exchange files `found` in the library at `where` whose names a cassette
    may have, sorted. Each other one is left out: no request can name it, and a tool that met
    it would stop on it (`tapeproxy ls` for the whole library). It goes into `skipped`, with
    why, when the caller says what it does with it (verify flags it, the viewer shows it),
    else it is logged as a warning."""
    kept = []
    for name in sorted(found):
        try:
            kept.append(check_folder_name(name))
        except BadCassetteName as exc:
            why = f"{exc.message}; rename the folder to use it"
            if skipped is not None:
                skipped[name] = why
            else:
                log.warning("skipped %s/%s: %s", where, name, why)
    return kept


def check_cassette_name(name: str) -> str:
    """Return `name` if it is a safe relative cassette name, else raise BadCassetteName.

    ASCII letters, digits and `._-`, with `/` between segments; no empty, `.` or `..` segment,
    no leading dot (temporary files start with one), no absolute path, and no key of a
    well-known format (tapeproxy.redaction.formats) in it."""
    segments = name.split("/")
    if not name or len(name) > MAX_NAME or any(not _SEGMENT.fullmatch(s) for s in segments):
        raise BadCassetteName(
            f"cassette name {name!r} is not allowed: use ASCII letters, digits and ._- "
            f"(not starting with a dot), with / between segments, at most {MAX_NAME} characters"
        )
    if may_hold_key(name) and _KEYS is not None and _KEYS.search(name):
        # A cassette is a folder on disk, its name in every line and page about it.
        raise BadCassetteName(
            "a cassette name may not hold a well-known key format (an API key or token): "
            "it would be a folder name on disk and show wherever the cassette is named"
        )
    return name


def cassette_for_test(nodeid: str, prefix: str | None = None) -> str:
    """A cassette name for a test: `tests/test_chat.py::TestA::test_b[x]` ->
    `test_chat/TestA/test_b.x` when the library is under `tests` (`prefix`). Characters a
    cassette name cannot hold become `_` (a key in a parameter's id, `key`), and then, as
    does a name cut to MAX_NAME, it gets a short hash of the node id so two tests never share
    a cassette."""
    path, *names = nodeid.split("::")
    path = path.removesuffix(".py")
    if prefix and prefix != "." and path.startswith(prefix + "/"):
        path = path[len(prefix) + 1 :]
    segments = [*path.split("/"), *names]
    if segments[-1].endswith("]") and "[" in segments[-1]:
        test, _, param = segments[-1][:-1].partition("[")
        segments[-1] = f"{test}.{param}"
    safe = [(_UNSAFE.sub("_", segment).lstrip(".") or "_") for segment in segments]
    safe = [_KEYS.sub("key", s) if _KEYS and may_hold_key(s) else s for s in safe]
    name = "/".join(safe)
    digest = hashlib.sha256(nodeid.encode()).hexdigest()[:8]
    if safe != segments or len(name) > MAX_NAME:
        name = name[: MAX_NAME - len(digest) - 1].rstrip("/") + "-" + digest
    return name
