"""Shared building blocks for the fake providers' wire formats.

The provider modules (``openai_wire``, ``anthropic_wire``, ``gemini_wire``,
``ollama_wire``) are pure functions from a :class:`WireRequest` to an
:data:`Out` (either a whole JSON body or a list of stream frames); the server
in ``upstream`` turns those into HTTP. Everything here is deterministic: ids are
derived from a hash of the request body and timestamps are constants.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

CREATED = 1700000000
"""The fixed Unix timestamp used for every ``created``-like field."""

JsonObj = dict[str, Any]


@dataclass(frozen=True)
class WireRequest:
    """A request as the wire builders see it."""

    body: JsonObj
    seed: str
    """sha256 hex digest of the raw request body: the source of every id."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Request headers, names lower-cased."""
    query: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    """Values captured from the path (e.g. the Gemini model name)."""

    def ident(self, prefix: str, salt: str = "", length: int = 12) -> str:
        """A stable id: ``prefix`` + hex digits derived from the body (and ``salt``)."""
        digest = self.seed
        if salt:
            digest = hashlib.sha256(f"{salt}:{self.seed}".encode()).hexdigest()
        return prefix + digest[:length]

    def str_field(self, name: str, default: str) -> str:
        """A string field of the JSON body, or ``default``."""
        value = self.body.get(name)
        return value if isinstance(value, str) else default


@dataclass(frozen=True)
class JsonOut:
    """A complete (non-streaming) JSON answer."""

    payload: Any
    status: int = 200
    indent: int | None = None
    content_type: str = "application/json"

    def encode(self) -> bytes:
        """The body bytes, pretty-printed when ``indent`` is set."""
        return dumps(self.payload, indent=self.indent)


@dataclass(frozen=True)
class StreamOut:
    """A streaming answer: frames written one by one, then the body ends."""

    frames: list[bytes]
    content_type: str
    error: Callable[[int], bytes]
    """Builds the in-band error frame sent instead of frame number N (its argument)."""


Out = JsonOut | StreamOut


def dumps(obj: Any, *, indent: int | None = None) -> bytes:
    """JSON bytes: compact (no spaces) by default, like the providers' streams."""
    if indent is None:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return json.dumps(obj, indent=indent, ensure_ascii=False).encode()


def sse(data: Any, *, event: str | None = None, eol: str = "\n") -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a str."""
    payload = data if isinstance(data, str) else dumps(data).decode()
    head = f"event: {event}{eol}" if event is not None else ""
    return f"{head}data: {payload}{eol}{eol}".encode()


def split_words(text: str) -> list[str]:
    """Split text into word pieces that join back to it ("echo: hi" -> ["echo:", " hi"])."""
    return re.findall(r"\s*\S+|\s+", text) or [""]


def split_in(text: str, parts: int) -> list[str]:
    """Split text into ``parts`` roughly equal, non-empty-when-possible pieces."""
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def count_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: one token per word, at least one."""
    return max(1, len(text.split()))


def text_of(content: Any) -> str:
    """Text of a message content: a string, or the text parts of a list joined by spaces."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
        return " ".join(texts)
    return ""


def last_dict(items: Any) -> JsonObj:
    """The last element of a list if it is a JSON object, else an empty dict."""
    if isinstance(items, list) and items and isinstance(items[-1], dict):
        return items[-1]
    return {}


def all_text(items: Any, key: str = "content") -> str:
    """The text of every message in a list, joined (used to count prompt tokens)."""
    if not isinstance(items, list):
        return text_of(items)
    return " ".join(text_of(m.get(key)) for m in items if isinstance(m, dict))
