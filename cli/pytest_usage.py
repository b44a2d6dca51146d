"""Tokens and cost per test for the pytest plugin's terminal summary: what each test's
cassette holds, as `tapeproxy ls` adds it up. Read once, when the summary is written: a test
only notes which cassette it used, so no test pays for reading recordings (issue 29)."""

from __future__ import annotations

from typing import Any

from tapeproxy.errors import TapeproxyError

USAGE = "tapeproxy_usage"  # the user property that names a test's cassette (across xdist too)


def write_usage(terminalreporter: Any, cassettes: str, used: dict[str, str]) -> None:
    """One line per test that used tapeproxy (`used`: node id -> its cassette), in the order
    they ran; each cassette of the library at `cassettes` read once."""
    if not used:
        return
    from tapeproxy.store import open_store  # here: a pytest run that used no tapeproxy
    from tapeproxy.tools.listing import summarize  # does not import them
    from tapeproxy.tools.prices import load_prices
    from tapeproxy.tools.report import usd

    try:
        store, prices = open_store(cassettes), load_prices()
    except TapeproxyError as exc:
        terminalreporter.write_line(f"tapeproxy tokens and cost per test: {exc.message}")
        return
    lines: dict[str, str] = {}
    terminalreporter.write_line("tapeproxy tokens and cost per test:")
    for nodeid, cassette in used.items():
        if cassette not in lines:
            try:
                found = summarize(store, cassette, prices)
            except TapeproxyError as exc:
                lines[cassette] = exc.message
            else:
                cost = usd(found.cost_usd, found.unpriced)
                lines[cassette] = f"{found.input_tokens:,} in / {found.output_tokens:,} out, {cost}"
        terminalreporter.write_line(f"  {nodeid}: {lines[cassette]}")
