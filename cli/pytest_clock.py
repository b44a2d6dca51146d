"""The time the pytest plugin itself adds, for its terminal summary: measured per test (its
hooks and its calls to the server), carried across pytest-xdist as a user property, summed."""

from __future__ import annotations

from typing import Any

SPENT = "tapeproxy_seconds"  # the user property that carries a test's plugin time


class Clock:
    """The plugin's measured time over the tests tallied."""

    def __init__(self) -> None:
        self.spent = 0.0  # seconds
        self.timed = 0  # tests whose time is in `spent`

    def add(self, value: object) -> None:
        if isinstance(value, float):
            self.spent += value
            self.timed += 1

    def write(self, terminalreporter: Any) -> None:
        if self.timed:
            terminalreporter.write_line(
                f"tapeproxy: the plugin added {self.spent:.2f} s over {self.timed} test(s) "
                f"({self.spent * 1000 / self.timed:.1f} ms a test), measured in its hooks and "
                "its calls to the server, its start included"
            )
