"""The bytes of a cache kept in the state folder (summaries, verify's record, the folder
walk's findings): a JSON object under the SHA-256 of its text, so that a torn, damaged or
edited file is never trusted, only rebuilt."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def seal(data: dict[str, Any]) -> bytes:
    body = json.dumps(data).encode()
    return hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def unseal(raw: bytes | None) -> dict[str, Any] | None:
    """The object sealed in `raw`; None when there is none, its digest does not match what
    follows it, or that is no JSON object (the caller checks its shape: a file with a
    matching digest may still have been written by a hostile hand)."""
    if raw is None:
        return None
    digest, _, body = raw.partition(b"\n")
    if digest.decode("ascii", "replace") != hashlib.sha256(body).hexdigest():
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
