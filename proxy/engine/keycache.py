"""Keys already worked out: a request whose key-relevant bytes were seen before gets the same
stored parts and key without parsing, masking and hashing its body again. Exact: the cache
key holds every input of `request_parts` and `request_key` that can differ between requests
(the match rules and the scrub rules are fixed for a server's life)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from tapeproxy.engine.keying import RequestParts

KEY_CACHE_BYTES = 4 * 1024 * 1024
KEY_CACHE_ENTRY_BYTES = 256 * 1024  # a larger body is keyed afresh each time
# Headers request_parts reads besides the ones the rules key on.
BODY_HEADERS = frozenset({b"content-type", b"content-encoding"})

RawKey = tuple[str, str, str, str, tuple[tuple[bytes, bytes], ...], bytes]


def raw_key(
    upstream: str,
    method: str,
    path: str,
    query: str,
    headers: Iterable[tuple[bytes, bytes]],
    body: bytes,
    wanted: frozenset[bytes],
) -> RawKey | None:
    """What the key of this request depends on, or None when it cannot be told exactly (a
    header name that is not ASCII lowercases differently as text than as bytes)."""
    relevant = []
    for name, value in headers:
        if not name.isascii():
            return None
        lower = name.lower()
        if lower in wanted or lower in BODY_HEADERS:
            relevant.append((lower, value))
    return (upstream, method, path, query, tuple(relevant), body)


class KeyCache:
    """Recent requests' parts and keys by their raw bytes, bounded by the bytes held."""

    def __init__(self, limit: int = KEY_CACHE_BYTES) -> None:
        self.limit = limit
        self.size = 0
        self._entries: OrderedDict[RawKey, tuple[RequestParts, str, int]] = OrderedDict()

    def get(self, raw: RawKey) -> tuple[RequestParts, str] | None:
        entry = self._entries.get(raw)
        if entry is None:
            return None
        self._entries.move_to_end(raw)
        return entry[0], entry[1]

    def put(self, raw: RawKey, parts: RequestParts, key: str) -> None:
        headers = sum(len(name) + len(value) for name, value in raw[4])
        size = len(raw[5]) + len(raw[3]) + len(raw[2]) + headers + 256
        if size > KEY_CACHE_ENTRY_BYTES or raw in self._entries:
            return
        self._entries[raw] = (parts, key, size)
        self.size += size
        while self.size > self.limit:
            _, (_, _, evicted) = self._entries.popitem(last=False)
            self.size -= evicted
