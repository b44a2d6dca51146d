"""A pydantic ValidationError as clean one-line problems, the one way every boundary (the
command line, the control API, a file read back) shows one: each problem's place and its
message alone, without pydantic's `Value error, ` prefix, `[type=...]` or its URL."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError
from pydantic_core import ErrorDetails

# The error types whose message is the one a validator raised, behind pydantic's prefix.
RAISED = frozenset({"value_error", "assertion_error"})


def said(error: ErrorDetails) -> str:
    """One problem's message alone: a validator's own words as it raised them, else
    pydantic's (`Input should be a valid integer`)."""
    raised = (error.get("ctx") or {}).get("error")
    if error["type"] in RAISED and raised is not None:
        return str(raised)
    return error["msg"]


def place(error: ErrorDetails) -> str:
    """Where a problem is, as a dotted path (`models.gpt-4o.input`); "" at the top."""
    return ".".join(str(part) for part in error["loc"])


def json_path(loc: Iterable[int | str]) -> str:
    """A problem's location as `tapeproxy diff` names fields: `response.frames[0].ms`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def problems(exc: ValidationError) -> list[str]:
    """Each problem in one line: `place: message`, or the message alone at the top."""
    return [f"{at}: {said(e)}" if (at := place(e)) else said(e) for e in exc.errors()]


def one_line(exc: BaseException) -> str:
    """An error in one line: a pydantic error's first problem (and how many more), an
    OSError's reason alone, else the first line of its text."""
    if isinstance(exc, ValidationError):
        found = problems(exc)
        more = len(found) - 1
        return found[0] + (f" (and {more} more problem(s))" if more else "")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror  # `Permission denied`: the caller names the file
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
