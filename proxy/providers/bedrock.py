"""AWS Bedrock runtime: Converse and InvokeModel, streamed as eventstream messages; SigV4
headers are credentials; errors as `{"message"}` with their type, throttling as AWS sends it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tapeproxy.engine.rules import MatchRules
from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens, tokens_of
from tapeproxy.providers import anthropic
from tapeproxy.providers.base import (
    Provider,
    TextField,
    ends_with,
    error_frame,
    pick_int,
    string_at,
    strings,
)

STREAMS = ("/converse-stream", "/invoke-with-response-stream")
METRICS = "amazon-bedrock-invocationMetrics"


def error_body(error_type: str, message: str, status: int) -> dict[str, Any]:
    """AWS's JSON error: botocore reads its code from `__type` (or `x-amzn-ErrorType`)."""
    return {"__type": error_type, "message": message}


def tokens(payloads: Iterable[Any]) -> Tokens | None:
    """Converse's `usage` (a stream's `metadata` event), an InvokeModel stream's last chunk's
    `amazon-bedrock-invocationMetrics`; else the model's own (an InvokeModel body)."""
    items = list(payloads)
    found: Tokens | None = None
    for payload in items:
        if not isinstance(payload, dict):
            continue
        usage, metrics = payload.get("usage"), payload.get(METRICS)
        found = (
            tokens_of(
                pick_int(usage, "inputTokens"),
                pick_int(usage, "outputTokens"),
                pick_int(usage, "cacheReadInputTokens"),
            )
            or tokens_of(
                pick_int(metrics, "inputTokenCount"), pick_int(metrics, "outputTokenCount")
            )
            or found
        )
    return found or anthropic.tokens(items)


def text(payloads: Iterable[Any]) -> str:
    """Converse's message text or a stream's `delta.text`; else the model's own."""
    items = list(payloads)
    pieces: list[str] = []
    for payload in items:
        if not isinstance(payload, dict):
            continue
        delta = payload.get("delta")
        if isinstance(delta, dict) and "contentBlockIndex" in payload:
            pieces += strings(delta.get("text"))
        output = payload.get("output")
        message = output.get("message") if isinstance(output, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            pieces += strings(block.get("text")) if isinstance(block, dict) else []
    return "".join(pieces) or anthropic.text(items)


def text_fields(payload: Any) -> Iterator[TextField]:
    """A Converse stream's `delta.text` per content block; an InvokeModel chunk's model's."""
    delta = payload.get("delta") if isinstance(payload, dict) else None
    if isinstance(delta, dict) and "contentBlockIndex" in payload:
        if string_at(delta, "text"):
            yield ("bedrock", str(payload.get("contentBlockIndex"))), delta, "text"
        return
    yield from anthropic.text_fields(payload)


def final_frame(event: str, payload: Any, data: str) -> bool:
    """A Converse stream's `metadata` event; an InvokeModel chunk with the invocation's
    metrics (Bedrock adds them to the model's last chunk)."""
    return event == "metadata" or (isinstance(payload, dict) and METRICS in payload)


def stream_error(event: str, payload: Any, data: str) -> bool:
    """An exception message: its `:exception-type` (modelStreamErrorException, ...); the
    common error frames too."""
    return event.endswith("Exception") or error_frame(event, payload, data)


def limit_headers(retry_after: int) -> list[tuple[str, str]]:
    """How AWS names a 429: botocore raises it as ThrottlingException, and retries it."""
    return [("x-amzn-errortype", "ThrottlingException")]


PROVIDER = Provider(
    name="bedrock",
    base_url="https://bedrock-runtime.us-east-1.amazonaws.com",
    hosts=("bedrock-runtime.*.amazonaws.com", "bedrock-runtime-fips.*.amazonaws.com"),
    rules=MatchRules(
        key_headers=frozenset(
            {
                "x-amzn-bedrock-guardrailidentifier",
                "x-amzn-bedrock-guardrailversion",
                "x-amzn-bedrock-trace",
                "x-amzn-bedrock-performanceconfig-latency",
            }
        ),
    ),
    error_body=error_body,
    tokens=tokens,
    text=text,
    text_fields=text_fields,
    frame_signs=FrameSigns(final=final_frame, error=stream_error),
    volatile_headers=frozenset({"x-amzn-bedrock-invocation-latency"}),
    stream_path=ends_with(*STREAMS),
    ends_streams=ends_with(*STREAMS),
    rate_limit_type="ThrottlingException",
    server_error_type="InternalServerException",
    overload=(503, "ServiceUnavailableException"),
    limit_headers=limit_headers,
)
