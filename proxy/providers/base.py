"""What a provider is to tapeproxy: where it lives, what keys a request, how its answers look."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tapeproxy.engine.keying import RequestParts
from tapeproxy.engine.rules import MatchRules
from tapeproxy.exchange.framing import FrameSigns
from tapeproxy.exchange.tokens import Tokens

Usage = dict[str, int]

# Response headers any HTTP server, CDN or gateway sends that differ on every call: kept out
# of the file so a re-record shows no diff. A provider adds its own on top.
HTTP_VOLATILE_HEADERS = frozenset(
    {
        "date",
        "server",
        "x-request-id",
        "request-id",
        "cf-ray",
        "cf-cache-status",
        "alt-svc",
        "via",
        "x-envoy-upstream-service-time",
        "server-timing",
        "x-cloud-trace-context",
        "retry-after",
        "report-to",
        "nel",
        "age",
        "expires",
        "etag",
        "last-modified",
        "x-amzn-requestid",
        "x-amzn-trace-id",
    }
)
# `x-ratelimit-*` is the rate-limit convention of most HTTP APIs; `x-tapeproxy-*` are our own.
HTTP_VOLATILE_PREFIXES = ("x-ratelimit-", "x-tapeproxy-")


def generic_error(error_type: str, message: str, status: int) -> dict[str, Any]:
    return {"error": {"type": error_type, "message": message}}


def socket_error(error_type: str, message: str, event_id: str) -> dict[str, Any]:
    """A WebSocket session's error event, in OpenAI Realtime's shape (the common one)."""
    return {
        "type": "error",
        "event_id": event_id,
        "error": {"type": error_type, "message": message},
    }


@dataclass(frozen=True)
class Sockets:
    """What a provider's WebSocket sessions look like: its error event (tapeproxy error
    type, message, event id), and the client fields that are event ids (fresh on every
    run, so left out when a client frame is matched)."""

    error_event: Callable[[str, str, str], dict[str, Any]] = socket_error
    event_ids: frozenset[str] = frozenset({"event_id"})


def no_limit_headers(retry_after: int) -> list[tuple[str, str]]:
    return []


def no_tokens(payloads: Iterable[Any]) -> Tokens | None:
    return None


def no_text(payloads: Iterable[Any]) -> str:
    return ""


# One text field of a stream frame's JSON: the channel it adds to (the text a client joins
# across frames: a choice's content, a tool call's arguments, a content block), and the
# object or list holding it with its key there, so a scrubber can write it back.
TextField = tuple[Hashable, Any, str | int]


def no_text_fields(payload: Any) -> Iterator[TextField]:
    return iter(())


def string_at(holder: Any, name: str) -> bool:
    """Whether `holder` is an object with a string under `name`."""
    return isinstance(holder, dict) and isinstance(holder.get(name), str)


def ends_with(*suffixes: str) -> Callable[[str], bool]:
    """A path test: the path ends with one of `suffixes`."""
    return lambda path: path.endswith(suffixes)


def no_stream_path(path: str) -> bool:
    return False


def claims_nothing(headers: Mapping[str, str]) -> bool:
    return False


def error_frame(event: str, payload: Any, data: str) -> bool:
    """The in-band failure most APIs send: an SSE `event: error`, whatever its data says, or a
    frame holding an `error` member (OpenAI chat, Gemini, Ollama)."""
    return event == "error" or (isinstance(payload, dict) and bool(payload.get("error")))


# The signs of a provider that declares none: only the common error frames.
ERROR_ONLY = FrameSigns(error=error_frame)


def type_of(payload: Any) -> object:
    """A frame's `type` member (Anthropic's and OpenAI Responses' events carry one), or None."""
    return payload.get("type") if isinstance(payload, dict) else None


