"""Why a request is refused in replay: out of the recorded order (--strict-order), or a miss,
reported with the closest recording and the fields that differ, in its provider's error
shape."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.candidates import candidates, recorded_request
from tapeproxy.engine.inbound import Refuse
from tapeproxy.engine.keyed import Keyed
from tapeproxy.engine.keying import canonical
from tapeproxy.engine.matching import follow_order
from tapeproxy.engine.misses import Miss
from tapeproxy.engine.run import Run
from tapeproxy.errors import CassetteMiss, OutOfOrder
from tapeproxy.exchange.bodies import Payload
from tapeproxy.providers import Rulebook
from tapeproxy.providers.base import Provider
from tapeproxy.store.protocol import CassetteStore, exchange_file


def out_of_order(keyed: Keyed, run: Run, ordinal: int) -> OutOfOrder | None:
    """None when recording `ordinal` of the request is next in recorded order (the run's
    cursor moves past it); else the error that says which recording was."""
    live = keyed.live | run.live
    verdict = follow_order(run.order or [], run.cursor, live, keyed.key, ordinal)
    if isinstance(verdict, int):
        run.cursor = verdict
        return None
    position, expected = verdict
    here = exchange_file(keyed.key, ordinal)
    came = f"{keyed.parts.method} {keyed.provider.name} {keyed.inbound.path} ({here})"
    wanted = (
        f"{expected.summary} ({exchange_file(expected.key, expected.ordinal)})"
        if expected is not None
        else "no further request"
    )
    return OutOfOrder(
        f"--strict-order: request #{run.requests} of this run in cassette "
        f"{keyed.cassette!r} should have been recording #{position + 1} in recorded order, "
        f"{wanted}, but {came} came. Replay the requests in the recorded order, or drop "
        "--strict-order."
    )


async def miss_report(
    keyed: Keyed, run: Run, ask: int, store: CassetteStore, rules: Rulebook
) -> dict[str, Any]:
    """The report of a request no recording answers (its `message` and the details), worked
    out off the event loop: a diff of large bodies must not stall the requests being served.
    The run keeps the recorded requests it read for its next miss."""
    found = run.candidates
    if found is None:
        found = run.candidates = await asyncio.to_thread(
            candidates, store, rules, run.cassette, run.ordinals
        )
    miss = Miss(
        cassette=keyed.cassette,
        mode=keyed.mode.value,
        key=keyed.key,
        ask=ask,
        recorded=len(run.ordinals.get(keyed.key, ())),
        request=canonical(keyed.parts, keyed.rules),
        candidates=found,
        load=partial(recorded_request, store, rules, run.cassette),
        listed=len(run.ordinals),
    )
    return await asyncio.to_thread(miss.explain)


def refusal(provider: Provider, report: dict[str, Any], body: Payload) -> Refuse:
    """A miss as the client gets it: a JSON-RPC error for a JSON-RPC request, else the
    provider's error shape, with the report's details."""
    as_rpc = jsonrpc.refusal(body, report)
    if as_rpc is not None:
        return as_rpc
    error = CassetteMiss(report["message"])
    shaped = provider.error_body(error.error_type, error.message, error.status)
    # Beside the message: inside `error`, or at the top of a flat shape (AWS's).
    holder = shaped.get("error")
    holder = holder if isinstance(holder, dict) else shaped
    holder["details"] = {k: v for k, v in report.items() if k != "message"}
    return Refuse(error, shaped)
