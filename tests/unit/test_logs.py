"""The log line's format: the fast formatter writes what logging's own would, to the byte; and
every line scrubbed as a cassette is."""

from __future__ import annotations

import gc
import io
import logging
import sys

import pytest

from tapeproxy.logs import (
    FORMAT,
    LOGGER,
    LineFormatter,
    LineHandler,
    Scrubbing,
    fast_info,
    scrub_lines,
)
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import MARKER


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


def test_every_line_is_scrubbed_by_the_server_s_scrubber_whatever_writes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`scrub_lines` puts a server's Scrubber.text on the `tapeproxy` logger: the fast line,
    a line through `logging` (a warning, with arguments) and a test's caplog all get it."""
    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    scrub = Scrubber.build().text
    logger = logging.getLogger(LOGGER)
    saved = logger.handlers[:], logger.filters[:], logger.propagate, logger.level
    stream = io.StringIO()
    try:
        logger.handlers[:], logger.filters[:] = [LineHandler(stream)], []
        logger.propagate = False
        logger.setLevel(logging.INFO)
        scrub_lines(scrub)
        assert [type(f) for f in logger.filters] == [Scrubbing]
        fast_info(logger, f"replay tools GET /keys/{key} key=0123456789ab -> replayed 200")
        logger.warning("no upstream named %r in path %r", "nope", f"/nope/{key}")
        lines = stream.getvalue().splitlines()
        assert lines[0].endswith(
            "replay tools GET /keys/[redacted] key=0123456789ab -> replayed 200"
        )
        assert lines[1].endswith("no upstream named 'nope' in path '/nope/[redacted]'")
        logger.handlers[:] = [caplog.handler]
        logger.warning("%s", f"cassette miss for /keys/{key}")
        assert caplog.messages == ["cassette miss for /keys/[redacted]"]
    finally:
        logger.handlers[:], logger.filters[:], logger.propagate, level = saved
        logger.setLevel(level)
    assert key not in stream.getvalue() + caplog.text


def test_the_lines_get_every_live_server_s_scrubbing_and_not_a_gone_one_s() -> None:
    """Two servers in one process share the logger: a line gets both scrubbers (the stricter
    wins), one filter still; a scrubber collected with its server is let go."""
    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    logger = logging.getLogger(LOGGER)
    saved = logger.filters[:]
    try:
        logger.filters[:] = []
        strict, lax = Scrubber.build(), Scrubber.build(keep=["all"])
        scrub_lines(strict.text)
        scrub_lines(lax.text)
        [scrubbing] = logger.filters
        assert isinstance(scrubbing, Scrubbing)
        assert scrubbing.scrub(f"GET /keys/{key}") == "GET /keys/[redacted]"
        del strict
        gc.collect()
        assert scrubbing.scrub(f"GET /keys/{key}") == f"GET /keys/{key}", "only `lax` lives"
        scrub_lines(Scrubber.build(patterns=["secret"]).text)
        assert len(scrubbing._scrubs) == 2, "the gone scrubber's place is let go"
    finally:
        logger.filters[:] = saved


def test_a_traceback_and_uvicorn_s_lines_are_scrubbed_too() -> None:
    """A line logged with its exception (`exc_info`, a traceback whose messages may quote a
    path or a file name) was written with the traceback as it was; and uvicorn's own logger
    (its "Exception in ASGI application" traceback) had no filter at all."""
    key = "ghp" + "_" + "Fake0Key" * 4 + "Fake"
    scrubber = Scrubber.build()
    stream = io.StringIO()
    loggers = [logging.getLogger(LOGGER), logging.getLogger("uvicorn.error")]
    saved = [(lg.handlers[:], lg.filters[:], lg.propagate, lg.level) for lg in loggers]
    try:
        for logger in loggers:
            logger.handlers[:], logger.filters[:] = [LineHandler(stream)], []
            logger.propagate = False
            logger.setLevel(logging.INFO)
        scrub_lines(scrubber.text)
        for logger in loggers:
            try:
                raise OSError(f"could not open /cassettes/{key}/x.json")
            except OSError:
                logger.exception("writing a recording failed")
        shown = stream.getvalue()
    finally:
        for logger, (handlers, filters, propagate, level) in zip(loggers, saved, strict=True):
            logger.handlers[:], logger.filters[:], logger.propagate = handlers, filters, propagate
            logger.setLevel(level)
    assert shown.count("Traceback (most recent call last)") == 2
    assert shown.count(f"/cassettes/{MARKER}/x.json") == 2
    assert key not in shown