@dataclass(frozen=True)
class Provider:
    """One upstream: its name and URL, and what tapeproxy knows of its requests and answers."""

    name: str
    base_url: str
    # Its real hosts, as patterns: what the forward proxy decrypts for it, whatever URL it was
    # given (`--upstream openai=URL` still owns api.openai.com, so a client that hard-codes it
    # reaches that URL). `*.example.com`: every name below example.com; a `*` inside a label:
    # any run of name characters in that label (`bedrock-runtime.*.amazonaws.com`).
    hosts: tuple[str, ...] = ()
    # Default match rules: the headers that change the answer, the body fields that never do.
    rules: MatchRules = field(default_factory=MatchRules)
    # The provider's error shape for (tapeproxy error type, message, HTTP status).
    error_body: Callable[[str, str, int], dict[str, Any]] = generic_error
    # Token counts from the decoded JSON payloads of a body or of every stream frame, in order.
    tokens: Callable[[Iterable[Any]], Tokens | None] = no_tokens
    # The assistant's text from the same payloads: a whole answer's, or a stream's joined.
    text: Callable[[Iterable[Any]], str] = no_text
    # The text fields of one stream payload that a client joins across frames.
    text_fields: Callable[[Any], Iterator[TextField]] = no_text_fields
    # Which stream frames end the answer, report a failure, or only keep the line alive.
    frame_signs: FrameSigns = ERROR_ONLY
    # Response headers of its own that differ on every call, on top of the HTTP ones.
    volatile_headers: frozenset[str] = frozenset()
    volatile_prefixes: tuple[str, ...] = ()
    # Whether a request path asks for a stream by itself, whatever the body says.
    stream_path: Callable[[str], bool] = no_stream_path
    # Whether a stream answered at this path always ends with a final frame, so one that
    # ends without it was cut short (a truncated stream is not recorded as complete).
    ends_streams: Callable[[str], bool] = no_stream_path
    # Whether a request on a bare `/v1/...` path (no upstream prefix) is this provider's.
    claims_bare_v1: Callable[[Mapping[str, str]], bool] = claims_nothing
    # How it fails, for faults (tapeproxy.faults): the error type of its 429 and of its 500,
    # its overload answer (status, error type), and the rate-limit headers of a 429 whose
    # retry comes after the given seconds (`retry-after` itself is added for every provider).
    rate_limit_type: str = "rate_limit_error"
    server_error_type: str = "server_error"
    overload: tuple[int, str] = (503, "overloaded")
    limit_headers: Callable[[int], list[tuple[str, str]]] = no_limit_headers
    # Its answers' enum-like fields, on top of tapeproxy.exchange.shape.ENUM_FIELDS: a value
    # never seen there is news to `tapeproxy drift`.
    enum_fields: frozenset[str] = frozenset()
    # Its WebSocket sessions (Realtime, Responses over WebSocket, Gemini Live).
    sockets: Sockets = Sockets()
    # Whether it leaves out a field at its default (proto3 JSON: 0, "", false, []): to drift,
    # such a field gone is no field removed.
    omits_defaults: bool = False

    def usage(self, payloads: Iterable[Any]) -> Usage | None:
        """The `usage` an exchange file keeps: input and output tokens."""
        found = self.tokens(payloads)
        return None if found is None else found.stored()

    def with_url(self, url: str) -> Provider:
        return replace(self, base_url=url.rstrip("/"))

    def is_volatile(self, header: str) -> bool:
        """Whether a (lowercase) response header differs on every call of this provider."""
        return (
            header in HTTP_VOLATILE_HEADERS
            or header in self.volatile_headers
            or header.startswith(HTTP_VOLATILE_PREFIXES + self.volatile_prefixes)
        )

    def asks_to_stream(self, request: RequestParts) -> bool:
        """Whether a request asked for a streamed answer: `"stream": true` in its JSON body,
        or a streaming path (Gemini's `:streamGenerateContent`)."""
        body = request.body
        flag = body.value.get("stream") if isinstance(body.value, dict) else None
        return (body.kind == "json" and flag is True) or self.stream_path(request.path)


def pick_int(source: Any, *names: str) -> int | None:
    """The first of `names` in `source` that holds an int (usage fields vary by endpoint)."""
    if isinstance(source, dict):
        for name in names:
            value = source.get(name)
            if isinstance(value, int):
                return value
    return None


def pick_dict(source: Any, *names: str) -> Any:
    """The first of `names` in `source` that holds an object (a usage block's details)."""
    if isinstance(source, dict):
        for name in names:
            value = source.get(name)
            if isinstance(value, dict):
                return value
    return None


def strings(*values: Any) -> list[str]:
    """The values that are strings: the text pieces of an answer, skipping nulls."""
    return [value for value in values if isinstance(value, str)]
