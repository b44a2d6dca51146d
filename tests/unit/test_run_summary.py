"""`tapeproxy run`'s last line: what it did, and the hosts it refused or tunnelled, a few
of them named (an agent that browsed a thousand sites gets one line, not a page)."""

from __future__ import annotations

from tapeproxy.cli.run import SHOWN, summary
from tapeproxy.engine.stats import Counters


def test_the_summary_names_a_few_hosts_and_counts_the_rest() -> None:
    tunnelled = {f"site{n:04}.example:443" for n in range(1000)}
    line = summary(Counters(), {"a.example:443"}, tunnelled)
    assert line.startswith("tapeproxy: replayed 0, recorded 0, misses 0; refused a.example:443")
    assert line.count("site") == SHOWN and line.endswith(f"and {1000 - SHOWN} more")
    assert len(line) < 500
