"""Recordings made ready to send (`Replay`: built once from an exchange file, sent many times)
and the byte-bounded cache of them shared by every cassette."""

from __future__ import annotations

import base64
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tapeproxy.exchange import eventframes
from tapeproxy.exchange.bodies import Payload, payload_bytes
from tapeproxy.exchange.head import head_problem
from tapeproxy.exchange.model import Exchange, Frame, Outcome

REPLAY_CACHE_BYTES = 64 * 1024 * 1024

CacheKey = tuple[str, str, int]  # (cassette, key, ordinal)


def header_pairs(headers: dict[str, str | list[str]]) -> list[tuple[str, str]]:
    return [(k, one) for k, v in headers.items() for one in (v if isinstance(v, list) else [v])]


def frame_bytes(frame: Frame, dialect: str | None = None) -> bytes:
    """A stored frame's bytes: its text (an eventstream message's readable text encoded back
    to the message) or base64. ValueError for one that cannot be."""
    if frame.text is not None and dialect == "eventstream":
        return eventframes.wire(frame.text)
    if frame.text is not None:
        return frame.text.encode("utf-8")
    return base64.b64decode(frame.base64 or "")


def _needs_length(exchange: Exchange, cut: bool) -> bool:
    """Whether a replayed body gets a Content-Length: not a cut one (it goes chunked, so the
    client sees it end short), not one recorded with its own (HEAD), and never on an answer
    that may not carry one or had none (204, 304, a HEAD answered chunked)."""
    return not (
        cut
        or "content-length" in exchange.response.headers
        or exchange.response.status in (204, 304)
        or exchange.request.method == "HEAD"
    )


@dataclass(frozen=True)
class Replay:
    """A recording made ready to send: built once per run from its file, sent many times."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    frames: tuple[tuple[int, bytes], ...]  # (ms from the start of the answer, bytes)
    cut: bool
    end_ms: int | None = None  # when a recorded cut came, if known
    # An answer to a JSON-RPC request, and that request's ids (tapeproxy.engine.jsonrpc).
    rpc: bool = False
    rpc_ids: tuple[Any, ...] = ()

    @cached_property
    def size(self) -> int:
        """The bytes it holds, about: what the caches of replays count."""
        return sum(len(data) for _, data in self.frames) + 512

    @cached_property
    def whole(self) -> bytes:
        """The body in one piece: what a replay with no timing sends, in one write."""
        if len(self.frames) == 1:
            return self.frames[0][1]
        return b"".join(data for _, data in self.frames)

    @classmethod
    def of(cls, exchange: Exchange, key: str) -> Replay:
        """The answer `exchange` recorded. ValueError naming the field (`response.body: ...`)
        for one a hand edit left valid under the schema but impossible to send: a body that
        is no base64, of no known style or kind; a status no server sends (0, 1000, a 1xx), a
        header name that is no token, a header value with CR, LF or NUL or beyond latin-1
        (tapeproxy.exchange.head)."""
        response = exchange.response
        problem = head_problem(response.status, response.headers)
        if problem is not None:
            raise ValueError(problem)
        headers = [*header_pairs(response.headers), ("x-tapeproxy-key", key)]
        frames: tuple[tuple[int, bytes], ...]
        cut = exchange.outcome is Outcome.UPSTREAM_CUT
        if response.frames is None:
            try:
                body = payload_bytes(Payload.from_dict(response.body))
            except ValueError as exc:  # binascii.Error too
                raise ValueError(f"response.body: {exc}") from exc
            if _needs_length(exchange, cut):
                headers.append(("content-length", str(len(body))))
            frames = ((0, body),) if body else ()
        else:
            try:
                frames = tuple((f.ms, frame_bytes(f, response.dialect)) for f in response.frames)
            except ValueError as exc:
                raise ValueError(f"response.frames: {exc}") from exc
        return cls(
            status=response.status,
            headers=_encoded(headers),
            frames=frames,
            cut=cut,
            end_ms=response.end_ms if cut else None,
        )


def _encoded(headers: list[tuple[str, str]]) -> tuple[tuple[bytes, bytes], ...]:
    """Headers head_problem passed, as bytes."""
    return tuple((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers)


class ReplayCache:
    """Recordings ready to send, shared by every run and bounded by their bytes, so replaying
    a recording again reads and renders nothing, and a large library does not fill memory."""

    def __init__(self, limit: int = REPLAY_CACHE_BYTES) -> None:
        self.limit = limit
        self.size = 0
        self.discards = 0  # recordings written since start (see Runs.changes)
        self._entries: OrderedDict[CacheKey, tuple[Replay, int]] = OrderedDict()

    def get(self, key: CacheKey) -> Replay | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: CacheKey, replay: Replay) -> None:
        self._drop(key)
        size = replay.size
        if size > self.limit // 8:
            return  # one huge answer would evict everything else; read it from disk each time
        self._entries[key] = (replay, size)
        self.size += size
        while self.size > self.limit:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.size -= evicted

    def discard(self, key: CacheKey) -> None:
        """Forget `key`'s recording: one was just written there (counted)."""
        self.discards += 1
        self._drop(key)

    def _drop(self, key: CacheKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size -= entry[1]

    def clear(self) -> None:
        """Forget everything: a new run reads its cassette from disk again (another tapeproxy
        may have re-recorded it)."""
        self._entries.clear()
        self.size = 0
