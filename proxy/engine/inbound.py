"""What a door hands the engine (`Inbound`) and what it gets back: `Serve`, `Refuse` or `Live`.
Plain values: no web framework type crosses this line. `Inbound` and `Serve` are built for
every request and are not frozen: a frozen dataclass's __init__ sets each field through
object.__setattr__ (3 µs for ten fields, against 0.35 µs); nothing changes them once built."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tapeproxy.engine.hangup import Gone, Watch
from tapeproxy.engine.recorder import Recording
from tapeproxy.engine.replay import Replay
from tapeproxy.errors import CassetteMiss
from tapeproxy.upstream.client import UpstreamResponse

RawHeaders = tuple[tuple[bytes, bytes], ...]


@dataclass
class Inbound:
    """One request, routed: the upstream it goes to, its path there, its raw query and headers
    as they came, its body, and the overrides a door sets for this request alone."""

    upstream: str
    method: str
    path: str
    query: str
    headers: RawHeaders
    body: bytes
    cassette: str | None = None  # else the server's current cassette
    live: frozenset[str] = frozenset()  # upstreams that run live for this request
    timing: str | None = None  # replay timing (`none`, `recorded`, a factor); else --replay-timing
    gone: Gone | None = None  # returns when the client has hung up: the upstream call is dropped

    @cached_property
    def header_map(self) -> HeaderView:
        return HeaderView(self.headers)


class HeaderView:
    """Headers by lowercase name, as latin-1 text: `get()` gives the first of repeated ones,
    `items()` every pair as sent (so a key header sent twice keys on both, as it always has)."""

    def __init__(self, raw: RawHeaders) -> None:
        self._pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]
        self._first: dict[str, str] = {}
        for name, value in self._pairs:
            self._first.setdefault(name, value)

    def items(self) -> list[tuple[str, str]]:
        return self._pairs

    def get(self, name: str, default: str = "", /) -> str:
        return self._first.get(name, default)


@dataclass
class Serve:
    """Answer from the cassette: recording `ordinal` of the request, ready to send."""

    replay: Replay
    ordinal: int
    timing: float | None  # None sends every frame at once; else the factor on recorded gaps


@dataclass(frozen=True)
class Refuse:
    """No answer: a cassette miss, or a request out of the recorded order."""

    error: CassetteMiss
    body: dict[str, Any] = field(default_factory=dict)  # in the upstream's error shape


@dataclass
class Live:
    """The upstream's answer, to pass on chunk by chunk through its `recording`. Built for
    every live request, so not frozen."""

    answer: UpstreamResponse
    headers: list[tuple[bytes, bytes]]  # as they go to the client
    recording: Recording
    watch: Watch | None = None  # its client, watched since the upstream call began


Answer = Serve | Refuse | Live
