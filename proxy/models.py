"""The exchange file on disk: its pydantic model, SCHEMA_VERSION, and its exact byte layout."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

SCHEMA_VERSION = 1


class Outcome(StrEnum):
    COMPLETE = "complete"
    FAILURE_STATUS = "failure_status"  # a 429 or 5xx, kept only with --record-failures
    UPSTREAM_CUT = "upstream_cut"  # the stream ended early, kept only with --record-failures
    STREAM_ERROR = "stream_error"  # an error event mid-stream, kept only with --record-failures
    TRUNCATED = "truncated"  # a stream that ended without its final frame, likewise


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Frame(_Model):
    """One stream frame: its bytes (as text where they are UTF-8) and when it came."""

    ms: int = Field(ge=0, description="Milliseconds from the start of the response.")
    text: str | None = None
    base64: str | None = None


class StoredRequest(_Model):
    method: str
    upstream: str
    path: str
    query: list[tuple[str, str]] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | None = None


class StoredResponse(_Model):
    status: int
    headers: dict[str, str | list[str]] = Field(default_factory=dict)
    body: dict[str, Any] | None = None
    dialect: str | None = None
    frames: list[Frame] | None = None
    end_ms: int | None = Field(
        default=None, ge=0, description="For a cut answer: milliseconds from its start to the cut."
    )


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
    _read_as: int = PrivateAttr(default=SCHEMA_VERSION)

    @property
    def read_as(self) -> int:
        """The schema_version of the file it was loaded from (older ones are migrated)."""
        return self._read_as


class NewerSchema(ValueError):
    """A file written by a newer llmtape, in a schema this one does not know."""


Migration = Callable[[dict[str, Any]], dict[str, Any]]
# Version N -> the step that turns a version-N file into a version-N+1 one, as in mitmproxy's
# io/compat.py. A format change bumps SCHEMA_VERSION and adds its `migrate_N_to_N+1` here;
# none has been needed yet, so the chain is empty while SCHEMA_VERSION is 1.
MIGRATIONS: dict[int, Migration] = {}


def schema_version(data: dict[str, Any]) -> int:
    """The version a file says it is in; ValueError when it is no version llmtape can read."""
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerSchema(
            f"schema_version {version} was written by a newer llmtape (this one reads up to "
            f"{SCHEMA_VERSION}): upgrade llmtape (pip install -U llmtape)"
        )
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(
            f"schema_version {version!r} is not supported (this llmtape reads {SCHEMA_VERSION})"
        )
    return version


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


def _sorted(value: Any, verbatim: Any) -> Any:
    if value is verbatim:
        return value
    if isinstance(value, dict):
        return {k: _sorted(value[k], verbatim) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item, verbatim) for item in value]
    return value


def dump_exchange(exchange: Exchange) -> bytes:
    """Pretty JSON with sorted keys, except the response body's JSON, which keeps the
    upstream's key order so that replay gives back the very bytes that were recorded."""
    # Python mode: JSON mode would turn a body's NaN or Infinity into null.
    data = exchange.model_dump(exclude_none=True)
    body = data["response"].get("body") or {}
    value = _sorted(data, body.get("json"))
    try:
        return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: valid JSON only when escaped
        return (json.dumps(value, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def load_exchange(raw: bytes) -> Exchange:
    """An exchange file read back, migrated from an older schema_version where it is one."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("an exchange file holds one JSON object")
    read_as = schema_version(data)
    exchange = Exchange.model_validate(migrate(data))
    exchange._read_as = read_as
    return exchange
