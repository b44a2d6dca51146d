"""The provider table: the built-in upstreams, and `--upstream NAME=URL` on top of them; and the
one lookup of each upstream's match rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from llmtape.providers import anthropic, gemini, ollama, openai
from llmtape.providers.base import Provider
from llmtape.rules import MatchRules, build_rules

BUILTIN: Mapping[str, Provider] = {
    p.name: p for p in (openai.PROVIDER, anthropic.PROVIDER, gemini.PROVIDER, ollama.PROVIDER)
}


def provider_table(overrides: Mapping[str, str]) -> dict[str, Provider]:
    """Built-ins with their URLs overridden, plus generic upstreams for new names."""
    table = dict(BUILTIN)
    for name, url in overrides.items():
        base = table.get(name) or Provider(name=name, base_url=url)
        table[name] = base.with_url(url)
    return table


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
