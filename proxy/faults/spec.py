"""The fault grammar, `KIND[:NAME=VALUE,...][@WHEN]` -> `FaultSpec`; a bad spec is one line
that names it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tapeproxy.errors import BadFault

# Each kind, its parameters and their defaults (seconds for retry_after and timeout's after,
# frames or bytes for cut's after, milliseconds for ttfb and gap).
KINDS: Mapping[str, Mapping[str, float]] = {
    "rate_limit": {"retry_after": 1},
    "overloaded": {},
    "server_error": {"status": 500},
    "timeout": {"after": 30},
    "reset": {},
    "cut": {"after": 1},
    "slow": {"ttfb": 0, "gap": 0},
    "malformed": {},
}
# Parameters that count things (a status, frames or bytes): whole numbers.
WHOLE = frozenset({"status", "retry_after"})
_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_SPAN = re.compile(r"^(\d{1,18})(?:-(\d{1,18}))?$")  # (int() takes no more than 4300 digits)
WHEN_FORMS = "N, N-M, N,M,... or p=F"


@dataclass(frozen=True)
class When:
    """Which requests of a run of faults get the fault: the numbered ones (`spans`, from 1),
    each with probability `chance`, or (neither) every one."""

    spans: tuple[tuple[int, int], ...] = ()
    chance: float | None = None

    def fires(self, number: int, draw: Callable[[], float]) -> bool:
        """Whether the run's `number`-th request gets it; `draw` is the request's seeded
        uniform number in [0, 1), asked only for a probability."""
        if self.chance is not None:
            return draw() < self.chance
        if self.spans:
            return any(low <= number <= high for low, high in self.spans)
        return True


@dataclass(frozen=True)
class FaultSpec:
    """One fault as asked for: its text, its kind, its parameters (defaults filled) and when."""

    text: str
    kind: str
    params: Mapping[str, float]
    when: When

    def __getitem__(self, name: str) -> float:
        return self.params[name]


def parse_fault(text: str) -> FaultSpec:
    """`cut:after=2@3` -> its FaultSpec, or BadFault with a one-line message naming it."""
    spec = text.strip()
    head, at, when = spec.partition("@")
    kind, colon, params = head.partition(":")
    if kind not in KINDS:
        raise _bad(text, f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    if at and not when:
        raise _bad(text, f"nothing after @; WHEN is {WHEN_FORMS}")
    if colon and not params:
        raise _bad(text, "nothing after :; parameters are NAME=VALUE,...")
    return FaultSpec(spec, kind, _params(text, kind, params), _when(text, when))


def parse_faults(texts: Iterable[str]) -> tuple[FaultSpec, ...]:
    return tuple(parse_fault(text) for text in texts)


def _params(text: str, kind: str, given: str) -> dict[str, float]:
    known = KINDS[kind]
    values = {name: float(default) for name, default in known.items()}
    for item in given.split(",") if given else ():
        name, eq, value = item.strip().partition("=")
        if name not in known:
            takes = ", ".join(known) or "no parameters"
            raise _bad(text, f"{kind} has no parameter {name!r} (it takes {takes})")
        if not eq or not _NUMBER.match(value.strip()):
            raise _bad(text, f"{name} needs a number >= 0, as {name}=2")
        number = float(value)
        if name in WHOLE and not number.is_integer():
            raise _bad(text, f"{name} must be a whole number, not {value}")
        values[name] = number
    if kind == "server_error" and not 500 <= values["status"] <= 599:
        raise _bad(text, f"status must be a 5xx, not {values['status']:g}")
    if kind == "cut" and not values["after"].is_integer():
        raise _bad(text, f"after counts frames or bytes: a whole number, not {values['after']:g}")
    return values


def _when(text: str, when: str) -> When:
    if not when:
        return When()
    if when.startswith("p="):
        try:
            chance = float(when[2:])
        except ValueError:
            chance = math.nan
        if not 0 <= chance <= 1:  # (NaN too)
            raise _bad(text, f"probability {when[2:]!r} is outside [0, 1]")
        return When(chance=chance)
    spans = []
    for item in when.split(","):
        match = _SPAN.match(item.strip())
        low = int(match.group(1)) if match else 0
        high = int(match.group(2) or low) if match else 0
        if match is None or low < 1 or high < low:
            raise _bad(text, f"@{when} is not {WHEN_FORMS} (requests count from 1)")
        spans.append((low, high))
    return When(spans=tuple(spans))


def _bad(text: str, why: str) -> BadFault:
    return BadFault(f"fault {text.strip()!r}: {why}; the form is KIND[:NAME=VALUE,...][@WHEN]")
