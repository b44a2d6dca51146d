"""The exchange file as a pydantic model: its one definition, for reading (validated and
migrated) and for writing (its dump, laid out by exchangefile.py), and what makes two
recordings the same."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

# How the file is laid out lives in exchangefile.py: named here too, for every reader.
from tapeproxy.exchange.blobs import BLOBS_VERSION, INLINE_VERSION, Fetch, unpack
from tapeproxy.exchange.blobstream import Blobber, Middle
from tapeproxy.exchange.layout import (
    FRAME_INDENT,
    SCHEMA_VERSION,
    STREAMED,
    NewerSchema,
    Outcome,
    Record,
    frames_json,
    render,
    render_around,
    schema_version,
    string_json,
)

__all__ = [
    "FRAME_INDENT",
    "SCHEMA_VERSION",
    "STREAMED",
    "Exchange",
    "Frame",
    "NewerSchema",
    "Outcome",
    "Record",
    "Session",
    "SessionEnd",
    "SocketFrame",
    "StoredRequest",
    "StoredResponse",
    "dump_around",
    "dump_exchange",
    "frames_json",
    "load_exchange",
    "migrate",
    "schema_version",
    "string_json",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Frame(_Model):
    """One stream frame: its bytes (as text where they are UTF-8) and when it came."""

    ms: int = Field(ge=0, description="Milliseconds from the start of the response.")
    text: str | None = None
    base64: str | None = None


def checked_body(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored body as bodies.Payload reads it back: one of json, text (a string) or base64
    (a string), and perhaps a style; anything else is refused as the file is read, where
    it can be named, not where it is used (a miss report, a replay)."""
    if not body:
        return body
    kinds = [kind for kind in ("json", "text", "base64") if kind in body]
    if len(kinds) != 1:
        raise ValueError(f"a body holds one of json, text or base64, not keys {sorted(body)}")
    if kinds[0] != "json" and not isinstance(body[kinds[0]], str):
        raise ValueError(f"a body's {kinds[0]} is a string")
    if not isinstance(body.get("style", ""), str):
        raise ValueError("a body's style is a string")
    return body


class StoredRequest(_Model):
    method: str
    upstream: str
    path: str
    query: list[tuple[str, str]] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | None = None

    _body = field_validator("body")(checked_body)


class StoredResponse(_Model):
    status: int
    headers: dict[str, str | list[str]] = Field(default_factory=dict)
    body: dict[str, Any] | None = None
    dialect: str | None = None
    frames: list[Frame] | None = None
    end_ms: int | None = Field(
        default=None, ge=0, description="For a cut answer: milliseconds from its start to the cut."
    )

    _body = field_validator("body")(checked_body)


class SocketFrame(_Model):
    """One WebSocket frame of a session: who sent it, when, and its payload (a JSON text
    frame as `json` and the `style` that renders it back byte-equal; other text as `text`;
    a binary frame as `base64`)."""

    direction: Literal["client", "server"]
    type: Literal["text", "binary"]
    ms: int = Field(ge=0, description="Milliseconds from the start of the session.")
    json_: Any = Field(default=None, alias="json")
    style: str | None = None
    text: str | None = None
    base64: str | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class SessionEnd(_Model):
    """How a session ended: a close frame (its code, its reason, and which side sent it)
    or a cut (the connection dropped with no close)."""

    ms: int = Field(ge=0)
    by: Literal["client", "server"] | None = None
    code: int | None = None
    reason: str = ""
    cut: bool = False


class Session(_Model):
    """A WebSocket session: the subprotocol the upstream chose, its frames, its end."""

    subprotocol: str | None = None
    frames: list[SocketFrame] = Field(default_factory=list)
    end: SessionEnd


