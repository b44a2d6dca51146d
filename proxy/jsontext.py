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
import re
from typing import Any

import orjson

# A number where json.dumps and orjson may differ: one that starts `0.0000`, or has a
# negative exponent. In indented JSON a number follows `: ` or a line's indent (a string
# holds no raw line break), so only a string's `: ` can match falsely: a slow path, no harm.
_SMALL_FLOAT = re.compile(rb"(?:^|: |\n *)-?(?:0\.0000|\d+(?:\.\d+)?e-)")


def indent2(value: Any, ensure_ascii: bool = False) -> bytes:
    """`json.dumps(value, indent=2, ensure_ascii=...)` as UTF-8 bytes. Like it, raises
    UnicodeEncodeError for a lone surrogate unless `ensure_ascii`."""
    try:
        out = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return _slow(value, ensure_ascii)
    if ensure_ascii and not (out.isascii() and b"\x7f" not in out):
        return _slow(value, ensure_ascii)
    # Two plain searches first: the regex costs ten times as much, and rarely has to run.
    if (b"e-" in out or b"0.0000" in out) and _SMALL_FLOAT.search(out):
        return _slow(value, ensure_ascii)
    if orjson.loads(out) != value:  # NaN or Infinity written as null, a tuple, a subclass
        return _slow(value, ensure_ascii)
    return out


def _slow(value: Any, ensure_ascii: bool) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=ensure_ascii).encode("utf-8")
