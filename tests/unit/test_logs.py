"""The log line's format: the fast formatter writes what logging's own would, to the byte."""

from __future__ import annotations

import logging
import sys

import pytest

from tapeproxy.logs import FORMAT, LineFormatter


def record(created: float, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
    made = logging.LogRecord("tapeproxy", logging.INFO, __file__, 1, "a %s b %d", ("x", 7), info)
    made.created, made.msecs = created, (created - int(created)) * 1000
    return made


@pytest.mark.parametrize("created", [0.0, 1.0005, 1_764_000_000.999, 1_764_000_001.25])
@pytest.mark.parametrize("exc", [False, True])
def test_a_line_is_what_logging_s_formatter_writes(created: float, exc: bool) -> None:
    fast = LineFormatter()
    for _ in range(2):  # the second line reuses the second's stamp
        assert fast.format(record(created, exc)) == logging.Formatter(FORMAT).format(
            record(created, exc)
        )
