"""`json.dumps(value, indent=2)`, byte for byte, at C speed where it can be.

Python's json module has a C encoder only for unindented output; with `indent` it runs in
pure Python, about ten times slower. Every exchange file is indented, and so are some
providers' answers, so recording would pay that on every request. orjson indents in C and
agrees with json.dumps in all but a few spots, each caught here and handed to json.dumps:

- what orjson refuses (integers past 64 bits, lone surrogates, keys that are not strings);
- NaN and Infinity, which orjson writes as null: the text is read back and compared;
- floats under 1e-4, which json writes as `1e-05` and orjson as `0.00001` (and `1e-7`
  against `1e-07`): any such number in the text sends the value to json.dumps;
- non-ASCII text (and DEL, which json escapes too) when ASCII was asked for: orjson
  cannot escape it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_DIGITS = frozenset(b"0123456789.")
_SPACE, _COLON, _NEWLINE, _MINUS = b" :\n-"


def _small_float(out: bytes) -> bool:
    """Whether indented JSON may hold a number where json.dumps and orjson differ: one with
    a negative exponent, or that starts `0.0000`. Each `e-` and `0.0000` in the text is
    looked at: in a number, digits come before it, and the number follows `: ` or a line's
    indent (a string holds no raw line break), so only text in a string can pass falsely: a
    slow path, no harm. (A regex over the whole text cost 25 us for a 2 KB exchange.)"""
    for needle, digits_first in ((b"e-", True), (b"0.0000", False)):
        at = out.find(needle)
        while at != -1:
            start = at
            while start and out[start - 1] in _DIGITS:
                start -= 1
            if (start < at or not digits_first) and _token_start(out, start):
                return True
            at = out.find(needle, at + 1)
    return False


def _token_start(out: bytes, start: int) -> bool:
    """Whether a number starting at `start` (its `-` before it, if any) is a JSON value."""
    if start and out[start - 1] == _MINUS:
        start -= 1
    while start and out[start - 1] == _SPACE:
        start -= 1
    return not start or out[start - 1] in (_COLON, _NEWLINE)


def indent2(value: Any, ensure_ascii: bool = False, sort_keys: bool = False) -> bytes:
    """`json.dumps(value, indent=2, ensure_ascii=..., sort_keys=...)` as UTF-8 bytes. Like
    it, raises UnicodeEncodeError for a lone surrogate unless `ensure_ascii`."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS if sort_keys else orjson.OPT_INDENT_2
    try:
        out = orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        return _slow(value, ensure_ascii, sort_keys)
    if ensure_ascii and not (out.isascii() and b"\x7f" not in out):
        return _slow(value, ensure_ascii, sort_keys)
    # Two plain searches first: the regex costs ten times as much, and rarely has to run.
    if (b"e-" in out or b"0.0000" in out) and _small_float(out):
        return _slow(value, ensure_ascii, sort_keys)
    if orjson.loads(out) != value:  # NaN or Infinity written as null, a tuple, a subclass
        return _slow(value, ensure_ascii, sort_keys)
    return out


def _slow(value: Any, ensure_ascii: bool, sort_keys: bool = False) -> bytes:
    text = json.dumps(value, indent=2, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    return text.encode("utf-8")
