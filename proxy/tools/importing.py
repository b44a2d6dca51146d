"""What every `tapeproxy import` shares: a request and its whole answer read from another
format (`Whole`) turned into an exchange by recording's own pieces (the upstream its URL
names, the key, the capture, the finish, the scrubbing). tapeproxy.tools.importrun reads the
files and writes the cassettes."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from tapeproxy.engine.capture import Capture
from tapeproxy.engine.finish import Finished, settle
from tapeproxy.engine.keyed import parts_and_key
from tapeproxy.engine.spool import Spool
from tapeproxy.errors import TapeproxyError
from tapeproxy.exchange.bodies import decode_content
from tapeproxy.exchange.head import is_final_status, is_header_name, is_header_value
from tapeproxy.providers import BARE_V1_DEFAULT, BUILTIN, Rulebook, generic
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.scrubber import Scrubber

DEFAULT_PORTS = {"http": 80, "https": 443}


class Skip(TapeproxyError):
    """One file or one exchange that cannot be imported; why, in one line."""

    error_type = "import_skipped"


@dataclass(frozen=True)
class Whole:
    """A request and its answer as another tool kept them: the bytes as sent (an answer's
    content encoding still on it, or not), headers in order. `frames`: the answer as stream
    frames with their times (a tapeproxy export's own), else it is split as recording
    splits it; `upstream`: the upstream it names, else the one its URL's origin is."""

    method: str
    url: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    status: int
    answer_headers: Sequence[tuple[str, str]]
    answer: bytes
    frames: Sequence[tuple[int, bytes]] | None = None
    upstream: str | None = None
    seq: int | None = None
    end_ms: int | None = None  # an answer its upstream cut, and when


@dataclass(frozen=True)
class Importer:
    """How requests are keyed and answers kept: serve's upstreams and match rules, the
    [redact] rules and the key formats, --max-record."""

    providers: Mapping[str, Provider]
    rules: Rulebook
    scrubber: Scrubber
    max_record: int

    def upstream(self, whole: Whole) -> tuple[Provider, str, str]:
        """The upstream a request went to, and its path and query under it: the one whose
        scheme, host and port are the URL's (the longest base path of those that fit)."""
        url = urlsplit(whole.url)
        if whole.upstream is not None:  # named by tapeproxy's own export
            provider = self.providers.get(whole.upstream) or generic(
                whole.upstream, f"{url.scheme}://{url.netloc}"
            )
            under = _under(url.path, urlsplit(provider.base_url).path)
            return provider, url.path if under is None else under, url.query
        fits = []
        for provider in self.providers.values():
            base = urlsplit(provider.base_url)
            if _origin(base) == _origin(url) and _under(url.path, base.path) is not None:
                fits.append((len(base.path.rstrip("/")), provider))
        if not fits:
            origin = f"{url.scheme}://{url.netloc}"
            raise Skip(
                f"no upstream at {origin}: give --upstream NAME={origin} (NAME as the "
                "client's base URL names it: http://HOST:PORT/NAME/...)"
            )
        longest = max(size for size, _ in fits)
        best = [p for size, p in fits if size == longest]
        # Several upstreams at one origin (a gateway, a fake): as the server routes a bare
        # `/v1` request, the built-in that claims its headers (`anthropic-version`), else
        # openai, else the first by name.
        headers = {k.lower(): v for k, v in whole.headers}
        claimed = [p for p in best if p.name in BUILTIN and BUILTIN[p.name].claims_bare_v1(headers)]
        fallback = [p for p in best if p.name == BARE_V1_DEFAULT]
        provider = (claimed or fallback or sorted(best, key=lambda p: p.name))[0]
        path = _under(url.path, urlsplit(provider.base_url).path) or "/"
        return provider, path, url.query

    def exchange(self, whole: Whole, seq: int) -> Finished:
        """The exchange recording would have written for this request and answer (ordinal 1
        until it is numbered); Skip when the answer is over --max-record, or is none a
        recording could hold."""
        status = whole.status
        if not is_final_status(status):
            raise Skip(f"its status {status!r} is no HTTP answer's (200 to 599)")
        provider, path, query = self.upstream(whole)
        rules = self.rules.for_upstream(provider.name)
        headers = {k.lower(): v for k, v in whole.headers}
        parts, key = parts_and_key(
            whole.method, provider.name, path, query, headers, whole.body, rules, self.scrubber
        )
        answer_headers = [
            (_sendable(k).lower(), one) for k, v in whole.answer_headers for one in _values(k, v)
        ]
        chunked = any(
            k == "transfer-encoding" and "chunked" in v.lower() for k, v in answer_headers
        )
        capture = Capture(
            provider=provider,
            request=parts,
            key=key,
            seq=whole.seq if whole.seq is not None else seq,
            rules=rules.fingerprint(),
            status=whole.status,
            headers=answer_headers,
            chunked=chunked or whole.frames is not None,
            spool=Spool(tempfile.TemporaryFile),
            limit=self.max_record,
            clock=_still,
            started=0.0,
        )
        _feed(capture, whole, dict(answer_headers).get("content-encoding", ""))
        if capture.over:
            capture.spool.discard()
            raise Skip(f"its answer is over --max-record ({self.max_record:,} bytes)")
        finished = settle(capture, whole.end_ms is not None, self.scrubber, keep_failures=True)
        if not isinstance(finished, Finished):  # (settle keeps every failure asked to)
            capture.spool.discard()
            raise Skip(finished)
        if finished.middle is None:  # else its pieces are read back from the spool when written
            capture.spool.discard()
        if whole.end_ms is not None:
            response = finished.exchange.response.model_copy(update={"end_ms": whole.end_ms})
            finished = Finished(
                finished.exchange.model_copy(update={"response": response}), finished.middle
            )
        return finished


def _sendable(name: str) -> str:
    """An answer header's name, or Skip when no server sends it back (a replay hung up)."""
    if not is_header_name(name):
        raise Skip(f"its answer has a header named {name!r}, which is no HTTP header name")
    return name


def _values(name: str, value: str) -> list[str]:
    """An answer header's values: one per line where a tool joined them with line breaks
    (Firefox's HAR, for Set-Cookie), so no line break is ever sent back; Skip for a value
    no server sends (a NUL or another control character, a character beyond latin-1)."""
    values = [one.strip() for one in value.replace("\r\n", "\n").split("\n")]
    for one in values:
        if not is_header_value(one):
            raise Skip(f"its answer's {name} header holds {one[:40]!r}, which no server sends")
    return [one for one in values if one] or [""]


def _still() -> float:
    return 0.0


def _feed(capture: Capture, whole: Whole, encoding: str) -> None:
    """The answer into the capture as recording feeds it: decoded (the upstream client
    inflates), then split into its dialect's frames, or as the frames it came in."""
    if whole.frames is not None and capture.splitter is not None:
        for ms, raw in whole.frames:
            capture.size += len(raw)
            if capture.size > capture.limit:
                capture.over = True
                return
            if capture.keep_frame(raw, ms):
                capture.spool.flush()
        return
    if capture.add(_decoded(whole.answer, encoding, capture.limit)):
        capture.spool.flush()


def _decoded(raw: bytes, encoding: str, limit: int) -> bytes:
    """An answer with its content encoding undone, within `limit`. Tools that kept it
    decoded under the original header (vcrpy's older httpx stub, HAR writers) left text
    that does not decode: it is taken as it is. Skip for bytes that neither decode within
    `limit` nor are text (so a compressed answer is never stored compressed)."""
    if encoding.strip().lower() in ("", "identity"):
        return raw
    body = decode_content(raw, encoding, limit)
    if body is not raw:
        return body
    if raw[:2] != b"\x1f\x8b":  # not gzip's magic: maybe already decoded
        try:
            raw.decode("utf-8")
            return raw
        except UnicodeDecodeError:
            pass
    raise Skip(
        f"its answer is {encoding}-encoded and does not decode within --max-record "
        f"({limit:,} bytes): corrupt, or larger"
    )


def _origin(url: SplitResult) -> tuple[str, str, int | None]:
    scheme = url.scheme.lower()
    return scheme, (url.hostname or "").lower(), url.port or DEFAULT_PORTS.get(scheme)


def _under(path: str, base: str) -> str | None:
    """`path` below the base path `base`, or None when it is not below it."""
    base = base.rstrip("/")
    if not base:
        return path or "/"
    if path == base or path.startswith(base + "/"):
        return path[len(base) :] or "/"
    return None
