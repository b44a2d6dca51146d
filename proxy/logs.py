"""tapeproxy's log lines: one format for the server and for its scribe (scribe_process.py), whose
lines reach the same stderr."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int) -> None:
    """tapeproxy's lines, from `level` up, to stderr in FORMAT."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger("tapeproxy")
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    root.propagate = False
