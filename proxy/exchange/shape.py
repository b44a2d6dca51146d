"""Pure: the shape of a recorded answer, never its text (for `tapeproxy drift`): its status and
content type, each JSON path with its types (arrays generalised: `choices[]`), the values of
enum-like fields, a stream's event grammar, an MCP server's tools and their input schemas."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tapeproxy.exchange.framing import Dialect, FrameSigns, frame_data, json_document
from tapeproxy.exchange.model import Frame, StoredResponse

# Fields whose values are a small closed set in every dialect: a value never seen before is
# news (warn), where another text or id is not. A provider adds its own (Provider.enum_fields).
ENUM_FIELDS = frozenset(
    {
        "object",
        "type",
        "role",
        "finish_reason",
        "stop_reason",
        "status",
        "code",
        "done_reason",
        "service_tier",
    }
)
# Fields whose content is a JSON schema (an MCP tool's): compared whole, as the tool's, not
# path by path (its property names are the tool's arguments).
SCHEMA_FIELDS = frozenset({"inputSchema", "outputSchema"})
MAX_DEPTH = 64  # deeper JSON is shaped down to here (a shape, not a copy)
MAX_CYCLE = 256  # longer event sequences have their runs collapsed only, not their cycles
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Shape:
    """What drift compares of one answer. `body`: empty, json, text, binary, or a stream's
    dialect; `paths`: JSON path -> the JSON types seen there; `enums`: path of an enum-like
    field -> the values seen; `events`: a stream's event types in order, runs and repeated
    cycles collapsed, keep-alives left out; `tools`: an MCP tools/list answer's tools, each
    name with its input schema as canonical JSON."""

    status: int
    content_type: str
    body: str
    paths: dict[str, frozenset[str]] = field(default_factory=dict)
    enums: dict[str, frozenset[Scalar]] = field(default_factory=dict)
    event_types: frozenset[str] = frozenset()
    events: tuple[str, ...] = ()
    tools: dict[str, str] | None = None


def json_type(value: Any) -> str:
    """A JSON value's type; integers and fractions are both `number` (1 and 1.5 are one field)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Walk:
    """Paths, types and enum values gathered over one or more JSON values."""

    def __init__(self, enum_fields: frozenset[str]) -> None:
        self.enum_fields = enum_fields
        self.paths: dict[str, set[str]] = {}
        self.enums: dict[str, set[Scalar]] = {}

    def add(self, value: Any, path: str, name: str = "", depth: int = 0) -> None:
        self.paths.setdefault(path, set()).add(json_type(value))
        if name in self.enum_fields and not isinstance(value, dict | list):
            self.enums.setdefault(path, set()).add(value)
        if depth >= MAX_DEPTH or name in SCHEMA_FIELDS:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                self.add(item, f"{path}.{key}" if path else str(key), str(key), depth + 1)
        elif isinstance(value, list):
            for item in value:
                self.add(item, f"{path}[]", name, depth + 1)

    def frozen(self) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[Scalar]]]:
        paths = {p: frozenset(t) for p, t in self.paths.items()}
        return paths, {p: frozenset(v) for p, v in self.enums.items()}


def media_type(content_type: str) -> str:
    """`application/json; charset=utf-8` -> `application/json`."""
    return content_type.partition(";")[0].strip().lower()


def response_content_type(response: StoredResponse) -> str:
    for name, value in response.headers.items():
        if name.lower() == "content-type":
            return media_type(value if isinstance(value, str) else value[0])
    return ""


def shape_of(
    response: StoredResponse, signs: FrameSigns, enum_fields: frozenset[str] = ENUM_FIELDS
) -> Shape:
    """The shape of a recorded (or just captured) answer: one function per kind of body."""
    status, kind = response.status, response_content_type(response)
    if response.frames is not None:
        dialect = response.dialect or "chunks"
        if dialect == "sse" or dialect == "ndjson":
            lines: Dialect = "sse" if dialect == "sse" else "ndjson"
            return _stream_shape(status, kind, lines, response.frames, signs, enum_fields)
        if dialect == "json":
            joined = "".join(_frame_text(f) for f in response.frames).encode()
            items = json_document(joined) or []
            return _items_shape(status, kind, "json-stream", items, enum_fields)
        return Shape(status, kind, dialect)
    return _body_shape(status, kind, response.body or {}, enum_fields)


