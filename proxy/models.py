"""The exchange file on disk: its pydantic model, SCHEMA_VERSION, and its exact byte layout."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Outcome(StrEnum):
    COMPLETE = "complete"
    FAILURE_STATUS = "failure_status"  # a 429 or 5xx, kept only with --record-failures
    UPSTREAM_CUT = "upstream_cut"  # the stream ended early, kept only with --record-failures
    STREAM_ERROR = "stream_error"  # an error event mid-stream, kept only with --record-failures


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


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older file up to SCHEMA_VERSION (one convert_N_to_N+1 step per version)."""
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {version!r} is not supported (this llmtape reads {SCHEMA_VERSION})"
        )
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
    return Exchange.model_validate(migrate(json.loads(raw)))
