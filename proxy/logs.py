"""tapeproxy's log lines: one format, cheap enough for one INFO line per replayed exchange."""

from __future__ import annotations

import logging
import sys
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LineFormatter(logging.Formatter):
    """FORMAT, with the time stamp's text made once a second: `logging.Formatter` makes it
    anew for every line, two thirds of what a line costs (a replay at 32 connections logs
    thousands a second)."""

    def __init__(self) -> None:
        super().__init__(FORMAT)
        self._second = -1
        self._stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        second = int(record.created)
        if second != self._second:  # a race between threads only makes the text twice
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(second))
            self._second = second
        return (
            f"{self._stamp},{int(record.msecs):03d} {record.levelname} {record.name}: "
            f"{record.getMessage()}"
        )


def configure_logging(level: str | int) -> None:
    """tapeproxy's lines, from `level` up, to stderr in FORMAT."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LineFormatter())
    root = logging.getLogger("tapeproxy")
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    root.propagate = False
