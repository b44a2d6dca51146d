"""A size as the options take it: bytes, or a number with KiB, MiB or GiB."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"k": 1024, "m": 1024 * 1024, "g": 1024 * 1024 * 1024}


def parse_size(text: str) -> int:
    """`1048576`, `512KiB`, `32MiB`, `1GB` (powers of 1024 either way) -> bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: write bytes, or a number with KiB, MiB or GiB")
    number, unit = int(match.group(1)), (match.group(2) or "").lower()
    return number * _UNITS.get(unit[:1], 1)
