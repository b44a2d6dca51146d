"""Tokens and cost per test for the pytest plugin's terminal summary: what each test's
cassette holds, as `tapeproxy ls` adds it up. A replaying test's line is summed from the
recordings its server read ahead as it began (a replay writes nothing, so they are what the
cassette holds); any other cassette is read once, at the session's end. No recording is read
twice for it (issue 29). Under pytest-xdist each worker sends the lines of its own tests as it
finishes, and the controller writes them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tapeproxy.errors import TapeproxyError

if TYPE_CHECKING:
    from tapeproxy.exchange.model import Exchange
    from tapeproxy.tools.listing import Summary
    from tapeproxy.tools.prices import PriceTable

USAGE = "tapeproxy_usage"  # the user property that names a test's cassette (across xdist too)
WORKER_LINES = "tapeproxy_usage_lines"  # an xdist worker's output: cassette -> its line


def line_of(found: Summary) -> str:
    from tapeproxy.tools.report import usd

    cost = usd(found.cost_usd, found.unpriced)
    return f"{found.input_tokens:,} in / {found.output_tokens:,} out, {cost}"


class Usage:
    """Which cassette each test that used tapeproxy ran on (`used`, node id -> cassette, in
    the order they ran), and the lines `known` before the session's end: summed from a
    replaying test's recordings as its server read them ahead, or sent by xdist workers."""

    def __init__(self, cassettes: str) -> None:
        self.cassettes = cassettes
        self.used: dict[str, str] = {}
        self.known: dict[str, str] = {}
        self._prices: PriceTable | None = None

    @property
    def prices(self) -> PriceTable:
        if self._prices is None:  # imported here: a run that used no tapeproxy never does
            from tapeproxy.tools.prices import load_prices

            self._prices = load_prices()
        return self._prices

    def learn(self, cassette: str, exchanges: Iterable[Exchange]) -> None:
        """The line of `cassette`, whose every recording is in `exchanges`, read already."""
        from tapeproxy.tools.listing import row_of, summary_of

        rows = [row_of(exchange, self.prices) for exchange in exchanges]
        self.known[cassette] = line_of(summary_of(cassette, rows))

    def forget(self, cassette: str) -> None:
        """`cassette` may change (a test records into it): read it at the session's end."""
        self.known.pop(cassette, None)

    def lines(self) -> dict[str, str]:
        """The line of every cassette used: known, else read now. TapeproxyError: no library
        opens at `cassettes`."""
        names = set(self.used.values())
        known = {name: self.known[name] for name in names if name in self.known}
        return {**self._read(names - set(known)), **known}

    def _read(self, names: set[str]) -> dict[str, str]:
        """Each cassette's line, read from the library; a cassette that cannot be read gets
        the reason instead. TapeproxyError: no library opens at `cassettes`."""
        if not names:
            return {}
        from tapeproxy.store import open_store
        from tapeproxy.tools.summaries import summarize

        store, lines = open_store(self.cassettes), {}
        for name in names:
            try:
                lines[name] = line_of(summarize(store, name, self.prices))
            except TapeproxyError as exc:
                lines[name] = exc.message
            except OSError as exc:
                lines[name] = f"cannot read cassette {name!r}: {exc}"
        return lines

    def write(self, terminalreporter: Any) -> None:
        """One line per test that used tapeproxy."""
        if not self.used:
            return
        try:
            lines = self.lines()
        except TapeproxyError as exc:
            terminalreporter.write_line(f"tapeproxy tokens and cost per test: {exc.message}")
            return
        terminalreporter.write_line("tapeproxy tokens and cost per test:")
        for nodeid, cassette in self.used.items():
            terminalreporter.write_line(f"  {nodeid}: {lines[cassette]}")
