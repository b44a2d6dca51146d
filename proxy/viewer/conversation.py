"""An exchange read as a conversation: the request's system, user and assistant messages with
their tool calls, tool results and images, then the answer's, whatever the dialect (OpenAI
chat and Responses, Anthropic, Gemini, Ollama). Pure: values in, values out; nothing here
escapes (the templates do) and no image is fetched (only inline ones are shown)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange

# Image types a browser shows as pictures that can hold no script.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# A picture that can hold script: served only under a policy that runs none (viewer/app.py).
SVG = "image/svg+xml"


@dataclass(frozen=True)
class Part:
    """One piece of a message. `kind`: text, tool_call, tool_result, image, link, data."""

    kind: str
    text: str = ""
    name: str = ""  # a tool's name, an image's media type
    image: int = -1  # for an inline image: its index among the exchange's images
    size: int = -1  # where a page shows the text cut: the whole text's characters
    whole: str = ""  # where cut: the part's name for the whole text (viewer/parts.py)


@dataclass(frozen=True)
class Message:
    role: str
    parts: list[Part] = field(default_factory=list)


@dataclass(frozen=True)
class Image:
    media_type: str
    data: str  # base64


@dataclass
class Reader:
    """Collects the images met while reading messages, so a page can link each one."""

    images: list[Image] = field(default_factory=list)

    def messages(self, body: Any) -> list[Message]:
        """The request's conversation, the system prompt first."""
        if not isinstance(body, dict):
            return [Message("request", [self.part(body)])] if body is not None else []
        found: list[Message] = []
        for name in ("system", "instructions", "systemInstruction"):
            if body.get(name):
                found.append(Message("system", self.parts(body[name])))
        for name in ("messages", "input", "contents"):
            value = body.get(name)
            if isinstance(value, str):
                found.append(Message("user", [Part("text", value)]))
            elif isinstance(value, list):
                found += [self.message(item) for item in value]
        if isinstance(body.get("prompt"), str):
            found.append(Message("user", [Part("text", body["prompt"])]))
        return found

    def message(self, item: Any) -> Message:
        if not isinstance(item, dict):
            return Message("user", [self.part(item)])
        role = str(item.get("role") or item.get("type") or "message")
        if item.get("type") in ("function_call", "function_call_output"):
            return Message(
                "assistant" if item["type"] == "function_call" else "tool", [self.part(item)]
            )
        content = item.get("content", item.get("parts"))
        parts = self.parts(content) if content is not None else []
        calls = item.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            parts.append(self.part(call))
        if role == "tool" and parts and parts[0].kind == "text":
            parts[0] = Part("tool_result", parts[0].text, str(item.get("tool_call_id", "")))
        return Message(role, parts)

    def parts(self, content: Any) -> list[Part]:
        if isinstance(content, list):
            return [self.part(block) for block in content]
        if isinstance(content, dict) and "parts" in content:  # Gemini's systemInstruction
            return self.parts(content["parts"])
        return [self.part(content)]

    def part(self, block: Any) -> Part:
        if isinstance(block, str):
            return Part("text", block)
        if not isinstance(block, dict):
            return Part("data", _dumped(block))
        kind = block.get("type")
        if isinstance(block.get("text"), str) and kind in (
            None,
            "text",
            "input_text",
            "output_text",
        ):
            return Part("text", block["text"])
        call = _tool_call(block)
        if call is not None:
            return call
        result = _tool_result(block)
        if result is not None:
            return Part("tool_result", *result)
        return self.image(block) or Part("data", _dumped(block))

    def image(self, block: dict[str, Any]) -> Part | None:
        """An inline image (kept, to be shown from this page's own host), or a link to one
        elsewhere (shown as text: the page loads nothing from another host)."""
        source = block.get("source") or block.get("inlineData") or block.get("inline_data")
        if isinstance(source, dict) and isinstance(source.get("data"), str):
            media = source.get("media_type") or source.get("mimeType") or source.get("mime_type")
            return self.keep(str(media or ""), source["data"])
        url = block.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str):
            return None
        if url[:5].lower() == "data:":
            return self.data_url(url)
        return Part("link", url, "image")

    def data_url(self, url: str) -> Part:
        """An inline `data:` image, read as a browser reads it (the fetch standard): base64
        when the last parameter is `base64` in any case (its text percent-decoded, white
        space dropped), else percent-encoded bytes (as an SVG often is); its media type
        without its parameters (`;charset=utf-8`), lower case."""
        head, _, data = url.partition(",")
        params = [param.strip().lower() for param in head[5:].split(";")]
        if len(params) > 1 and params[-1] == "base64":
            return self.keep(params[0], "".join(unquote(data).split()))
        return self.keep(params[0], base64.b64encode(unquote_to_bytes(data)).decode("ascii"))

    def keep(self, media_type: str, data: str) -> Part:
        self.images.append(Image(media_type, data))
        return Part("image", "", media_type, len(self.images) - 1)


