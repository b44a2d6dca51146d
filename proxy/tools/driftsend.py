"""A recorded request sent live again, for `tapeproxy drift`: its bytes rebuilt from the
recording, the upstream's key added from the environment, sent through the server's upstream
client (no fault applied), and the answer captured and finished by recording's own pieces,
so it is the exchange a record run would write."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.capture import Capture
from tapeproxy.engine.finish import Finished, settle
from tapeproxy.engine.keyed import parts_and_key
from tapeproxy.engine.spool import Spool
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.exchange.bodies import MULTIPART_BOUNDARY, Payload, payload_bytes
from tapeproxy.exchange.model import Exchange, dump_around, load_exchange
from tapeproxy.providers import Rulebook
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import is_secret_header
from tapeproxy.tools.driftretry import Pacer
from tapeproxy.upstream.protocol import Outbound, Upstream, UpstreamResponse

# Each built-in's key, as its SDKs read it from the environment: the variables (the first
# set wins), the header it goes in, and what comes before it there. Record mode forwards the
# client's own key; drift has no client, so it takes the key the client would have.
KEYS: Mapping[str, tuple[tuple[str, ...], str, str]] = {
    "openai": (("OPENAI_API_KEY",), "authorization", "Bearer "),
    "anthropic": (("ANTHROPIC_API_KEY",), "x-api-key", ""),
    "gemini": (("GEMINI_API_KEY", "GOOGLE_API_KEY"), "x-goog-api-key", ""),
    "mistral": (("MISTRAL_API_KEY",), "authorization", "Bearer "),
}


PROTOCOL_META = "io.modelcontextprotocol/protocolVersion"
MIN_KEY = 16  # shorter values are not taken for keys to scrub (real ones are 32 and more)


def missing_keys(upstreams: set[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The variable each upstream needs and the environment does not have (its first name)."""
    environ = os.environ if environ is None else environ
    missing = []
    for name in sorted(upstreams):
        variables = KEYS.get(name, ((), "", ""))[0]
        if variables and not any(environ.get(v) for v in variables):
            missing.append(variables[0])
    return missing


