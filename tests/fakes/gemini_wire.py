"""Google Gemini wire format: ``POST /v1beta/models/{model}:{action}``.

``generateContent`` answers one pretty-printed ``GenerateContentResponse``.
``streamGenerateContent?alt=sse`` answers ``data: {...}`` events framed with
CRLF (``\\r\\n\\r\\n``) like the real API, and no ``[DONE]`` sentinel; without
``alt=sse`` it streams a JSON array of the same objects. Every chunk carries
``usageMetadata``; the last one carries ``finishReason: "STOP"``.
"""

from __future__ import annotations

from .wire import (
    JsonObj,
    JsonOut,
    Out,
    StreamOut,
    WireRequest,
    all_text,
    count_tokens,
    dumps,
    last_dict,
    split_words,
)

GEMINI_JSON = "application/json; charset=UTF-8"
UNAVAILABLE: JsonObj = {
    "error": {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE",
    }
}


def _prompt(req: WireRequest) -> tuple[str, int]:
    contents = req.body.get("contents")
    parts = last_dict(contents).get("parts")
    first = parts[0] if isinstance(parts, list) and parts and isinstance(parts[0], dict) else {}
    text = first.get("text")
    prompt_tokens = count_tokens(all_text(contents, key="parts"))
    return (text if isinstance(text, str) else ""), prompt_tokens


def _chunk(req: WireRequest, text: str, tokens: tuple[int, int], last: bool) -> JsonObj:
    candidate: JsonObj = {"content": {"parts": [{"text": text}], "role": "model"}}
    if last:
        candidate["finishReason"] = "STOP"
    candidate["index"] = 0
    prompt, output = tokens
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": req.params.get("model", "gemini-2.0-flash"),
        "responseId": req.ident("", "gemini", length=22),
    }


def generate_content(req: WireRequest) -> Out:
    """Both Gemini actions; ``req.params`` holds ``model`` and ``action``."""
    prompt, prompt_tokens = _prompt(req)
    text = "echo: " + prompt
    if req.params.get("action") != "streamGenerateContent":
        return JsonOut(
            _chunk(req, text, (prompt_tokens, count_tokens(text)), True),
            indent=2,
            content_type=GEMINI_JSON,
        )
    pieces = split_words(text)
    chunks = [
        _chunk(
            req,
            piece,
            (prompt_tokens, count_tokens("".join(pieces[: i + 1]))),
            i == len(pieces) - 1,
        )
        for i, piece in enumerate(pieces)
    ]
    if req.query.get("alt") == "sse":
        frames = [b"data: " + dumps(c) + b"\r\n\r\n" for c in chunks]
        return StreamOut(
            frames, "text/event-stream", lambda _n: b"data: " + dumps(UNAVAILABLE) + b"\r\n\r\n"
        )
    frames = [(b"[" if i == 0 else b",\r\n") + dumps(c, indent=2) for i, c in enumerate(chunks)] + [
        b"]"
    ]
    return StreamOut(frames, GEMINI_JSON, _array_error)


def _array_error(index: int) -> bytes:
    return (b"[" if index == 0 else b",\r\n") + dumps(UNAVAILABLE, indent=2) + b"]"
