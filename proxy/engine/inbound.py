"""What a door hands the engine (`Inbound`) and what it gets back: `Serve`, `Refuse` or `Live`.
Plain values: no web framework type crosses this line. `Inbound` and `Serve` are built for
every request and are not frozen: a frozen dataclass's __init__ sets each field through
object.__setattr__ (3 µs for ten fields, against 0.35 µs); nothing changes them once built."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from tapeproxy.engine.hangup import Gone
from tapeproxy.engine.replay import Replay
from tapeproxy.errors import CassetteMiss

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
    fault: str | None = None  # a fault spec for this request alone (x-tapeproxy-fault)

    @cached_property
    def header_map(self) -> HeaderView:
        return HeaderView(self.headers)


class HeaderView:
    """Headers by lowercase name, as latin-1 text: `get()` gives the first of repeated ones,
    `items()` every pair as sent (so a key header sent twice keys on both, as it always has)."""

    def __init__(self, raw: RawHeaders) -> None:
        self._raw = raw  # decoded when first asked: a replayed request mostly never is

    @cached_property
    def _pairs(self) -> list[tuple[str, str]]:
        return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in self._raw]

    @cached_property
    def _first(self) -> dict[str, str]:
        first: dict[str, str] = {}
        for name, value in self._pairs:
            first.setdefault(name, value)
        return first

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
    body: Any = field(
        default_factory=dict
    )  # the upstream's error shape (a JSON-RPC batch's: a list)
    status: int | None = None  # else the error's (a JSON-RPC error answers 200)


class Chunks(Protocol):
    """A live answer's body as it comes, chunk by chunk: an async iterator that its door runs
    to its end, or closes (`aclose`) when it stops early. It ends with a chunk (maybe empty)
    for which `last` is True, so the door can end the body with it."""

    last: bool

    def __aiter__(self) -> AsyncIterator[bytes]: ...
    def __anext__(self) -> Awaitable[bytes]: ...
    async def aclose(self) -> None: ...


@dataclass
class Live:
    """The upstream's answer: its status, its headers as they go to the client, and its
    chunks, recorded on their way by the engine (the exchange is written before the chunk
    that ends it is handed over). The head goes out at once, unless `held`: an answer that
    is all in already and recorded goes out whole once it is written, its head and body
    back to back (one wake-up of the client less). Built for every live request, so not
    frozen."""

    status: int
    headers: list[tuple[bytes, bytes]]
    chunks: Chunks
    held: bool = False


Answer = Serve | Refuse | Live
