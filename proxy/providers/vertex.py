"""Google Vertex AI: Gemini (`:generateContent`, `:streamGenerateContent`, SSE or a JSON array)
and Anthropic on Vertex (`:rawPredict`, `:streamRawPredict`), each in its own shapes; Google's
error shape. The project and region are in the path, so in the key."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.providers import anthropic, gemini
from tapeproxy.providers.base import Provider, TextField


def tokens(payloads: Iterable[Any]) -> Tokens | None:
    items = list(payloads)
    return gemini.tokens(items) or anthropic.tokens(items)


def text(payloads: Iterable[Any]) -> str:
    items = list(payloads)
    return gemini.text(items) or anthropic.text(items)


def text_fields(payload: Any) -> Iterator[TextField]:
    yield from gemini.text_fields(payload)
    yield from anthropic.text_fields(payload)


PROVIDER = Provider(
    name="vertex",
    base_url="https://us-central1-aiplatform.googleapis.com",
    hosts=("*-aiplatform.googleapis.com", "aiplatform.googleapis.com"),
    error_body=gemini.error_body,
    tokens=tokens,
    text=text,
    text_fields=text_fields,
    frame_signs=FrameSigns.union([gemini.PROVIDER.frame_signs, anthropic.PROVIDER.frame_signs]),
    volatile_prefixes=("anthropic-ratelimit-",),
    stream_path=gemini.stream_path,  # `:streamGenerateContent` and `:streamRawPredict` alike
    ends_streams=gemini.stream_path,
    rate_limit_type="rate_limit_exceeded",
    overload=(503, "overloaded"),
)