def _body_shape(status: int, kind: str, body: dict[str, Any], enum_fields: frozenset[str]) -> Shape:
    """A whole body: JSON by its paths (a JSON body kept as text, its layout not reproducible,
    read as JSON all the same); other text and bytes by their kind alone."""
    if "json" in body:
        value: Any = body["json"]
    elif isinstance(body.get("text"), str):
        try:
            value = json.loads(body["text"])
        except (ValueError, RecursionError):
            return Shape(status, kind, "text")
    else:
        return Shape(status, kind, "binary" if "base64" in body else "empty")
    walk = _Walk(enum_fields)
    walk.add(value, "")
    paths, enums = walk.frozen()
    return Shape(status, kind, "json", paths, enums, tools=tools_of([value]))


def _items_shape(
    status: int, kind: str, body: str, items: list[Any], enum_fields: frozenset[str]
) -> Shape:
    """A streamed JSON document's items, each an event of type `message`."""
    walk = _Walk(enum_fields)
    for item in items:
        walk.add(item, "<message>")
    paths, enums = walk.frozen()
    events = ("message",) if items else ()
    return Shape(status, kind, body, paths, enums, frozenset(events), events, tools_of(items))


def _stream_shape(
    status: int,
    kind: str,
    dialect: Dialect,
    frames: Iterable[Frame],
    signs: FrameSigns,
    enum_fields: frozenset[str],
) -> Shape:
    """SSE events and NDJSON lines: each frame's event type (its `event:`, else its JSON's
    `type`, else a bare data line such as `[DONE]`, else `message`), its JSON's paths under
    `<type>`; the order of the types as a grammar. Nothing kept per frame (a stream of
    millions of small frames, within --max-record): runs collapsed and tools taken as they
    come."""
    walk = _Walk(enum_fields)
    order: list[str] = []
    seen: set[str] = set()
    tools: dict[str, str] | None = None
    for frame in frames:
        event, data = frame_data(dialect, _frame_text(frame))
        if data is None:
            continue  # a comment, a blank line: no event
        payload = _decoded(data)
        label = event_label(event, payload, data)
        if not signs.idle(event, payload, data):  # a keep-alive may come anywhere, or never
            seen.add(label)
            if not order or order[-1] != label:
                order.append(label)
        if payload is not None:
            walk.add(payload, f"<{label}>")
            listed = tools_of([payload])
            tools = tools if listed is None else {**(tools or {}), **listed}
    paths, enums = walk.frozen()
    return Shape(status, kind, dialect, paths, enums, frozenset(seen), collapse(order), tools)


def event_label(event: str, payload: Any, data: str) -> str:
    if event != "message":
        return event
    if isinstance(payload, dict) and isinstance(payload.get("type"), str):
        return str(payload["type"])
    if payload is None and data.strip():
        return data.strip()[:40]  # `[DONE]`
    return "message"


def collapse(labels: Iterable[str]) -> tuple[str, ...]:
    """The grammar of a sequence of event types: each run (`delta delta delta`) and each
    repeated cycle (`start delta stop start delta stop`) kept once, so frame and block counts
    never matter and `start (delta)+ stop` is `start delta stop`."""
    seq: list[str] = []
    for label in labels:
        if not seq or seq[-1] != label:
            seq.append(label)
    if len(seq) > MAX_CYCLE:
        return tuple(seq)
    changed = True
    while changed:
        changed = False
        for size in range(2, len(seq) // 2 + 1):
            at = 0
            while at + 2 * size <= len(seq):
                if seq[at : at + size] == seq[at + size : at + 2 * size]:
                    del seq[at + size : at + 2 * size]
                    changed = True
                else:
                    at += 1
    return tuple(seq)


def tools_of(payloads: Iterable[Any]) -> dict[str, str] | None:
    """The tools an MCP `tools/list` answer lists (a JSON-RPC result's `tools`), each name
    with its input schema as canonical JSON; None when no payload lists tools."""
    found: dict[str, str] | None = None
    for result in _results(payloads):
        tools = result.get("tools")
        if not isinstance(tools, list):
            continue
        found = found if found is not None else {}
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                schema = json.dumps(tool.get("inputSchema"), sort_keys=True, separators=(",", ":"))
                found[tool["name"]] = schema
    return found


def _results(payloads: Iterable[Any]) -> Iterator[dict[str, Any]]:
    for payload in payloads:
        for message in payload if isinstance(payload, list) else [payload]:
            if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
                result = message.get("result")
                if isinstance(result, dict):
                    yield result


def _frame_text(frame: Frame) -> str:
    if frame.text is not None:
        return frame.text
    return base64.b64decode(frame.base64 or "").decode("utf-8", "replace")


def _decoded(data: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # nested past json's depth: no JSON, no crash
        return None