def unsendable_keys(upstreams: set[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables holding a key no HTTP header carries as it is (a space or line break
    pasted with it, a character that is not ASCII): said before anything is sent."""
    environ = os.environ if environ is None else environ
    bad = []
    for name in sorted(upstreams):
        variables = KEYS.get(name, ((), "", ""))[0]
        variable = next((v for v in variables if environ.get(v)), None)  # the one sent
        if variable is not None and not _sendable(environ[variable]):
            bad.append(variable)
    return bad


def unsendable_key(variable: str) -> ConfigError:
    return ConfigError(
        f"{variable} holds a character no HTTP header carries (a space or a line break "
        "around the key, or one that is not ASCII): set it to the key alone"
    )


def _sendable(value: str) -> bool:
    return value.isprintable() and value.strip() == value and value.isascii()


def key_patterns(environ: Mapping[str, str] | None = None) -> list[str]:
    """Each key drift may send, as a pattern to scrub: an answer that says it back (an
    error quoting it, a key of no well-known format) keeps it out of every report and
    re-recording. Not a value too short to be a key (a dummy `x` would scrub every x)."""
    environ = os.environ if environ is None else environ
    found = {environ.get(v, "") for variables, _, _ in KEYS.values() for v in variables}
    return [re.escape(key) for key in sorted(found) if len(key) >= MIN_KEY]


def no_keys(missing: list[str]) -> ConfigError:
    named = " and ".join(missing)
    return ConfigError(
        f"{named} {'is' if len(missing) == 1 else 'are'} not set: drift sends recorded "
        "requests to the live upstream and needs its key in the environment"
    )


def request_headers(exchange: Exchange, upstream: str) -> list[tuple[str, str]]:
    """The headers a recorded request goes with: its key headers (not those kept only as a
    digest), its body's content type (never stored: told by the body), what an MCP server
    asks a client to accept, and the upstream's key from the environment."""
    request = exchange.request
    headers = [(k, v) for k, v in request.headers.items() if not is_secret_header(k)]
    body = Payload.from_dict(request.body)
    kind = _content_type(body)
    if kind:
        headers.append(("content-type", kind))
    if body.kind == "json" and (messages := jsonrpc.messages(body.value)):
        headers.append(("accept", "application/json, text/event-stream"))
        # MCP from revision 2026-07-28 on: each request says its revision in a header too.
        params = messages[0].get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(PROTOCOL_META) if isinstance(meta, dict) else None
        if isinstance(version, str):
            headers.append(("mcp-protocol-version", version))
    variables, header, prefix = KEYS.get(upstream, ((), "", ""))
    key = next((os.environ[v] for v in variables if os.environ.get(v)), None)
    if key is not None:
        headers.append((header, prefix + key))
    return headers


def _content_type(body: Payload) -> str:
    if body.kind == "json":
        return "application/json"
    if body.kind == "text":
        text = str(body.value)
        if text.startswith("--" + MULTIPART_BOUNDARY.decode()):
            return f"multipart/form-data; boundary={MULTIPART_BOUNDARY.decode()}"
        return "application/x-www-form-urlencoded" if "=" in text[:200] else "text/plain"
    return "application/octet-stream" if body.kind == "base64" else ""


class Unsent(TapeproxyError):
    """A live answer drift could not take (over --max-record); why, in one line."""

    error_type = "drift_unsent"


@dataclass(frozen=True)
class Sender:
    """What sends and keeps: the upstream client, each upstream's URL and rules, the
    scrubbing recording does, --max-record, and how a rate limit is retried."""

    upstream: Upstream
    providers: Mapping[str, Provider]
    rules: Rulebook
    scrubber: Scrubber
    max_record: int
    # An MCP server's session, per cassette and upstream: the id its last answer minted (a
    # legacy session's `initialize` is sent first, in recorded order), carried by the next.
    sessions: dict[tuple[str, str], str] = field(default_factory=dict)
    pacer: Pacer = field(default_factory=Pacer)

    async def send(self, recorded: Exchange, scope: str = "") -> tuple[Exchange, str]:
        """The recorded request sent live; its answer as the exchange recording would keep
        (at the recorded ordinal and seq), and, when it is still a rate limit, how often it
        was retried and why not more. UpstreamError when it cannot be sent or read.
        `scope` (its cassette) holds the MCP session its requests carry on."""
        request = recorded.request
        provider = self.providers.get(request.upstream)
        if provider is None:
            raise Unsent(f"no URL for upstream {request.upstream!r}: give --upstream NAME=URL")
        query = urlencode(request.query)
        body = payload_bytes(Payload.from_dict(request.body))
        headers = request_headers(recorded, provider.name)
        place = (scope, provider.name)
        session = self.sessions.get(place)
        if session is not None:  # (its DELETE, which ends it, has no JSON-RPC body)
            headers.append((jsonrpc.SESSION_HEADER, session))
        url = provider.base_url + request.path + (f"?{query}" if query else "")
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        outbound = Outbound.of(provider.name, request.method, url, raw, body)
        answer, retried = await self.pacer.open(self.upstream, outbound, recorded.response.status)
        for name, value in answer.headers:
            if name == jsonrpc.SESSION_HEADER:
                self.sessions[place] = value
        rules = self.rules.for_upstream(provider.name)
        named = {k.lower(): v for k, v in headers}
        parts, key = parts_and_key(
            request.method, provider.name, request.path, query, named, body, rules, self.scrubber
        )
        capture = Capture(
            provider=provider,
            request=parts,
            key=key,
            seq=recorded.seq,
            rules=rules.fingerprint(),
            status=answer.status,
            headers=list(answer.headers),
            chunked=answer.chunked,
            spool=Spool(tempfile.TemporaryFile),
            limit=self.max_record,
        )
        return await self._taken(answer, capture, recorded.ordinal), retried

    async def _taken(self, answer: UpstreamResponse, capture: Capture, ordinal: int) -> Exchange:
        """The answer read into its capture, as the recorder reads it, and finished; its
        scratch file gone however it ends (a stream cut short included)."""
        try:
            try:
                async for chunk in answer.chunks():
                    if capture.add(chunk):
                        await asyncio.to_thread(capture.spool.flush)
                    if capture.over:  # no client waits for the rest: an endless answer ends here
                        break
            finally:
                answer.close()
            if capture.over:
                raise Unsent(f"its live answer is over --max-record ({self.max_record:,} bytes)")
            return await asyncio.to_thread(self._finished, capture, ordinal)
        finally:
            capture.spool.discard()

    def _finished(self, capture: Capture, ordinal: int) -> Exchange:
        """The capture as its exchange, whole (an answer spooled to disk read back within
        --max-record: its shape needs all of it)."""
        finished = settle(capture, False, self.scrubber, keep_failures=True)
        if not isinstance(finished, Finished):  # (every failure is kept when asked to)
            raise Unsent(f"its live answer was not kept: {finished}")
        exchange = finished.exchange.model_copy(update={"ordinal": ordinal})
        if finished.middle is not None:
            exchange = load_exchange(b"".join(dump_around(exchange, finished.middle)))
        return exchange
