"""HAR 1.2, both ways: a HAR file's entries (browsers, mitmproxy, Polly.JS, Charles) read as
`Whole`s to import, and a cassette written as HAR: a stream as its joined body, its frames
and what else the file needs to come back byte for byte kept in a `_tapeproxy` field."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from typing import IO, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from tapeproxy.engine.frames import message_of
from tapeproxy.exchange import eventframes
from tapeproxy.exchange.bodies import Payload, payload_bytes
from tapeproxy.exchange.model import Exchange, SocketFrame, StoredResponse
from tapeproxy.providers.base import Provider
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.importing import Skip, Whole
from tapeproxy.upstream.urls import RESERVED_NAMES, UPSTREAM_NAME

FIELD = "_tapeproxy"  # HAR 1.2 lets a writer add fields whose names start with `_`
MAX_MS = 2**31  # some 24 days: no answer a recording keeps lasts longer
EPOCH = "1970-01-01T00:00:00.000Z"  # no wall-clock time in an export: the same file each time


def read_har(raw: bytes) -> Iterator[Whole | str]:
    """Each entry of a HAR file, or why it cannot be imported; Skip when it is no HAR."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Skip(f"not readable JSON: {exc}") from exc
    entries = data.get("log", {}).get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise Skip("no HAR: it holds no `log.entries` list")
    for entry in entries:
        try:
            yield _whole(entry)
        except Skip as exc:
            yield exc.message
        except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
            yield f"not a HAR entry ({type(exc).__name__}: {exc})"


def _whole(entry: Mapping[str, Any]) -> Whole:
    request, response = entry["request"], entry["response"]
    url = str(request["url"])
    if not url.startswith(("http://", "https://")):
        raise Skip(f"not an HTTP request ({url[:40]})")
    status = int(response.get("status") or 0)
    if status <= 0:
        raise Skip("no answer came (status 0: blocked, failed or cancelled)")
    content = response.get("content") or {}
    if content.get("text") is None and int(content.get("size") or 0) > 0:
        raise Skip("its answer's content was not saved in the file")
    ours = entry.get(FIELD) or {}
    frames, upstream, end_ms = ours.get("frames"), ours.get("upstream"), ours.get("end_ms")
    if upstream is not None and not (
        isinstance(upstream, str)
        and UPSTREAM_NAME.fullmatch(upstream)
        and upstream not in RESERVED_NAMES
    ):  # (serve routes only a name it takes, so a recording under another is never found)
        raise ValueError(f"its {FIELD} upstream is {upstream!r}, not a name serve takes")
    return Whole(
        method=str(request["method"]),
        url=url,
        headers=_headers(request.get("headers")),
        body=_post_data(request.get("postData")),
        status=status,
        answer_headers=_headers(response.get("headers")),
        answer=_decoded(content.get("text"), content.get("encoding")),
        frames=None if frames is None else [(_ms(f["ms"]), _frame_bytes(f)) for f in frames],
        upstream=upstream,
        seq=ours.get("seq"),
        end_ms=None if end_ms is None else _ms(end_ms),
    )


