"""The provider table: the built-in upstreams, and `--upstream NAME=URL` on top of them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from proxy.providers import anthropic, gemini, ollama, openai
from proxy.providers.base import Provider
from proxy.rules import MatchRules, build_rules

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


def rules_table(providers: Mapping[str, Provider], specs: Iterable[str]) -> dict[str, MatchRules]:
    """Each upstream's match rules: its provider's defaults plus the `--ignore` rules."""
    specs = tuple(specs)
    return {name: build_rules(p.rules, name, specs) for name, p in providers.items()}
