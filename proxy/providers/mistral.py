"""Mistral: the OpenAI chat shape (errors, usage, `data: [DONE]`) at api.mistral.ai."""

from __future__ import annotations

from tapeproxy.providers import openai
from tapeproxy.providers.base import Provider, ends_with

PROVIDER = Provider(
    name="mistral",
    ends_streams=ends_with("/chat/completions"),
    base_url="https://api.mistral.ai",
    hosts=("api.mistral.ai",),
    error_body=openai.error_body,
    tokens=openai.tokens,
    text=openai.text,
    text_fields=openai.text_fields,
    frame_signs=openai.FRAME_SIGNS,
    # Its gateway's request id and latencies (`x-kong-request-id`, `x-kong-proxy-latency`).
    volatile_headers=frozenset({"mistral-correlation-id"}),
    volatile_prefixes=("x-kong-",),
)
