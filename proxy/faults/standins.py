"""The answers that stand in for a request's own: the provider's 429, overload or 500 (a real
one recorded in the cassette where it holds one), and a connection dropped (reset, timeout)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from tapeproxy.engine.replay import Replay
from tapeproxy.engine.stats import Trace
from tapeproxy.errors import ClientGone, Dropped, TapeproxyError
from tapeproxy.exchange.model import Exchange
from tapeproxy.faults.spec import FaultSpec
from tapeproxy.faults.wrappers import pause
from tapeproxy.providers.base import Provider
from tapeproxy.store.protocol import CassetteStore

ERRORS = frozenset({"rate_limit", "overloaded", "server_error"})
DROPS = frozenset({"timeout", "reset"})
STAND_INS = ERRORS | DROPS  # the rest spoil the request's own answer
SCANNED = 500  # recordings of a cassette looked through for real error answers, at most
log = logging.getLogger("tapeproxy")


def status_of(spec: FaultSpec, provider: Provider) -> int:
    if spec.kind == "rate_limit":
        return 429
    if spec.kind == "overloaded":
        return provider.overload[0]
    return int(spec["status"])


def error_answer(
    spec: FaultSpec, provider: Provider, key: str, recorded: Exchange | None
) -> Replay:
    """The error `spec` asks for, in `provider`'s shape, or `recorded` as it was; a 429 gets
    `retry-after` and the provider's rate-limit headers that the recording lacks (a recording
    keeps none: they change on every call)."""
    status = status_of(spec, provider)
    if recorded is not None:
        replay = Replay.of(recorded, key)
        headers, frames = list(replay.headers), replay.frames
    else:
        kind = {
            "rate_limit": provider.rate_limit_type,
            "overloaded": provider.overload[1],
        }.get(spec.kind, provider.server_error_type)
        message = f"tapeproxy fault {spec.text}: the answer a failing {provider.name} gives"
        body = json.dumps(provider.error_body(kind, message, status)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"x-tapeproxy-key", key.encode()),
        ]
        frames = ((0, body),)
    if spec.kind == "rate_limit":
        retry = int(spec["retry_after"])
        have = {name for name, _ in headers}
        extra = [("retry-after", str(retry)), *provider.limit_headers(retry)]
        headers += [(k.encode(), v.encode()) for k, v in extra if k.encode() not in have]
    headers.append((b"x-tapeproxy-fault", spec.text.encode("latin-1", "replace")))
    return Replay(status, tuple(headers), frames, cut=False)


class RecordedErrors:
    """Real error answers found in a cassette, by (upstream, status): looked for once per
    cassette and run of faults, in the first SCANNED recordings, each one a replay can send
    (`Replay.of`: else the provider's own shape stands in). Call `find` off the loop."""

    def __init__(self, store: CassetteStore) -> None:
        self.store = store
        self._found: dict[str, dict[tuple[str, int], Exchange]] = {}

    def clear(self) -> None:
        self._found.clear()

    def find(self, cassette: str, upstream: str, status: int) -> Exchange | None:
        found = self._found.get(cassette)
        if found is None:
            found = self._found[cassette] = self._scan(cassette)
        return found.get((upstream, status))

    def _scan(self, cassette: str) -> dict[tuple[str, int], Exchange]:
        found: dict[tuple[str, int], Exchange] = {}
        try:
            entries = self.store.entries(cassette)
        except TapeproxyError:
            return found
        places = [(key, ordinal) for key, ordinals in entries.items() for ordinal in ordinals]
        for key, ordinal in places[:SCANNED]:
            try:
                exchange = self.store.read(cassette, key, ordinal)
            except TapeproxyError as exc:
                log.debug("faults: skipped %s/%s: %s", cassette, key, exc.message)
                continue
            response = exchange.response
            if response.status < 400 or response.frames is not None:
                continue
            try:  # one a hand edit left unsendable is passed over, as an unreadable one is
                Replay.of(exchange, key)
            except ValueError as exc:
                log.debug("faults: skipped %s/%s: %s", cassette, key, exc)
                continue
            found.setdefault((exchange.request.upstream, response.status), exchange)
        return found


class Dropping:
    """The chunks of an answer that never comes: after `wait` seconds (0: at once) Dropped is
    raised, and the door closes the connection with nothing sent. A client that leaves
    first ends the wait. Its exchange's log line says what happened, when it happened (no
    status: none was sent)."""

    last = False

    def __init__(
        self, wait: float, gone: Callable[[], Awaitable[None]] | None, trace: Trace | None = None
    ) -> None:
        self._wait = wait
        self._gone = gone
        self._trace = trace

    def __aiter__(self) -> Dropping:
        return self

    async def __anext__(self) -> bytes:
        try:
            await pause(self._wait, self._gone)
        except ClientGone:
            self._log("client went away during the fault's wait, nothing sent")
            raise
        except BaseException:
            self._log("cut by shutdown during the fault's wait, nothing sent")
            raise
        waited = f"after {self._wait:g} s" if self._wait else "at once"
        self._log(f"connection closed {waited} by the fault, nothing sent")
        raise Dropped("a fault closed the connection before the answer")

    def _log(self, outcome: str) -> None:
        if self._trace is not None:
            self._trace.log(outcome)

    async def aclose(self) -> None:
        return None
