"""The provider table: the built-in upstreams, and `--upstream NAME=URL` on top of them."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.providers import anthropic, gemini, ollama, openai
from proxy.providers.base import Provider

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