class Exchange(_Model):
    schema_version: int = SCHEMA_VERSION
    key: str
    ordinal: int = Field(ge=1)
    seq: int = Field(ge=0, description="Position of the request in the run that recorded it.")
    rules: str
    outcome: Outcome = Outcome.COMPLETE
    usage: dict[str, int] | None = None
    request: StoredRequest
    response: StoredResponse
    kind: Literal["websocket"] | None = None  # None: an HTTP exchange
    session: Session | None = None  # a WebSocket session (kind `websocket`)
    # A new exchange is as one read from a file with no blob (so the two compare equal).
    _read_as: int = PrivateAttr(default=INLINE_VERSION)
    # The blobs the file it was loaded from refers to (none for a new one).
    _refers: frozenset[str] = PrivateAttr(default=frozenset())

    @model_validator(mode="after")
    def _session_of_its_kind(self) -> Exchange:
        if (self.kind == "websocket") != (self.session is not None):
            raise ValueError("a websocket exchange holds a session, and only it does")
        return self

    @property
    def refers(self) -> frozenset[str]:
        """The blobs the file it was loaded from refers to (none for a new exchange)."""
        return self._refers

    @property
    def read_as(self) -> int:
        """The schema_version of the file it was loaded from (older ones are migrated)."""
        return self._read_as

    def record(self) -> Record:
        """The exchange as its file holds it: plain data, no None anywhere."""
        return self.model_dump(exclude_none=True, by_alias=True)

    def untimed(self, seq: int) -> Exchange:
        """The exchange with its timings (frame arrivals, when a cut came) left out, and
        `seq` as its position in the run: what two recordings of one answer have in common."""
        response = self.response
        frames = response.frames
        if frames is not None:
            frames = [one.model_copy(update={"ms": 0}) for one in frames]
        untimed = response.model_copy(update={"frames": frames, "end_ms": None})
        session = self.session
        if session is not None:
            timeless = [one.model_copy(update={"ms": 0}) for one in session.frames]
            end = session.end.model_copy(update={"ms": 0})
            session = session.model_copy(update={"frames": timeless, "end": end})
        return self.model_copy(update={"seq": seq, "response": untimed, "session": session})

    def same_recording(self, new: Exchange) -> bool:
        """True when `new` is what this stored one holds but for timing and recording order
        (`seq`), so a re-record of the same answers leaves the stored file (and git)
        untouched, even when parallel calls came in another order. The stored file keeps its
        seq: the position in the run that first recorded that answer. Compared as written,
        so a JSON body whose keys came in another order is not the same (replay gives back
        the bytes as recorded)."""
        return dump_exchange(self.untimed(self.seq)) == dump_exchange(new.untimed(self.seq))


Migration = Callable[[dict[str, Any]], dict[str, Any]]
# Version N -> the step that turns a version-N file into a version-N+1 one, as in mitmproxy's
# io/compat.py. A format change bumps SCHEMA_VERSION and adds its `migrate_N_to_N+1` here.


def migrate_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 lets a body's large strings be blobs (exchange/blobs.py): a version-1 file
    holds none, and its objects are never read as references, so it is whole as it is."""
    return {**data, "schema_version": 2}


MIGRATIONS: dict[int, Migration] = {1: migrate_1_to_2}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a file up to SCHEMA_VERSION in memory, one migrate_N_to_N+1 step at a time."""
    version = schema_version(data)
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise ValueError(f"schema_version {version} is not supported: no migration from it")
        data = step(data)
        version = data["schema_version"]
    return data


def dump_exchange(exchange: Exchange) -> bytes:
    """The exchange file's bytes, every body inline (so in version 1, which any tapeproxy
    reads; a store writes large strings as blobs: store/blobs.py): `render` of its Record."""
    return render({**exchange.record(), "schema_version": INLINE_VERSION})


def load_exchange(raw: bytes, fetch: Fetch | None = None) -> Exchange:
    """An exchange file read back, migrated from an older schema_version where it is one;
    its blob references (version 2) joined back with `fetch` (none: a ValueError)."""
    try:
        data = json.loads(raw)
    except RecursionError as exc:  # not a ValueError: it would be no one-line CassetteCorrupt
        raise ValueError("its JSON is nested too deeply to be read") from exc
    if not isinstance(data, dict):
        raise ValueError("an exchange file holds one JSON object")
    read_as = schema_version(data)
    refers: set[str] = set()
    if read_as >= BLOBS_VERSION and b'"$blob' in raw:
        fetching = fetch or _no_blobs

        def noting(digest: str) -> bytes:
            refers.add(digest)
            return fetching(digest)

        data = unpack(data, noting)
    exchange = Exchange.model_validate(migrate(data))
    exchange._read_as = read_as
    if refers:
        exchange._refers = frozenset(refers)
    return exchange


def _no_blobs(digest: str) -> bytes:
    raise ValueError(f"it refers to blob {digest}, and no blobs were given to read it with")


def dump_around(
    skeleton: Exchange, middle: Middle, blobber: Blobber | None = None
) -> Iterator[bytes]:
    """`render_around` of an exchange's Record (layout.py), piece by piece; a WebSocket
    session's frames are its middle. With no `blobber`, in version 1, every string inline;
    with one, its large runs are put out as blobs as they are met, and the file is in
    version 2 when it refers to one. A session's version comes before its frames: its
    skeleton says it (`schema_version` 2: its tape saw a large run, `blobs.held`). Its
    request, held whole, is packed too (its blobs put as the file starts to be written)."""
    record = skeleton.record()
    request = record["request"]
    if blobber is not None and request.get("body"):  # held whole: packed as `pack` does
        record["request"] = {**request, "body": blobber.value(request["body"])}
    version = INLINE_VERSION
    if blobber is not None and skeleton.session is not None:
        marked = blobber.marked or skeleton.schema_version >= BLOBS_VERSION
        version = BLOBS_VERSION if marked else INLINE_VERSION
    record["schema_version"] = version
    if skeleton.session is not None:
        record["session"]["frames"] = [STREAMED]

    def written(ascii: bool) -> Iterable[bytes]:
        return middle(ascii, blobber)

    yield from render_around(record, written, lambda: blobber is not None and blobber.marked)