def _ms(value: Any) -> int:
    """A time in an export's `_tapeproxy` field: whole milliseconds, as a recording keeps
    them (a file holding another is refused, not written where no reader takes it)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_MS:
        raise ValueError(f"{value!r} is not a time in milliseconds")
    return value


def _headers(headers: Any) -> list[tuple[str, str]]:
    return [(str(h["name"]), str(h["value"])) for h in headers or () if h["name"][:1] != ":"]


def _decoded(text: str | None, encoding: str | None) -> bytes:
    if text is None:
        return b""
    return base64.b64decode(text) if encoding == "base64" else text.encode("utf-8")


def _post_data(post: Mapping[str, Any] | None) -> bytes:
    if not post:
        return b""
    if post.get("text") is not None:
        return _decoded(post["text"], post.get("encoding") or post.get("_encoding"))
    params = [(str(p["name"]), str(p.get("value", ""))) for p in post.get("params") or ()]
    return urlencode(params).encode("utf-8")


def _frame_bytes(frame: Mapping[str, Any], dialect: str | None = None) -> bytes:
    """A frame's bytes on the wire (an eventstream message's from its readable text)."""
    if frame.get("text") is not None and dialect == "eventstream":
        return eventframes.wire(str(frame["text"]))
    if frame.get("text") is not None:
        return str(frame["text"]).encode("utf-8")
    return base64.b64decode(frame.get("base64") or "")


def _frames_out(response: StoredResponse) -> list[dict[str, Any]]:
    """A stream's frames as HAR keeps them: an eventstream's as the bytes they go as."""
    if response.dialect != "eventstream":
        return [f.model_dump(exclude_none=True) for f in response.frames or ()]
    return [
        {
            "ms": f.ms,
            "base64": base64.b64encode(_frame_bytes(f.model_dump(), "eventstream")).decode(),
        }
        for f in response.frames or ()
    ]


def write_har(
    store: CassetteStore, cassette: str, providers: Mapping[str, Provider], out: IO[str]
) -> int:
    """Write a cassette's recordings to `out` as a HAR 1.2 log, one recording read at a time
    (in recorded order; a request's recordings in ordinal order). How many."""
    places = _in_order(store, cassette)
    out.write('{"log": {"version": "1.2", "creator": {"name": "tapeproxy", "version": "')
    out.write(_version() + '"}, "entries": [')
    for count, (key, ordinal) in enumerate(places):
        entry = har_entry(store.read(cassette, key, ordinal), providers)
        out.write((",\n" if count else "\n") + json.dumps(entry, ensure_ascii=False, indent=1))
    out.write("\n]}}\n")
    return len(places)


def _in_order(store: CassetteStore, cassette: str) -> list[tuple[str, int]]:
    """By seq; where a request's recordings are out of ordinal order by seq (runs of an
    `auto` cassette each count from 0), they keep their slots in ordinal order, so an
    import numbers them as they were."""
    entries = store.entries(cassette)
    seqs = {
        (key, n): store.read(cassette, key, n).seq
        for key, ordinals in entries.items()
        for n in ordinals
    }
    order = sorted(seqs, key=lambda place: (seqs[place], place))
    slots: dict[str, list[int]] = {}
    for index, (key, _) in enumerate(order):
        slots.setdefault(key, []).append(index)
    for key, indexes in slots.items():
        for index, ordinal in zip(indexes, sorted(entries[key]), strict=True):
            order[index] = (key, ordinal)
    return order


def _version() -> str:
    from tapeproxy import __version__

    return __version__


def har_entry(exchange: Exchange, providers: Mapping[str, Provider]) -> dict[str, Any]:
    """One recording as a HAR entry, with what it needs to come back whole in `_tapeproxy`."""
    response = exchange.response
    ours: dict[str, Any] = {"upstream": exchange.request.upstream, "seq": exchange.seq}
    if response.frames is not None:
        ours["frames"] = _frames_out(response)
    if response.end_ms is not None:
        ours["end_ms"] = response.end_ms
    entry = {
        "startedDateTime": EPOCH,
        "time": 0,
        "request": _request(exchange, providers),
        "response": _response(exchange),
        "cache": {},
        "timings": {"send": 0, "wait": 0, "receive": 0},
        FIELD: ours,
    }
    if exchange.session is not None:  # Chrome DevTools' field for a WebSocket's messages
        entry["_webSocketMessages"] = [socket_message(f) for f in exchange.session.frames]
    return entry


def socket_message(frame: SocketFrame) -> dict[str, Any]:
    """One frame as DevTools writes it: sent or received, seconds from the start, opcode 1
    (text) or 2 (binary, its data base64)."""
    binary = frame.type == "binary"
    data = message_of(frame)
    if isinstance(data, bytes):
        data = base64.b64encode(data).decode("ascii")
    kind = "send" if frame.direction == "client" else "receive"
    return {"type": kind, "time": frame.ms / 1000, "opcode": 2 if binary else 1, "data": data}


def _request(exchange: Exchange, providers: Mapping[str, Provider]) -> dict[str, Any]:
    request = exchange.request
    known = providers.get(request.upstream)
    base = _public(known.base_url) if known is not None else f"https://{request.upstream}"
    query = f"?{urlencode(request.query)}" if request.query else ""
    headers = [{"name": k, "value": v} for k, v in request.headers.items()]
    sent = Payload.from_dict(request.body)
    har: dict[str, Any] = {
        "method": request.method,
        "url": base + request.path + query,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": headers,
        "queryString": [{"name": k, "value": v} for k, v in request.query],
        "headersSize": -1,
        "bodySize": 0,
    }
    if sent.kind != "empty":
        post = har["postData"] = _post(sent)
        har["bodySize"] = len(post["text"].encode("utf-8"))
        if sent.kind != "text":  # the kind it is read back as (a text body names none)
            headers.append({"name": "content-type", "value": post["mimeType"]})
    return har


def _public(url: str) -> str:
    """An upstream's URL without the user and password it may hold (`https://user:key@host`):
    the cassette never holds them, and neither does its export."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _response(exchange: Exchange) -> dict[str, Any]:
    response = exchange.response
    answer, content = _answer(exchange)
    pairs = [
        (k, one) for k, v in response.headers.items() for one in (v if isinstance(v, list) else [v])
    ]
    return {
        "status": response.status,
        "statusText": "",
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": [{"name": k, "value": v} for k, v in pairs],
        "content": {"size": len(answer), **content},
        "redirectURL": "",
        "headersSize": -1,
        "bodySize": len(answer),
    }


def _post(sent: Payload) -> dict[str, Any]:
    if sent.kind == "json":
        text = json.dumps(sent.value, separators=(",", ":"), ensure_ascii=False)
        return {"mimeType": "application/json", "text": text}
    if sent.kind == "text":
        return {"mimeType": "text/plain", "text": sent.value}
    return {"mimeType": "application/octet-stream", "text": sent.value, "_encoding": "base64"}


def _answer(exchange: Exchange) -> tuple[bytes, dict[str, Any]]:
    """The answer's bytes (a stream's joined) and its HAR content: text where it is UTF-8."""
    response = exchange.response
    if response.frames is not None:
        data = b"".join(_frame_bytes(f.model_dump(), response.dialect) for f in response.frames)
    else:
        data = payload_bytes(Payload.from_dict(response.body))
    headers = {k: v for k, v in response.headers.items() if isinstance(v, str)}
    content: dict[str, Any] = {"mimeType": headers.get("content-type", "")}
    try:
        content["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        content["text"], content["encoding"] = base64.b64encode(data).decode("ascii"), "base64"
    return data, content
