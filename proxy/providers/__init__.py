"""The provider table: the built-in upstreams, and `--upstream NAME=URL` on top of them; the
provider a bare `/v1` request goes to; the one lookup of each upstream's match rules."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.rules import MatchRules, build_rules
from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.providers import anthropic, azure, bedrock, gemini, mistral, ollama, openai, vertex
from tapeproxy.providers.base import Provider, TextField

BUILTIN: Mapping[str, Provider] = {
    p.name: p
    for p in (
        openai.PROVIDER,
        anthropic.PROVIDER,
        gemini.PROVIDER,
        ollama.PROVIDER,
        mistral.PROVIDER,
        azure.PROVIDER,
        bedrock.PROVIDER,
        vertex.PROVIDER,
    )
}
# Where a bare `/v1` request goes when no built-in claims it.
BARE_V1_DEFAULT = "openai"


def stream_text_fields(payload: Any) -> Iterator[TextField]:
    """The text fields of a stream payload in any built-in dialect: a gateway may speak any
    of them, and a frame's shape tells its dialect (`tapeproxy redact` has no upstream table)."""
    # Each reader once, each field once: a cloud reads its models' own dialects too (Vertex
    # Gemini's and Anthropic's), so two readers may find one field.
    readers = {provider.text_fields: None for provider in BUILTIN.values()}
    seen = set()
    for reader in readers:
        for found in reader(payload):
            channel, holder, name = found
            if (channel, id(holder), name) not in seen:
                seen.add((channel, id(holder), name))
                yield found


def generic(name: str, url: str) -> Provider:
    """An upstream of the user's. It may be any API (a JSON-RPC one, an MCP server), or a
    gateway speaking any built-in dialect: it knows every built-in's stream frames, streaming
    paths and volatile headers, and the frame that answers a JSON-RPC request."""
    builtins = BUILTIN.values()
    return Provider(
        name=name,
        base_url=url.rstrip("/"),
        frame_signs=jsonrpc.frame_signs(FrameSigns.union(p.frame_signs for p in builtins)),
        volatile_headers=frozenset().union(*(p.volatile_headers for p in builtins)),
        volatile_prefixes=tuple(x for p in builtins for x in p.volatile_prefixes),
        stream_path=lambda path: any(p.stream_path(path) for p in builtins),
    )


def provider_table(overrides: Mapping[str, str]) -> dict[str, Provider]:
    """Built-ins with their URLs overridden, plus generic upstreams for new names."""
    table = dict(BUILTIN)
    for name, url in overrides.items():
        known = table.get(name)
        table[name] = known.with_url(url) if known is not None else generic(name, url)
    return table


def bare_v1(headers: Mapping[str, str], providers: Mapping[str, Provider]) -> Provider:
    """The upstream of a `/v1/...` request with no upstream prefix: the first built-in that
    claims it, else BARE_V1_DEFAULT (with the URL `--upstream` may have given it)."""
    claimed = (name for name, p in BUILTIN.items() if p.claims_bare_v1(headers))
    return providers[next(claimed, BARE_V1_DEFAULT)]


def default_rules(upstream: str) -> MatchRules:
    """The provider's own rules, before any `--ignore`: none for an upstream of the user's."""
    provider = BUILTIN.get(upstream)
    return provider.rules if provider is not None else MatchRules()


@dataclass(frozen=True)
class Rulebook:
    """Each upstream's match rules: its provider's defaults plus the `--ignore` rules that name
    it or `*`. An upstream the command was not told about (a cassette tool run without
    serve's `--upstream`) still gets the `*` rules and the rules naming it."""

    table: Mapping[str, MatchRules]
    specs: tuple[str, ...] = ()

    @classmethod
    def build(cls, providers: Mapping[str, Provider], specs: Iterable[str]) -> Rulebook:
        specs = tuple(specs)
        return cls(
            {name: build_rules(p.rules, name, specs) for name, p in providers.items()}, specs
        )

    def for_upstream(self, name: str) -> MatchRules:
        found = self.table.get(name)
        return found if found is not None else build_rules(default_rules(name), name, self.specs)
