"""Ollama: /api/chat and /api/generate, streamed as NDJSON; counts on the `done` line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmtape.framing import FrameSigns
from llmtape.providers.base import (
    Provider,
    Usage,
    error_frame,
    generic_error,
    pick_int,
    usage_of,
)


def usage(payloads: Iterable[Any]) -> Usage | None:
    found: Usage | None = None
    for payload in payloads:
        if isinstance(payload, dict) and payload.get("done") is True:
            found = usage_of(
                pick_int(payload, "prompt_eval_count"), pick_int(payload, "eval_count")
            )
    return found


def final_frame(event: str, payload: Any, data: str) -> bool:
    return isinstance(payload, dict) and payload.get("done") is True


PROVIDER = Provider(
    name="ollama",
    base_url="http://127.0.0.1:11434",
    error_body=generic_error,
    usage=usage,
    frame_signs=FrameSigns(final=final_frame, error=error_frame),
)
