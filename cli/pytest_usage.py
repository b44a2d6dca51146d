"""Tokens and cost per test for the pytest plugin's terminal summary: what each test's
cassette holds, read after its run, as `tapeproxy ls` adds it up."""

from __future__ import annotations

from typing import Any

from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.listing import summarize
from tapeproxy.tools.prices import PriceTable
from tapeproxy.tools.report import usd

USAGE = "tapeproxy_usage"  # the user property that carries a test's line (across xdist too)


def usage_line(store: CassetteStore, cassette: str, prices: PriceTable) -> str:
    found = summarize(store, cassette, prices)
    cost = usd(found.cost_usd, found.unpriced)
    return f"{found.input_tokens:,} in / {found.output_tokens:,} out, {cost}"


def write_usage(terminalreporter: Any, usage: dict[str, str]) -> None:
    """One line per test that used tapeproxy, in the order they ran."""
    if not usage:
        return
    terminalreporter.write_line("tapeproxy tokens and cost per test:")
    for nodeid, line in usage.items():
        terminalreporter.write_line(f"  {nodeid}: {line}")
