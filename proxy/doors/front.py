"""The ASGI door: an HTTP request -> `Inbound` -> the engine -> its answer on the wire."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from starlette.types import Receive, Scope, Send

from tapeproxy.doors.routing import CASSETTE_HEADER, live_names, resolve
from tapeproxy.doors.sending import drop, send_json, send_live, send_replay, until_disconnect
from tapeproxy.engine.core import Engine
from tapeproxy.engine.hangup import shutdown_cut
from tapeproxy.engine.inbound import Inbound, Live, Refuse, Serve
from tapeproxy.engine.keyed import LIVE_HEADER
from tapeproxy.engine.timing import TIMING_HEADER
from tapeproxy.errors import BodyTooLarge, Dropped, TapeproxyError, UpstreamCut
from tapeproxy.faults.schedule import FAULT_HEADER
from tapeproxy.providers.base import Provider, generic_error

log = logging.getLogger("tapeproxy")


class Front:
    """Every request that is not for the control API: routed by its path's first segment."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        provider: Provider | None = None
        try:
            raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
            headers = tuple(scope["headers"])
            # The few headers the door reads, by raw name (ASGI's are lowercase), the first of
            # a repeated one; decoding every header cost 4 us a request with an SDK's 17.
            first = dict(reversed(headers))
            provider, path = resolve(raw_path.decode("latin-1"), headers, self.engine.providers)
            limit = self.engine.settings.max_body
            body = await read_body(receive, text(first, "content-length"), limit)
            if body is None:
                self.engine.abandoned(scope["path"], scope["method"])
                return
            inbound = Inbound(
                upstream=provider.name,
                method=scope["method"],
                path=path,
                query=scope.get("query_string", b"").decode("latin-1"),
                headers=headers,
                body=body,
                cassette=named(first, CASSETTE_HEADER),
                live=live_names(text(first, LIVE_HEADER) or ""),
                timing=text(first, TIMING_HEADER),
                fault=text(first, FAULT_HEADER),
                gone=partial(until_disconnect, receive),
            )
            answer = await self.engine.exchange(inbound)
        except asyncio.CancelledError:  # a shutdown, caught here rather than by a coroutine
            raise shutdown_cut() from None  # wrapped around each await (cut_on_shutdown)
        except UpstreamCut:
            raise  # a shutdown: the connection just drops, quietly (see QuietCuts)
        except TapeproxyError as exc:
            # Scrubbed as a cassette is: the message may quote the path (`/nope/ghp_...`).
            message = self.engine.scrubber.text(exc.message)
            log.warning("%s", message)
            shape = provider.error_body if provider is not None else generic_error
            await send_json(send, exc.status, shape(exc.error_type, message, exc.status))
            return
        if isinstance(answer, Serve):
            await send_replay(answer, receive, send)
        elif isinstance(answer, Refuse):
            await send_json(send, answer.status or answer.error.status, answer.body)
        elif isinstance(answer, Live):
            try:
                await send_live(answer, send)
            except Dropped as exc:  # a fault: the connection closes with nothing sent
                await drop(scope, receive, exc)


def text(first: dict[bytes, bytes], name: str) -> str | None:
    """Header `name`'s first value as latin-1 text, or None when the request has none."""
    value = first.get(name.encode("latin-1"))
    return None if value is None else value.decode("latin-1")


def named(first: dict[bytes, bytes], name: str) -> str | None:
    """Header `name`'s first value as a name the user typed: UTF-8 (as curl and most clients
    send it), else latin-1. It is refused if it is not ASCII, but echoed as it was typed
    (`café`, not `cafÃ©`)."""
    value = first.get(name.encode("latin-1"))
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


async def read_body(receive: Receive, length: str | None, limit: int) -> bytes | None:
    """The whole request body, or None when the client hung up while sending it. A body over
    `limit` is refused as soon as its Content-Length says so, or once that much has come:
    nothing past the limit is held, forwarded or written."""
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise too_large(limit, f"its Content-Length is {int(length):,}")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit, f"{size:,} bytes came before it was refused")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def too_large(limit: int, how: str) -> BodyTooLarge:
    return BodyTooLarge(
        f"request body over the limit of {limit:,} bytes ({how}); raise it with --max-body or "
        "TAPEPROXY_MAX_BODY. Nothing was forwarded or recorded."
    )
