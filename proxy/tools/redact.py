"""`tapeproxy redact`: a cassette's recordings scrubbed by the redaction rules, rewritten
atomically and re-keyed where a request changed; and a check that no pattern is left."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange, SocketFrame
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.store.blobs import used_by, written_as
from tapeproxy.store.protocol import CassetteStore, exchange_file
from tapeproxy.tools.prune import unused_blobs
from tapeproxy.tools.rekey import RekeyReport, RulesFor, rekey


@dataclass
class RedactReport:
    cassette: str
    dry_run: bool
    changed: list[str] = field(default_factory=list)  # rewritten where they were
    moved: list[tuple[str, str]] = field(default_factory=list)  # re-keyed: (old, new)
    unchanged: int = 0
    merged: int = 0  # requests that redaction made the same as another: now its repeats
    # Files where a pattern still matches: in a header's name, in a binary body, across
    # frames' bytes outside the text a client joins (what scrubbing cannot reach).
    left: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)  # copies a killed redact left: removed


def redact(
    store: CassetteStore,
    cassette: str,
    scrubber: Scrubber,
    rules_for: RulesFor,
    dry_run: bool = False,
) -> RedactReport:
    """Scrub every recording through the same Scrubber recording uses. A scrubbed request
    gets the key it has now (rekey's crash-safe ordering: no file is overwritten before its
    content is safe at its new place); requests that became equal are numbered in recorded
    order."""
    replaced: set[str] = set()  # blobs holding what was scrubbed: deleted whatever their age
    transform = partial(_scrubbed_noting, scrubber, replaced)
    moves: RekeyReport = rekey(store, cassette, rules_for, dry_run, transform=transform)
    report = RedactReport(
        cassette,
        dry_run,
        unchanged=moves.unchanged,
        merged=moves.merged,
        duplicates=moves.duplicates,
    )
    for old, new in moves.moved:
        if old == new:
            report.changed.append(old)
        else:
            report.moved.append((old, new))
    if not dry_run:
        report.left = matches_left(store, cassette, scrubber)

        # A scrubbed string held in a blob was written as a new blob: the old one, which
        # holds what was scrubbed, goes, and so does any unused one holding a match (an
        # interrupted redact's); another young one no file uses may be a recording's.
        def doomed(digest: str) -> bool:
            return digest in replaced or _holds_match(store, cassette, digest, scrubber)

        for digest in unused_blobs(store, cassette, doomed=doomed):
            store.delete_blob(cassette, digest)
    return report


def _holds_match(store: CassetteStore, cassette: str, digest: str, scrubber: Scrubber) -> bool:
    data = store.read_blob(cassette, digest)
    return data is not None and scrubber.matches(data.decode("utf-8", "surrogatepass"))


def _scrubbed_noting(scrubber: Scrubber, replaced: set[str], exchange: Exchange) -> Exchange:
    """`scrubbed`, noting the blobs of `exchange` its scrubbed copy no longer uses."""
    out = scrubbed(scrubber, exchange)
    if out is not exchange:
        replaced |= used_by(exchange) - written_as(out)
    return out


def scrubbed(scrubber: Scrubber, exchange: Exchange) -> Exchange:
    """`Scrubber.exchange`, and a WebSocket session's frames too (as recording scrubs them)."""
    out = scrubber.exchange(exchange)
    session = out.session
    if session is None or not scrubber:
        return out
    frames = [_scrubbed_frame(scrubber, frame) for frame in session.frames]
    return out.model_copy(update={"session": session.model_copy(update={"frames": frames})})


def _scrubbed_frame(scrubber: Scrubber, frame: SocketFrame) -> SocketFrame:
    if frame.json_ is not None:
        return frame.model_copy(update={"json_": scrubber.value(frame.json_)})
    if frame.text is not None:
        return frame.model_copy(update={"text": scrubber.json_text(frame.text)})
    return frame


def matches_left(store: CassetteStore, cassette: str, scrubber: Scrubber) -> list[str]:
    """The files that still hold a match of a pattern in what was recorded (as they are on
    disk)."""
    left = []
    for key, ordinals in sorted(store.entries(cassette).items()):
        for ordinal in ordinals:
            if scrubber.matches(recorded_text(store.read(cassette, key, ordinal))):
                left.append(exchange_file(key, ordinal))
    return left


def recorded_text(exchange: Exchange) -> str:
    """What the request and the answer carried, as JSON text: not tapeproxy's own fields (key,
    rules fingerprint, seq, ordinal, schema_version, usage, status, timings), whose hex and
    digits a pattern like `[0-9a-f]{8}` would match in every file."""
    response = exchange.response
    frames = [{"text": f.text, "base64": f.base64} for f in response.frames or ()]
    carried: dict[str, Any] = {
        "request": exchange.request.model_dump(mode="json"),
        "response": {"headers": response.headers, "body": response.body, "frames": frames},
    }
    if exchange.session is not None:  # a WebSocket session's frames, both ways
        carried["session"] = [f.json_ or f.text for f in exchange.session.frames]
    # What scrubbing each piece alone can miss: a match split across two stream frames (in
    # the assistant's joined text, or the frames' joined bytes) and one in a binary body.
    seen = [json.dumps(carried, ensure_ascii=False)]
    if response.frames is not None:
        seen += [answers.text(exchange), answers.joined_frames(exchange)]
    for body in (exchange.request.body, response.body):
        if body and isinstance(body.get("base64"), str):
            seen.append(_decoded(body["base64"]))
    return "\n".join(seen)


def _decoded(data: str) -> str:
    try:
        return base64.b64decode(data).decode("utf-8", "replace")
    except ValueError:
        return ""
