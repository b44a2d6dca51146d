"""Pure: an HTTP request -> its stored parts -> its canonical form under the match rules -> key."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.rules import MatchRules, parse_path, without_path
from tapeproxy.exchange.bodies import Payload, decode_content, request_payload
from tapeproxy.redaction.secrets import digest, is_secret_header, redact_payload, redact_query

if TYPE_CHECKING:
    from tapeproxy.exchange.model import StoredRequest

# Beyond 2**53 a float no longer holds every integer, so `1e300` and `10**300` stay apart.
_EXACT = 2**53


@dataclass(frozen=True)
class RequestParts:
    """What identifies a request: stored in each exchange, so keys can be recomputed."""

    method: str
    upstream: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body: Payload

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "upstream": self.upstream,
            "path": self.path,
            "query": [list(pair) for pair in self.query],
            "headers": dict(self.headers),
            "body": self.body.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestParts:
        return cls(
            method=data["method"],
            upstream=data["upstream"],
            path=data["path"],
            query=tuple((str(k), str(v)) for k, v in data.get("query") or ()),
            headers=tuple(sorted((data.get("headers") or {}).items())),
            body=Payload.from_dict(data.get("body")),
        )


class HeaderSource(Protocol):
    """Request headers by lowercase name: `items()` gives every pair as sent (repeats too),
    `get()` the first value of a name. A dict will do; so will starlette's Headers."""

    def items(self) -> Iterable[tuple[str, str]]: ...
    def get(self, name: str, default: str, /) -> str: ...


def request_parts(
    method: str,
    upstream: str,
    path: str,
    raw_query: str,
    headers: HeaderSource,
    body: bytes,
    rules: MatchRules,
) -> RequestParts:
    """Only what may be stored: no credentials, no telemetry, only the headers the rules key on."""
    wanted = rules.headers() | jsonrpc.KEY_HEADERS
    kept = sorted(
        (name.lower(), _stored_header(name, value))
        for name, value in headers.items()
        if name.lower() in wanted
    )
    query = redact_query(parse_qsl(raw_query, keep_blank_values=True))
    content_type = headers.get("content-type", "")
    # Keyed and stored as it was before compression; the upstream gets the bytes as sent.
    raw = decode_content(body, headers.get("content-encoding", ""))
    return RequestParts(
        method=method.upper(),
        upstream=upstream,
        path=path,
        # By name only: repeated parameters keep their order (`ids=1&ids=2` is not `ids=2&ids=1`).
        query=tuple(sorted(query, key=lambda pair: pair[0])),
        headers=tuple(kept),
        body=redact_payload(request_payload(raw, content_type), content_type),
    )


def _stored_header(name: str, value: str) -> str:
    """A key header's value as stored. One that looks like a credential (a rule may key on
    `x-session-id`, or on `authorization` to tell tenants apart) keys by its digest."""
    value = value.strip()
    return digest(value) if is_secret_header(name) else value


def integral_numbers(value: Any) -> Any:
    """`value` with every finite float that holds an integer written as that integer: Python
    sends `temperature=1.0` where JavaScript sends `1`, and both are the same request."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and -_EXACT <= value <= _EXACT:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: integral_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral_numbers(item) for item in value]
    return value


def redacted(parts: RequestParts) -> RequestParts:
    """Stored parts with every credential today's filter knows of masked: a recording made
    before a name counted as a credential may still hold one. The content type is not
    stored, so a form or multipart body is told by its shape."""
    return replace(
        parts, query=tuple(redact_query(parts.query)), body=redact_payload(parts.body, "")
    )


def stored_request(request: StoredRequest) -> RequestParts:
    """A recorded request as parts, masked by today's filter: the one way recordings are read
    back (a request is masked once, as it comes in; an older build may have stored one
    unmasked)."""
    return redacted(RequestParts.from_dict(request.model_dump()))


def canonical(parts: RequestParts, rules: MatchRules) -> RequestParts:
    """The parts with the ignored fields taken out: what the key is made of. `parts` come
    masked, from request_parts or stored_request."""
    body = parts.body
    if body.kind == "json":
        value = body.value
        for path in rules.ignore_body:
            value = without_path(value, parse_path(path))
        body = Payload("json", integral_numbers(jsonrpc.key_form(value)))
    wanted = rules.headers() | jsonrpc.KEY_HEADERS
    return replace(
        parts,
        query=tuple(pair for pair in parts.query if pair[0].lower() not in rules.ignore_query),
        headers=tuple(pair for pair in parts.headers if pair[0] in wanted),
        body=body,
    )


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(parts: RequestParts, rules: MatchRules) -> str:
    """SHA-256 of the canonical request: the content address of its exchange file."""
    text = canonical_json(canonical(parts, rules).to_dict())
    # surrogatepass: a lone surrogate escape (`"\ud83d"`, from a string cut mid-emoji) is
    # valid JSON and must key like any other string.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
