"""Ollama wire format (``POST /api/chat`` and ``POST /api/generate``).

``stream`` defaults to true: the answer is NDJSON (``application/x-ndjson``),
one object per line, the last with ``"done": true``, ``done_reason`` and the
``prompt_eval_count``/``eval_count`` counters. ``"stream": false`` answers one
JSON object holding the whole text and the counters.
"""

from __future__ import annotations

from collections.abc import Callable

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

CREATED_AT = "2023-11-14T22:13:20.000000Z"
NDJSON = "application/x-ndjson"
OVERLOADED: JsonObj = {"error": "server busy, please try again. maximum pending requests exceeded"}


def _final(prompt_tokens: int, eval_tokens: int) -> JsonObj:
    return {
        "done_reason": "stop",
        "done": True,
        "total_duration": 123456789,
        "load_duration": 1234567,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": 2345678,
        "eval_count": eval_tokens,
        "eval_duration": 34567890,
    }


def _answer(
    req: WireRequest, text: str, prompt_tokens: int, piece: Callable[[str], JsonObj], extra: JsonObj
) -> Out:
    model = req.str_field("model", "llama3.2")
    head = {"model": model, "created_at": CREATED_AT}
    final = {**head, **piece(""), **_final(prompt_tokens, count_tokens(text)), **extra}
    if req.body.get("stream", True) is False:
        return JsonOut({**final, **piece(text)}, content_type="application/json; charset=utf-8")
    lines = [{**head, **piece(p), "done": False} for p in split_words(text)] + [final]
    return StreamOut(
        [dumps(line) + b"\n" for line in lines], NDJSON, lambda _n: dumps(OVERLOADED) + b"\n"
    )


def chat(req: WireRequest) -> Out:
    """``POST /api/chat``: echo the last message."""
    messages = req.body.get("messages")
    text = "echo: " + str(last_dict(messages).get("content") or "")
    return _answer(req, text, count_tokens(all_text(messages)), _chat_piece, {})


def _chat_piece(text: str) -> JsonObj:
    return {"message": {"role": "assistant", "content": text}}


def generate(req: WireRequest) -> Out:
    """``POST /api/generate``: echo the prompt; the final object carries a ``context``."""
    prompt = req.str_field("prompt", "")
    context = {"context": [1, 2, 3, count_tokens(prompt)]}
    return _answer(req, "echo: " + prompt, count_tokens(prompt), _generate_piece, context)


def _generate_piece(text: str) -> JsonObj:
    return {"response": text}
