"""The user's redaction rules: JSON fields by path and text by pattern, scrubbed out of request
and response bodies and stream frames. One path, used when recording and by `tapeproxy redact`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tapeproxy.engine.keying import RequestParts
from tapeproxy.engine.rules import parse_path
from tapeproxy.errors import ConfigError
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.layout import Record
from tapeproxy.redaction.fieldpaths import Path, at_path
from tapeproxy.redaction.formats import formats_pattern, may_hold_key
from tapeproxy.redaction.memo import Memo
from tapeproxy.redaction.percent import matches_decoded, scrub_decoded
from tapeproxy.redaction.secrets import MARKER
from tapeproxy.redaction.streams import (
    LITERAL,
    frame_text,
    joined_document,
    joined_frames,
    leaves,
)

if TYPE_CHECKING:
    from tapeproxy.exchange.model import Exchange

HeaderValue = str | list[str]  # a stored answer's repeated header is a list
_ROUNDS = 8  # a replacement may make a new match (`x` + `[redacted]`): scrub again, a bit


def check_field(path: str) -> Path:
    """A field path a rule may scrub, e.g. `messages[*].content` or `user.email`."""
    try:
        return parse_path(path)
    except ConfigError as exc:
        raise ConfigError(f"redact field: {exc.message}") from exc


def check_pattern(pattern: str) -> re.Pattern[str]:
    """A pattern a rule may scrub: a valid regular expression that does not match the marker
    it leaves behind (else no redacted file could be free of it)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            f"redact pattern {pattern!r} is not a valid regular expression: {exc}"
        ) from exc
    if any(match.group(0) for match in compiled.finditer(MARKER)):
        raise ConfigError(
            f"redact pattern {pattern!r} matches the marker {MARKER} that redaction leaves, so "
            "a redacted file would still match it; make the pattern stricter"
        )
    return compiled


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (NaN equals NaN here; `1` is not `true`)."""
    return a is b or json.dumps(a) == json.dumps(b)


@dataclass(frozen=True)
class Scrubber:
    """Rules in, values out: every value at a field path, every pattern match and every
    well-known key (`formats`) becomes MARKER. Idempotent: scrubbing what it scrubbed
    changes nothing."""

    fields: tuple[Path, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()
    formats: re.Pattern[str] | None = None  # the key formats not opted out of, as one
    holds: Memo = field(init=False, compare=False, repr=False)  # `matches`, remembered

    def __post_init__(self) -> None:
        object.__setattr__(self, "holds", Memo(self.matches))

    @classmethod
    def build(
        cls, fields: Iterable[str] = (), patterns: Iterable[str] = (), keep: Iterable[str] = ()
    ) -> Scrubber:
        """The user's fields and patterns, and every key format but those in `keep`."""
        compiled = tuple(map(check_pattern, patterns))
        return cls(tuple(map(check_field, fields)), compiled, formats_pattern(keep))

    @property
    def every(self) -> tuple[re.Pattern[str], ...]:
        """The user's patterns, then the key formats."""
        return self.patterns if self.formats is None else (*self.patterns, self.formats)

    @property
    def whole(self) -> bool:
        """Whether an answer is scrubbed only whole (a user's pattern may match anywhere);
        the key formats alone scrub one too large to hold frame by frame."""
        return bool(self.fields or self.patterns)

    def __bool__(self) -> bool:
        return bool(self.fields or self.every)

    def _for(self, text: str) -> tuple[re.Pattern[str], ...]:
        """The patterns worth running over `text`: the key formats only where it may hold a
        key (requests are scrubbed on the event loop, and most text holds none)."""
        return self.every if self.formats is None or may_hold_key(text) else self.patterns

    def _clean(self, text: str) -> bool:
        """Whether raw text (JSON too: no encoder escapes a key's letters) surely holds nothing
        to scrub: only the key formats apply, and it holds none of their prefixes."""
        return not self.fields and not self.patterns and not may_hold_key(text)

    def text(self, text: str) -> str:
        """Every pattern match replaced by MARKER. Cheap on text with nothing to scrub (a
        log line, each exchange's): one substring precheck when only the formats apply."""
        if not self.patterns and (self.formats is None or not may_hold_key(text)):
            return text
        for _ in range(_ROUNDS):
            new = scrub_decoded(text, self._for, MARKER)  # `/keys/ghp%5F...` is a key
            for pattern in self._for(text):
                new = pattern.sub(lambda m: MARKER if m.group(0) else "", new)
            if new == text:
                break
            text = new
        return text

    def matches(self, text: str) -> bool:
        """Whether a pattern matches something (not nothing) in `text`, or decoded."""
        if any(m.group(0) for pattern in self._for(text) for m in pattern.finditer(text)):
            return True
        return matches_decoded(text, self._for)

    def value(self, value: Any) -> Any:
        """A JSON value with its fields and every matching string (or number) scrubbed."""
        for path in self.fields:
            value = at_path(value, path)
        return self.strings(value)

    def strings(self, value: Any) -> Any:
        """A JSON value with every matching string (or number) scrubbed, no field path
        applied: what leaves as a message rather than as a recorded body (a miss report, for
        its 422, the misses journal, the viewer and the log: its closest recording may be one
        an older tapeproxy wrote with a key in it)."""
        # Nothing to change (most requests): nothing copied.
        if not any(map(self.holds, leaves(value, numbers=True))):
            return value
        return self._strings(value)

    def _strings(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self._strings(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._strings(item) for item in value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            shown = json.dumps(value)
            scrubbed = self.text(shown)
            return value if scrubbed == shown else scrubbed
        return value

    def json_text(self, text: str) -> str:
        """JSON (or what may be JSON) as text, scrubbed, keeping its layout where it can:
        only the string literals that change are written anew. Where a field or a number is
        scrubbed, the whole document is written anew, compact."""
        if self._clean(text):
            return text
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return self._literals(text) if text.lstrip()[:1] in ("{", "[") else self.text(text)
        scrubbed = self.value(parsed)
        if _same(scrubbed, parsed):
            return text
        kept = self._literals(text)
        try:
            if _same(json.loads(kept), scrubbed):
                return kept
        except ValueError:
            pass
        return json.dumps(scrubbed, ensure_ascii=text.isascii(), separators=(",", ":"))

    def _literals(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            literal = match.group(0)
            if match.group(1):  # an object's key: names are not scrubbed
                return literal
            try:
                value = json.loads(literal)
            except ValueError:
                return literal
            new = self.text(value)
            return literal if new == value else json.dumps(new, ensure_ascii=literal.isascii())

        return LITERAL.sub(one, text)

    def payload(self, payload: Payload) -> Payload:
        """A stored body scrubbed. JSON keeps its layout (`style`), so it still renders to
        valid JSON; text that is JSON is scrubbed as JSON; base64 (binary) is left alone."""
        if not self:
            return payload
        if payload.kind == "json":
            value = self.value(payload.value)
            return payload if _same(value, payload.value) else replace(payload, value=value)
        if payload.kind == "text":
            text = str(payload.value)
            new = self.json_text(text)
            return payload if new == text else replace(payload, value=new)
        return payload

    def request(self, parts: RequestParts) -> RequestParts:
        """A request's stored parts with the body, the path, the query (names too: `?ghp_...`)
        and the header values scrubbed: what it is keyed and stored as (upstream still gets
        the request as it came)."""
        body = self.payload(parts.body)
        path = self.text(parts.path)
        query = tuple((self.text(name), self.text(value)) for name, value in parts.query)
        headers = tuple((name, self.text(value)) for name, value in parts.headers)
        same = path == parts.path and query == parts.query and headers == parts.headers
        if body is parts.body and same:
            return parts
        return replace(parts, body=body, path=path, query=query, headers=headers)

    def headers(self, headers: Mapping[str, HeaderValue]) -> dict[str, HeaderValue]:
        """Header values scrubbed (a repeated header's list, each value): not only the
        credential names hold a key (`x-echo-key: ghp_...`). Names are kept."""
        return {
            name: [self.text(v) for v in value] if isinstance(value, list) else self.text(value)
            for name, value in headers.items()
        }

    def frames(self, frames: list[Record], dialect: str | None) -> list[Record]:
        """Stream frames scrubbed: each text a client joins across frames matched whole
        (tapeproxy.redaction.streams), then each frame alone; a streamed JSON document
        (`json` dialect) or raw chunks of text as a whole, laid back over its frames."""
        if dialect == "json":
            return self._document(frames, self._json_document)
        if dialect == "chunks":
            return self._document(frames, self.text)
        joined = joined_frames(frames, dialect, self.every, self.matches)
        return list(self.each(joined, dialect))

    def each(self, frames: Iterable[Record], dialect: str | None) -> Iterator[Record]:
        """Stream frames scrubbed one by one, each alone (a stream too large to hold)."""
        for frame in frames:
            old = frame.get("text")
            if old is None or self._clean(old):  # binary: left alone
                yield frame
                continue
            text = frame_text(old, dialect, self.json_text, self.text)
            yield frame if text == old else {**frame, "text": text}

    def _json_document(self, text: str) -> str:
        return self.json_text(joined_document(text, self.every, self.matches))

    def _document(self, frames: list[Record], scrub: Callable[[str], str]) -> list[Record]:
        if any(frame.get("text") is None for frame in frames):
            return frames
        texts: list[str] = [frame["text"] for frame in frames]
        joined = "".join(texts)
        new = scrub(joined)
        if new == joined:
            return frames
        out, start = [], 0
        for index, (frame, old) in enumerate(zip(frames, texts, strict=True)):
            end = len(new) if index == len(frames) - 1 else start + len(old)
            if new[start:end]:
                out.append({**frame, "text": new[start:end]})
            start = end
        return out

    def record(self, record: Record) -> Record:
        """An exchange's Record with its request (body, path, query and header values),
        response header values, body and frames scrubbed."""
        if not self:
            return record
        request, response = dict(record["request"]), dict(record["response"])
        request["path"] = self.text(request["path"])
        request["query"] = [[self.text(n), self.text(v)] for n, v in request.get("query", ())]
        for part in (request, response):
            if part.get("headers"):
                part["headers"] = self.headers(part["headers"])
        for part in (request, response):
            body = self.payload(Payload.from_dict(part.get("body"))).to_dict()
            if body is None:
                part.pop("body", None)
            else:
                part["body"] = body
        frames = response.get("frames")
        if frames is not None:
            response["frames"] = self.frames(frames, response.get("dialect"))
        return {**record, "request": request, "response": response}

    def exchange(self, exchange: Exchange) -> Exchange:
        """`record`, for an exchange read back (`tapeproxy redact`)."""
        if not self:
            return exchange
        scrubbed = type(exchange).model_validate(self.record(exchange.record()))
        scrubbed._read_as = exchange.read_as
        return scrubbed
