"""A request resolved (`Keyed`): its provider, cassette, mode, upstreams run live, match rules,
stored parts and key, worked out by the `Keyer`, which keeps the keys it worked out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.inbound import Inbound
from tapeproxy.engine.keycache import KeyCache, raw_key
from tapeproxy.engine.keying import HeaderSource, RequestParts, request_key, request_parts
from tapeproxy.engine.rules import MatchRules
from tapeproxy.engine.stats import Trace
from tapeproxy.engine.timing import TIMING_HEADER, parse_timing
from tapeproxy.errors import BadBody, ConfigError, UnknownUpstream
from tapeproxy.modes import Mode
from tapeproxy.providers import Rulebook
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.settings import Settings
from tapeproxy.store.names import check_cassette_name

LIVE_HEADER = "x-tapeproxy-live"  # upstreams that run live for one request (partial replay)


@dataclass
class Current:
    """The cassette and mode a request gets when it names none: switched by the control API."""

    cassette: str
    mode: Mode


@dataclass
class Keyed:
    """What one request resolved to. Built for every request, so not frozen (see Inbound)."""

    inbound: Inbound
    provider: Provider
    cassette: str
    mode: Mode
    live: frozenset[str]  # --live, plus this request's own
    rules: MatchRules
    parts: RequestParts
    key: str
    timing: float | None
    trace: Trace

    @property
    def runs_live(self) -> bool:
        return self.provider.name in self.live


def check_live(names: frozenset[str], providers: Mapping[str, Provider]) -> frozenset[str]:
    """`names` if each is an upstream: a typo must not quietly replay what was meant to run
    live."""
    unknown = sorted(names - set(providers))
    if unknown:
        raise ConfigError(
            f"{LIVE_HEADER}: no upstream named {', '.join(map(repr, unknown))}; known "
            f"upstreams: {', '.join(sorted(providers))}"
        )
    return names


class Keyer:
    """Resolves requests under the server's settings and match rules. Every override a
    request carries is checked here, before its run counts it, so a bad one uses up no
    recording."""

    def __init__(
        self,
        settings: Settings,
        providers: Mapping[str, Provider],
        rules: Rulebook,
        scrubber: Scrubber,
    ) -> None:
        self.providers = providers
        self.rules = rules
        self.scrubber = scrubber
        self.live = frozenset(settings.live)  # worked out once, not per request
        self.timing = parse_timing(settings.replay_timing)
        self.keys = KeyCache()
        self._wanted: dict[str, frozenset[bytes]] = {}  # key header names per upstream

    def key(self, inbound: Inbound, current: Current) -> Keyed:
        """What `inbound` is, under the server's `current` cassette and mode."""
        # Every override is checked before the run counts the request, so a bad one uses up
        # no recording.
        # The current cassette was checked when it was set (settings, PUT): only a header's is.
        cassette = check_cassette_name(inbound.cassette) if inbound.cassette else current.cassette
        live = (self.live | check_live(inbound.live, self.providers)) if inbound.live else self.live
        try:
            timing = parse_timing(inbound.timing) if inbound.timing else self.timing
        except ValueError as exc:
            raise ConfigError(f"{TIMING_HEADER}: {exc}") from exc
        provider = self.providers.get(inbound.upstream)
        if provider is None:
            raise UnknownUpstream(
                f"no upstream named {inbound.upstream!r}; known upstreams: "
                f"{', '.join(sorted(self.providers))}"
            )
        rules = self.rules.for_upstream(provider.name)
        parts, key = self._parts_and_key(inbound, provider.name, rules)
        mode = current.mode
        trace = Trace(mode.value, provider.name, parts.method, inbound.path, key)
        return Keyed(
            inbound,
            provider,
            cassette,
            mode,
            live,
            rules,
            parts,
            key,
            timing,
            trace,
        )

    def _parts_and_key(
        self, inbound: Inbound, upstream: str, rules: MatchRules
    ) -> tuple[RequestParts, str]:
        """The request's stored parts and key; worked out once per distinct request (a replay
        run asks the same few requests over and over)."""
        wanted = self._wanted.get(upstream)
        if wanted is None:
            wanted = self._wanted[upstream] = frozenset(
                name.encode("latin-1") for name in rules.headers() | jsonrpc.KEY_HEADERS
            )
        raw = raw_key(
            upstream,
            inbound.method,
            inbound.path,
            inbound.query,
            inbound.headers,
            inbound.body,
            wanted,
        )
        known = self.keys.get(raw) if raw is not None else None
        if known is not None:
            return known
        parts, key = parts_and_key(
            inbound.method,
            upstream,
            inbound.path,
            inbound.query,
            inbound.header_map,
            inbound.body,
            rules,
            self.scrubber,
        )
        if raw is not None:
            self.keys.put(raw, parts, key)
        return parts, key


def parts_and_key(
    method: str,
    upstream: str,
    path: str,
    query: str,
    headers: HeaderSource,
    body: bytes,
    rules: MatchRules,
    scrubber: Scrubber,
) -> tuple[RequestParts, str]:
    """A request's stored parts and key, as recording keys it: the one way from a request to
    its key (the server's requests, and those `tapeproxy import` reads from other formats)."""
    try:
        parts = request_parts(method, upstream, path, query, headers, body, rules)
        # Keyed as stored: scrubbed by the [redact] rules and the key formats, so a replay
        # with the same rules finds what `tapeproxy redact` or a recording with them wrote.
        parts = scrubber.request(parts)
        return parts, request_key(parts, rules)
    except RecursionError:
        raise BadBody(
            "the request body nests too deeply for tapeproxy to key and scrub it; "
            "nothing was forwarded or recorded"
        ) from None
