"""Tokens and cost per test for the pytest plugin's terminal summary: what each test's
cassette holds, as `tapeproxy ls` adds it up. Read once per cassette, at the session's end: a
test only notes which cassette it used, so no test pays for reading recordings (issue 29).
Under pytest-xdist each worker reads the cassettes of its own tests as it finishes (in
parallel), and the controller writes the lines they sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tapeproxy.errors import TapeproxyError

USAGE = "tapeproxy_usage"  # the user property that names a test's cassette (across xdist too)
WORKER_LINES = "tapeproxy_usage_lines"  # an xdist worker's output: cassette -> its line


def usage_lines(cassettes: str, names: Iterable[str]) -> dict[str, str]:
    """Each cassette's line (tokens in and out, cost), read from the library at `cassettes`;
    a cassette that cannot be read gets the reason instead. TapeproxyError: no library
    opens there."""
    names = set(names)
    if not names:
        return {}
    from tapeproxy.store import open_store  # here: a pytest run that used no tapeproxy
    from tapeproxy.tools.listing import summarize  # does not import them
    from tapeproxy.tools.prices import load_prices
    from tapeproxy.tools.report import usd

    store, prices = open_store(cassettes), load_prices()
    lines: dict[str, str] = {}
    for name in names:
        try:
            found = summarize(store, name, prices)
        except TapeproxyError as exc:
            lines[name] = exc.message
        except OSError as exc:
            lines[name] = f"cannot read cassette {name!r}: {exc}"
        else:
            cost = usd(found.cost_usd, found.unpriced)
            lines[name] = f"{found.input_tokens:,} in / {found.output_tokens:,} out, {cost}"
    return lines


def write_usage(
    terminalreporter: Any, cassettes: str, used: dict[str, str], known: dict[str, str]
) -> None:
    """One line per test that used tapeproxy (`used`: node id -> its cassette), in the order
    they ran; the lines of the cassettes not `known` (sent by a worker) read here."""
    if not used:
        return
    try:
        lines = {**usage_lines(cassettes, set(used.values()) - set(known)), **known}
    except TapeproxyError as exc:
        terminalreporter.write_line(f"tapeproxy tokens and cost per test: {exc.message}")
        return
    terminalreporter.write_line("tapeproxy tokens and cost per test:")
    for nodeid, cassette in used.items():
        terminalreporter.write_line(f"  {nodeid}: {lines[cassette]}")
