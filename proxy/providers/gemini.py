"""Gemini: generateContent and streamGenerateContent; the API key rides in `?key=`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens, tokens_of
from tapeproxy.providers.base import (
    Provider,
    Sockets,
    TextField,
    error_frame,
    pick_int,
    string_at,
    strings,
)

# Google's canonical status names, which its SDKs show beside the code.
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    422: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


# A Google-style streaming method at the end of a path: `:streamGenerateContent`.
_STREAM_METHOD = re.compile(r":stream[A-Za-z]*$")


def error_body(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {
        "error": {
            "code": status,
            "message": message,
            "status": GOOGLE_STATUS.get(status, "UNKNOWN"),
            "type": error_type,
        }
    }


def live_error(error_type: str, message: str, event_id: str) -> dict[str, Any]:
    """Gemini Live's error, as its REST errors are shaped (Live sends no event ids)."""
    return {"error": {"code": 400, "message": message, "status": error_type.upper()}}


def tokens(payloads: Iterable[Any]) -> Tokens | None:
    """`usageMetadata`: the prompt (cached content included), and as output the candidates
    plus the thinking tokens, which Google bills as output but counts apart."""
    found: Tokens | None = None
    for payload in payloads:
        block = payload.get("usageMetadata") if isinstance(payload, dict) else None
        if isinstance(block, dict):
            output = pick_int(block, "candidatesTokenCount", "responseTokenCount")  # Live
            thoughts = pick_int(block, "thoughtsTokenCount")
            if thoughts is not None:
                output = (output or 0) + thoughts
            found = (
                tokens_of(
                    pick_int(block, "promptTokenCount"),
                    output,
                    pick_int(block, "cachedContentTokenCount"),
                )
                or found
            )
    return found


def text(payloads: Iterable[Any]) -> str:
    """The parts of the first candidate, chunk after chunk."""
    pieces: list[str] = []
    for payload in payloads:
        candidates = payload.get("candidates") if isinstance(payload, dict) else None
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        content = first.get("content") if isinstance(first, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            pieces += strings(part.get("text")) if isinstance(part, dict) else []
    return "".join(pieces)


def text_fields(payload: Any) -> Iterator[TextField]:
    """Each candidate's text parts, chunk after chunk, as one text per candidate."""
    candidates = payload.get("candidates") if isinstance(payload, dict) else None
    for position, candidate in enumerate(candidates if isinstance(candidates, list) else []):
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        index = str(candidate.get("index", position)) if isinstance(candidate, dict) else ""
        for part in parts if isinstance(parts, list) else []:
            if string_at(part, "text"):
                yield ("gemini", index), part, "text"


def final_frame(event: str, payload: Any, data: str) -> bool:
    """The chunk whose candidate has a `finishReason` (no `[DONE]` follows it), or one whose
    prompt was blocked (`promptFeedback.blockReason`, and no candidate at all)."""
    if not isinstance(payload, dict):
        return False
    candidates = payload.get("candidates")
    feedback = payload.get("promptFeedback")
    blocked = isinstance(feedback, dict) and bool(feedback.get("blockReason"))
    return blocked or (
        isinstance(candidates, list)
        and any(isinstance(c, dict) and c.get("finishReason") for c in candidates)
    )


def stream_path(path: str) -> bool:
    return _STREAM_METHOD.search(path) is not None


PROVIDER = Provider(
    name="gemini",
    base_url="https://generativelanguage.googleapis.com",
    hosts=("generativelanguage.googleapis.com",),
    error_body=error_body,
    tokens=tokens,
    text=text,
    text_fields=text_fields,
    frame_signs=FrameSigns(final=final_frame, error=error_frame),
    stream_path=stream_path,
    ends_streams=stream_path,
    rate_limit_type="rate_limit_exceeded",
    overload=(503, "overloaded"),
    enum_fields=frozenset({"finishReason", "blockReason", "modality"}),
    sockets=Sockets(error_event=live_error, event_ids=frozenset()),
    omits_defaults=True,
)
