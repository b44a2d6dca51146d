"""Pure routing: a request path -> (provider, upstream path); the per-request header names
(the live one is the engine's: tapeproxy.engine.keyed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import unquote

from tapeproxy.errors import BadPath, UnknownUpstream
from tapeproxy.providers import bare_v1
from tapeproxy.providers.base import Provider

CASSETTE_HEADER = "x-tapeproxy-cassette"


def live_names(value: str) -> frozenset[str]:
    """The upstreams an `x-tapeproxy-live` header names."""
    return frozenset(n.strip().lower() for n in value.split(",") if n.strip())


def check_path(path: str) -> str:
    """`path` if it stays below its upstream's base path. A `..` segment is refused however
    it is spelled: percent-encoded once or twice (`%2e%2e`, `%252e%252e`), with `;params`
    (`..;`), or between encoded slashes (`..%2f..`); so is a backslash, which a server may
    read as a separator. The path then goes upstream byte for byte as it came."""
    if "%" not in path and "\\" not in path and ".." not in path:
        return path  # nothing to decode and nothing to refuse: the common case, checked fast
    decoded = path
    for _ in range(3):  # as many decodings as a chain of servers might apply
        decoded = unquote(decoded)
    if "\\" in decoded:
        raise BadPath(
            f"request path {path!r} holds a backslash, which some servers read as "
            "a path separator: send the path with / only"
        )
    if any(segment.split(";", 1)[0] == ".." for segment in decoded.split("/")):
        raise BadPath(
            f"request path {path!r} has a `..` segment, which could reach above the "
            "upstream's base path: send the path as the upstream should see it"
        )
    return path


def text_headers(headers: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    """Raw headers by name as latin-1 text; of a repeated one, the first."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(headers)}


def resolve(
    path: str, headers: Sequence[tuple[bytes, bytes]], providers: Mapping[str, Provider]
) -> tuple[Provider, str]:
    """`/openai/v1/chat/completions` -> (openai, `/v1/chat/completions`). A bare `/v1/...` goes
    to the built-in that claims it (anthropic when the request carries `anthropic-version`),
    else to openai. Only then are the raw `headers` read (and decoded)."""
    first, _, rest = path.lstrip("/").partition("/")
    if first == "__tapeproxy":
        raise UnknownUpstream(
            f"no control endpoint {path!r}; there are /__tapeproxy/health, /__tapeproxy/stats, "
            "/__tapeproxy/misses and /__tapeproxy/cassette"
        )
    if first in providers:
        return providers[first], check_path("/" + rest)
    if first == "v1":
        return bare_v1(text_headers(headers), providers), check_path(path)
    raise UnknownUpstream(
        f"no upstream named {first!r} in path {path!r}; known upstreams: "
        f"{', '.join(sorted(providers))} (route as /<upstream>/<path>, or add one with "
        f"--upstream NAME=URL)"
    )
