"""What an answer's head can carry on the wire (RFC 9110): a final status, header names that
are tokens, header values with no control character but tab and nothing beyond latin-1. The
one check of a recorded answer before it is sent (replay, the read-ahead, a fault's recorded
error, verify) and of an imported one before it is written."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # (uvicorn closes the connection on one)


def is_final_status(status: object) -> bool:
    """200 to 599: a 1xx is no final answer; 0, 99 or 1000 no status a server sends."""
    return isinstance(status, int) and not isinstance(status, bool) and 200 <= status <= 599


def is_header_name(name: str) -> bool:
    return TOKEN.fullmatch(name) is not None


def is_header_value(value: str) -> bool:
    """No CR, LF, NUL or other control character but tab, and latin-1 (a header's bytes)."""
    if _CONTROL.search(value):
        return False
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def head_problem(status: int, headers: Mapping[str, str | list[str]]) -> str | None:
    """The first thing in a recorded answer's head that no server can send, in one line
    naming its field (`response.status: ...`, `response.headers.x-price: ...`); None when
    it can be sent as it is."""
    if not is_final_status(status):
        return f"response.status: {status} is no HTTP answer's status (200 to 599)"
    for name, values in headers.items():
        if not is_header_name(name):
            return f"response.headers[{json.dumps(name)}]: no HTTP header name (RFC 9110 token)"
        for value in values if isinstance(values, list) else [values]:
            if _CONTROL.search(value):
                why = "holds a control character (CR, LF, NUL...), which no header value may"
                return f"response.headers.{name}: {why}"
            if not is_header_value(value):
                return f"response.headers.{name}: not latin-1, as a header must be"
    return None
