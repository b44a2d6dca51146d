"""The log line's format: the fast formatter writes what logging's own would, to the byte."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from tapeproxy.logs import FORMAT, LineFormatter, LineHandler, fast_info


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


def test_the_line_made_without_a_log_record_is_the_line_logging_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = 1_764_000_001.25
    stream = io.StringIO()
    logger = logging.getLogger("tapeproxy.test-lines")
    logger.propagate, logger.handlers[:] = False, [LineHandler(stream)]
    logger.setLevel(logging.INFO)
    monkeypatch.setattr("tapeproxy.logs.time.time", lambda: created)
    fast_info(logger, "a x b 7")  # straight to the handler
    logger.info("a %s b %d", "x", 7)  # through logging, at another moment
    fast, slow = stream.getvalue().splitlines()
    want = logging.Formatter(FORMAT).format(record(created)).replace("tapeproxy", logger.name)
    assert fast == want
    assert slow.split(" ", 2)[2] == want.split(" ", 2)[2]  # but for the time
    logger.setLevel(logging.WARNING)
    fast_info(logger, "not written")
    assert "not written" not in stream.getvalue()
