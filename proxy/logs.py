"""tapeproxy's log lines: one format, cheap enough for one INFO line per replayed exchange, and
each line scrubbed as a cassette is (a request path or an error's message may hold a key)."""

from __future__ import annotations

import inspect
import logging
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any, TextIO

LOGGER = "tapeproxy"  # every module logs to this one logger

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
        return (
            f"{self.stamp(record.created)},{int(record.msecs):03d} {record.levelname} "
            f"{record.name}: {record.getMessage()}"
        )

    def stamp(self, created: float) -> str:
        """`asctime` without its milliseconds, made once a second."""
        second = int(created)
        if second != self._second:  # a race between threads only makes the text twice
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(second))
            self._second = second
        return self._stamp


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Lines in LineFormatter's format to a stream; and `info(name, message)`, the same line
    as `logger.info(message)` would write, made without a LogRecord: the one line per
    exchange, which cost a replay at 32 connections a quarter of its CPU through `logging`."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.lines = LineFormatter()
        self.setFormatter(self.lines)

    def info(self, name: str, message: str) -> None:
        created = time.time()
        millis = int((created - int(created)) * 1000)  # as LogRecord makes `msecs`
        text = f"{self.lines.stamp(created)},{millis:03d} INFO {name}: {message}\n"
        with self.lock:  # type: ignore[union-attr]
            self.stream.write(text)
            self.flush()


class Scrubbing(logging.Filter):
    """Every line of the logger it is on passed through the scrubbing of each server alive
    in this process (a server's `Scrubber.text`: the key formats and the [redact] patterns,
    as its cassettes get), whatever handler writes it: stderr, a test's caplog, the pytest
    plugin's captured log. Most often there is one server; two (the pytest plugin's and a
    test's own) share the logger, so each line gets the rules of both: the stricter wins (a
    format one keeps and the other does not is scrubbed)."""

    def __init__(self) -> None:
        super().__init__()
        # (the object a scrub is a method of, weakly held; its function): a weak reference
        # and a plain call, where a WeakMethod makes a bound method anew for every line.
        self._scrubs: list[tuple[Callable[[], Any], Callable[[Any, str], str]]] = []

    def add(self, scrub: Callable[[str], str]) -> None:
        """Scrub with `scrub` too, for as long as what it is a method of lives (a server's
        scrubber); the scrubs of servers gone are let go."""
        held: tuple[Callable[[], Any], Callable[[Any, str], str]]
        if inspect.ismethod(scrub):
            held = (weakref.ref(scrub.__self__), scrub.__func__)
        else:
            held = (lambda: scrub, lambda function, text: function(text))
        self._scrubs = [*(s for s in self._scrubs if s[0]() is not None), held]

    def scrub(self, message: str) -> str:
        for owner, function in self._scrubs:
            alive = owner()
            if alive is not None:
                message = function(alive, message)
        return message

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = self.scrub(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            # The traceback's text, made here as a handler's Formatter would and scrubbed:
            # its exceptions' messages may quote a path or a file name.
            record.exc_text = self.scrub(_TRACEBACKS.formatException(record.exc_info))
        return True


_TRACEBACKS = logging.Formatter()
SCRUBBED = (LOGGER, "uvicorn.error")  # uvicorn's own lines: a traceback of an unhandled error


def scrub_lines(scrub: Callable[[str], str]) -> None:
    """From now on, every line of the `tapeproxy` logger (and uvicorn's, SCRUBBED) passed
    through `scrub` too, as long as the server it is of lives (see Scrubbing)."""
    logger = logging.getLogger(LOGGER)
    found = [f for f in logger.filters if isinstance(f, Scrubbing)]
    scrubbing = found[0] if found else Scrubbing()
    scrubbing.add(scrub)
    for name in SCRUBBED:
        logger = logging.getLogger(name)
        if scrubbing not in logger.filters:
            for old in [f for f in logger.filters if isinstance(f, Scrubbing)]:
                logger.removeFilter(old)
            logger.addFilter(scrubbing)


def fast_info(logger: logging.Logger, message: str) -> None:
    """`logger.info(message)`: straight to its LineHandler where that is all it has (as
    `configure_logging` sets it up), scrubbed as its Scrubbing filter would; else through
    `logging` (a test's caplog, say)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    handlers, filters = logger.handlers, logger.filters
    if len(handlers) == 1 and type(handlers[0]) is LineHandler and len(filters) <= 1:
        if not filters:
            handlers[0].info(logger.name, message)
            return
        if type(filters[0]) is Scrubbing:
            handlers[0].info(logger.name, filters[0].scrub(message))
            return
    logger.info("%s", message)


def configure_logging(level: str | int) -> None:
    """tapeproxy's lines, from `level` up, to stderr in FORMAT."""
    handler = LineHandler(sys.stderr)
    root = logging.getLogger(LOGGER)
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    root.propagate = False
