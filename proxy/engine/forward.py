"""A request sent upstream (`open_upstream`) and its answer made a `Live` whose chunks are
recorded on their way (`forward`): the engine's live path, beside the replay and the refusal."""

from __future__ import annotations

import tempfile

from tapeproxy.engine.capture import Capture
from tapeproxy.engine.hangup import Watch
from tapeproxy.engine.inbound import Live
from tapeproxy.engine.keeper import Keeper, Target
from tapeproxy.engine.keyed import Keyed
from tapeproxy.engine.recorder import Recording
from tapeproxy.engine.relay import Relay
from tapeproxy.engine.spool import Spool
from tapeproxy.engine.stats import Counters
from tapeproxy.errors import ClientGone, UpstreamError
from tapeproxy.settings import Settings
from tapeproxy.upstream.hopheaders import answer_headers
from tapeproxy.upstream.protocol import Outbound, Upstream, UpstreamResponse


async def open_upstream(
    upstream: Upstream | None, counters: Counters, keyed: Keyed
) -> tuple[UpstreamResponse, Watch | None]:
    """The upstream's answer, and the watch of the client that stops the call when the
    client hangs up; the relay of the answer watches on with it and closes it."""
    if upstream is None:
        raise UpstreamError("tapeproxy is not started: no upstream client yet")
    counters.upstream_calls += 1
    inbound = keyed.inbound
    query = f"?{inbound.query}" if inbound.query else ""
    outbound = Outbound.of(
        keyed.provider.name,
        inbound.method,
        keyed.provider.base_url + inbound.path + query,
        inbound.headers,
        inbound.body,
    )
    watch = None if inbound.gone is None else Watch(inbound.gone)  # (no cost to a replay)
    opening = upstream.open(outbound)
    try:
        return await (opening if watch is None else watch.unless_gone(opening)), watch
    except BaseException as exc:
        if watch is not None:
            watch.close()
        if isinstance(exc, ClientGone):
            counters.aborted += 1
        raise


async def forward(
    upstream: Upstream | None,
    counters: Counters,
    keeper: Keeper,
    settings: Settings,
    keyed: Keyed,
    target: Target | None,
) -> Live:
    """The upstream's answer to `keyed`, recorded into `target` (None: not recorded)."""
    answer, watch = await open_upstream(upstream, counters, keyed)
    capture = None
    if target is not None:
        capture = Capture(
            provider=keyed.provider,
            request=keyed.parts,
            key=keyed.key,
            seq=target.seq,
            rules=keyed.rules.fingerprint(),
            status=answer.status,
            headers=list(answer.headers),
            chunked=answer.chunked,
            spool=Spool(tempfile.TemporaryFile),
            limit=settings.max_record,
        )
    headers = answer_headers(answer.headers, keep_length=keyed.parts.method == "HEAD")
    headers.append(("x-tapeproxy-key", keyed.key))
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    recording = Recording(keyed.trace, answer.status, keeper, capture, target)
    relay = Relay(answer, recording, watch, settings.read_timeout)
    return Live(answer.status, raw, relay, held=recording.writes and answer.whole)
