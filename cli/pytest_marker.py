"""What a test's `@pytest.mark.tapeproxy` asks for: its cassette, mode and faults, each
checked, a bad one failing the test with a one-line message."""

from __future__ import annotations

from typing import Any

import pytest

from tapeproxy.errors import BadCassetteName, BadFault
from tapeproxy.faults.spec import parse_faults
from tapeproxy.modes import Mode
from tapeproxy.store.names import cassette_for_test, check_cassette_name


def choose(item: pytest.Item, forced: str | None, prefix: str | None) -> tuple[str, Mode, bool]:
    """The test's cassette and mode (`forced`: --tapeproxy-mode, over the marker's), and
    whether the cassette is its own (not one a marker named, which other tests may share):
    named from its node id, without the library's folder `prefix`."""
    marker = item.get_closest_marker("tapeproxy")
    args: dict[str, Any] = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        args.setdefault("cassette", marker.args[0])
    unknown = set(args) - {"cassette", "mode", "faults"}
    if unknown or (marker and len(marker.args) > 1):
        pytest.fail(
            f"@pytest.mark.tapeproxy takes cassette=, mode= and faults=, not {sorted(unknown)}",
            pytrace=False,
        )
    mode = forced or args.get("mode") or Mode.REPLAY.value
    try:
        named = args.get("cassette")
        cassette = check_cassette_name(named or cassette_for_test(item.nodeid, prefix))
        return cassette, Mode(mode), not named
    except BadCassetteName as exc:
        pytest.fail(f"@pytest.mark.tapeproxy: {exc.message}", pytrace=False)
    except ValueError:
        pytest.fail(
            f"@pytest.mark.tapeproxy(mode={mode!r}): use one of {', '.join(m.value for m in Mode)}",
            pytrace=False,
        )


def marked_faults(item: pytest.Item, default: tuple[str, ...]) -> list[str]:
    """The marker's `faults=` (a list of specs), else the ones the settings give."""
    marker = item.get_closest_marker("tapeproxy")
    given = marker.kwargs.get("faults") if marker else None
    if given is None:
        return list(default)
    if isinstance(given, str) or not all(isinstance(spec, str) for spec in given):
        pytest.fail("@pytest.mark.tapeproxy(faults=...) takes a list of specs", pytrace=False)
    try:
        parse_faults(given)
    except BadFault as exc:
        pytest.fail(f"@pytest.mark.tapeproxy: {exc.message}", pytrace=False)
    return list(given)