def _tool_call(block: dict[str, Any]) -> Part | None:
    if block.get("type") == "tool_use":
        return Part("tool_call", _dumped(block.get("input")), str(block.get("name", "")))
    function = block.get("function") or block.get("functionCall")
    if isinstance(function, dict):
        arguments = function.get("arguments", function.get("args"))
        shown = arguments if isinstance(arguments, str) else _dumped(arguments)
        return Part("tool_call", shown, str(function.get("name", "")))
    if block.get("type") == "function_call":
        return Part("tool_call", str(block.get("arguments", "")), str(block.get("name", "")))
    return None


def _tool_result(block: dict[str, Any]) -> tuple[str, str] | None:
    if block.get("type") == "tool_result":
        content = block.get("content")
        return _flat(content), str(block.get("tool_use_id", ""))
    if block.get("type") == "function_call_output":
        return _flat(block.get("output")), str(block.get("call_id", ""))
    response = block.get("functionResponse")
    if isinstance(response, dict):
        return _dumped(response.get("response")), str(response.get("name", ""))
    return None


def _flat(content: Any) -> str:
    """A tool result's content as text: its text blocks joined, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and isinstance(b.get("text"), str) for b in content
    ):
        return "\n".join(b["text"] for b in content)
    return _dumped(content)


def _dumped(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def answer_messages(
    exchange: Exchange, reader: Reader, decoded: list[Any] | None = None
) -> list[Message]:
    """What the answer says as messages: a whole JSON answer's message, content or output;
    a stream's text joined (its tool calls are in its frames). `decoded`: its payloads,
    where the caller has them (a stream's frames are slow to decode twice)."""
    payloads = answers.payloads(exchange) if decoded is None else decoded
    if exchange.response.frames is None and len(payloads) == 1:
        found = _answer_of(payloads[0], reader)
        if found:
            return found
    text = answers.text(exchange, payloads)
    parts = ([Part("text", text)] if text else []) + stream_tool_calls(payloads)
    return [Message("assistant", parts)] if parts else []


def mcp_tool_call(
    exchange: Exchange, decoded: list[Any] | None = None
) -> tuple[list[Message], list[Message]] | None:
    """An MCP tool call as a conversation: the call (the tool's name and arguments), then the
    answer, its result; None for any other exchange."""
    call = answers.tool_call(exchange, decoded)
    if call is None:
        return None
    name = str(call["name"])
    asked = Message("tool call", [Part("tool_call", _dumped(call["arguments"]), name)])
    result = call["result"] if call["result"] is not None else "(no result recorded)"
    return [asked], [Message("tool", [Part("tool_result", str(result), name)])]


def stream_tool_calls(payloads: list[Any]) -> list[Part]:
    """The tool calls a stream made, their arguments joined from its pieces: Anthropic's
    `tool_use` blocks (`input_json_delta`), OpenAI chat's `delta.tool_calls` by index."""
    names: dict[tuple[int, int], str] = {}
    pieces: dict[tuple[int, int], list[str]] = {}
    for payload in payloads:
        for where, name, piece in _call_pieces(payload):
            if name:
                names[where] = name
            pieces.setdefault(where, []).append(piece)
    return [Part("tool_call", "".join(pieces[w]), names.get(w, "")) for w in sorted(pieces)]


def _call_pieces(payload: Any) -> list[tuple[tuple[int, int], str, str]]:
    """(choice, index), the tool's name (when this piece gives it), a piece of arguments."""
    if not isinstance(payload, dict):
        return []
    index = payload.get("index")
    block, delta = payload.get("content_block"), payload.get("delta")
    if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(index, int):
        return [((0, index), str(block.get("name", "")), "")]
    if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
        return [
            ((0, index if isinstance(index, int) else 0), "", str(delta.get("partial_json", "")))
        ]
    found = []
    choices = payload.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            where = (_index(choice), _index(call))
            found.append((where, str(function.get("name") or ""), _text(arguments)))
    return found


def _index(item: dict[str, Any]) -> int:
    """A choice's or a tool call's `index`; 0 when it has none that is a number."""
    index = item.get("index")
    return index if isinstance(index, int) else 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else _dumped(value))


def _answer_of(payload: Any, reader: Reader) -> list[Message]:
    if not isinstance(payload, dict):
        return []
    if isinstance(payload.get("choices"), list):  # OpenAI chat
        held = [c.get("message") for c in payload["choices"] if isinstance(c, dict)]
        return [reader.message(m) for m in held if isinstance(m, dict)]
    if isinstance(payload.get("content"), list):  # Anthropic
        return [Message("assistant", reader.parts(payload["content"]))]
    if isinstance(payload.get("output"), list):  # Responses
        return [reader.message(item) for item in payload["output"]]
    if isinstance(payload.get("candidates"), list):  # Gemini
        held = [c.get("content") for c in payload["candidates"] if isinstance(c, dict)]
        return [reader.message(m) for m in held if isinstance(m, dict)]
    if isinstance(payload.get("message"), dict):  # Ollama chat
        return [reader.message(payload["message"])]
    return []
