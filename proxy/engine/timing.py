"""Replay timing: `none` (as fast as possible), `recorded`, or a factor on the recorded gaps."""

from __future__ import annotations

import math

TIMING_HEADER = "x-tapeproxy-timing"


def parse_timing(value: str) -> float | None:
    """None means no delay; otherwise the factor applied to each recorded inter-frame gap
    (`recorded` is 1.0, `0.5` replays twice as fast, `2` twice as slow)."""
    text = value.strip().lower()
    if text == "none":
        return None
    if text == "recorded":
        return 1.0
    try:
        factor = float(text)
    except ValueError:
        factor = math.nan
    if not math.isfinite(factor) or factor < 0:
        raise ValueError(
            f"replay timing {value!r} must be none, recorded, or a factor >= 0 such as 0.5"
        )
    return factor
