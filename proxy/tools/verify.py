"""Whether every file of a cassette is sound, as `tapeproxy verify` checks: schema, name, key."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tapeproxy.engine.frames import message_of
from tapeproxy.engine.keying import request_key, stored_request
from tapeproxy.engine.replay import Replay
from tapeproxy.engine.rules import MatchRules, unstored_headers
from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange.blobs import BLOBS_VERSION, INLINE_VERSION, held
from tapeproxy.exchange.model import Exchange
from tapeproxy.providers import default_rules
from tapeproxy.redaction.formats import FORMATS
from tapeproxy.redaction.percent import decoded
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.store.blobs import BLOBS, checked, strings, used_by, written_as
from tapeproxy.store.protocol import (
    LIKE_EXCHANGE_FILE,
    CassetteStore,
    exchange_file,
    is_leftover,
    parse_exchange_file,
    why_unreadable,
)
from tapeproxy.tools.verified import Verified

RulesFor = Callable[[str], MatchRules]


@dataclass
class Verdict:
    cassette: str
    checked: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    # Not wrong, worth knowing: temp files a killed write left (the server sweeps them).
    warnings: list[dict[str, Any]] = field(default_factory=list)
    # Files in an older schema_version: read fine (migrated in memory); `--upgrade` rewrites
    # them, after which they are in `upgraded`.
    outdated: list[str] = field(default_factory=list)
    upgraded: list[str] = field(default_factory=list)

    def flag(self, file: str, problem: str) -> None:
        self.problems.append({"file": file, "problem": problem})


def misnamed(folder: str, why: str) -> Verdict:
    """A folder of recordings the other tools skip, and why (what to do included): its name
    is no cassette's, so no request can name it, or it cannot be listed."""
    found = Verdict(folder)
    found.flag("(the folder)", why)
    return found


def verify(
    store: CassetteStore,
    cassette: str,
    rules_for: RulesFor,
    upgrade: bool = False,
    keys: Scrubber | None = None,
) -> Verdict:
    """Each file must parse under the schema, carry the key and ordinal its name says, and
    have that key under today's rules (else `tapeproxy rekey` is due); with `keys` (the key
    formats), hold none of them (an older tapeproxy stored answer headers as they came). A
    file in an older schema_version is noted, and with `upgrade` written again in today's."""
    verdict = Verdict(cassette)
    used: set[str] = set()
    before = Verified(store, cassette, keys)
    for name in store.names(cassette):
        if is_leftover(name):
            verdict.warnings.append(
                {"file": name, "problem": "left over from an interrupted write; safe to delete"}
            )
            continue
        parsed = parse_exchange_file(name)
        if parsed is None:
            if LIKE_EXCHANGE_FILE.match(name):
                verdict.flag(
                    name,
                    "not a name tapeproxy reads (ordinal 1 is KEY.json, n is "
                    "KEY.n.json, no leading zeros): rename it, or delete a copy",
                )
            continue
        verdict.checked += 1
        blobs = before.sound_before(name, rules_for)
        if blobs is None:
            blobs = _one(store, cassette, name, parsed, (rules_for, upgrade, keys), verdict, before)
        used |= blobs
    _check_blobs(store, cassette, used, verdict)
    before.save()
    return verdict


def _one(
    store: CassetteStore,
    cassette: str,
    name: str,
    parsed: tuple[str, int],
    how: tuple[RulesFor, bool, Scrubber | None],
    verdict: Verdict,
    before: Verified,
) -> set[str]:
    """One file read and checked (kept in `before` when sound); the blobs it uses."""
    rules_for, upgrade, keys = how
    try:
        exchange = store.read(cassette, *parsed)
    except CassetteCorrupt as exc:
        # The cause says what is wrong (a field by its JSON path); not where, nor to verify.
        verdict.flag(name, f"unreadable: {why_unreadable(exc)}")
        return set()
    marked = held(strings(exchange), hashed=False)[1]
    blobs = used_by(exchange)  # those it was read with (none for an older file's)
    current = exchange.read_as >= (BLOBS_VERSION if marked else INLINE_VERSION)
    if not current:
        upgraded = upgrade and (exchange.key, exchange.ordinal) == parsed
        if upgraded and _upgraded(store, cassette, exchange, name, verdict):
            blobs = written_as(exchange)
        else:
            verdict.outdated.append(name)
    problem = _check_file(cassette, exchange, parsed, rules_for)
    problem = problem or (_key_held(cassette, exchange, keys) if keys else None)
    if problem:
        verdict.flag(name, problem)
    elif current:
        before.sound(name, exchange.request.upstream, rules_for, blobs)
    return blobs


def _upgraded(
    store: CassetteStore, cassette: str, exchange: Exchange, name: str, verdict: Verdict
) -> bool:
    """The file written again in today's schema_version (a new stamp: checked again next
    time); one that cannot be (a read-only library) is flagged, not a traceback."""
    try:
        store.write(cassette, exchange)
    except OSError as exc:
        why = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        verdict.flag(name, f"cannot be rewritten in today's schema_version: {why}{where}")
        return False
    verdict.upgraded.append(name)
    return True


def _check_blobs(store: CassetteStore, cassette: str, used: set[str], verdict: Verdict) -> None:
    """Each blob must hash to its name (a recording that uses an edited one is flagged as
    unreadable too); one no recording uses is worth knowing (prune removes it). One a
    recording uses that is not there is flagged (a file found sound before is not read)."""
    held = store.blobs(cassette)
    for digest in sorted(used - set(held)):
        verdict.flag(
            f"{BLOBS}/{digest}",
            "missing, and a recording uses it: record the recordings that use it again",
        )
    for digest in held:
        name = f"{BLOBS}/{digest}"
        try:
            checked(digest, store.read_blob(cassette, digest))
        except ValueError:
            verdict.flag(
                name,
                "does not hold what its name (its SHA-256) says: edited? "
                "record the recordings that use it again",
            )
            continue
        if digest not in used:
            verdict.warnings.append(
                {"file": name, "problem": "used by no recording; `tapeproxy prune` removes it"}
            )


def _check_file(
    cassette: str, exchange: Exchange, parsed: tuple[str, int], rules_for: RulesFor
) -> str | None:
    if (exchange.key, exchange.ordinal) != parsed:
        return f"names {exchange_file(exchange.key, exchange.ordinal)} inside; renamed by hand?"
    try:
        if exchange.session is not None:  # a WebSocket session: each frame as it is sent
            for frame in exchange.session.frames:
                message_of(frame)
        else:
            Replay.of(exchange, exchange.key)  # what replay sends: a hand edit may leave none
    except ValueError as exc:
        return f"unreadable: {exc}"
    for side, body in (("request", exchange.request.body), ("response", exchange.response.body)):
        if body and "json" in body and not _finite(body["json"]):
            return (
                f"{side}.body.json holds NaN or Infinity, which is not JSON (jq reads null): "
                "record it again (tapeproxy now keeps such a body as text)"
            )
    parts = stored_request(exchange.request)
    rules = rules_for(parts.upstream)
    missing = unstored_headers(
        dict(parts.headers), exchange.rules, rules, default_rules(parts.upstream)
    )
    if missing:
        return (
            f"today's rules key on the header(s) {', '.join(missing)}, which this recording "
            "does not hold (it was made under other match rules): a request sending them "
            "misses it; record it again"
        )
    if request_key(parts, rules) == exchange.key:
        return None
    if exchange.rules != rules.fingerprint():
        return f"recorded under other match rules: run `tapeproxy rekey {cassette}`"
    return (
        f"its request does not hash to its key: run `tapeproxy rekey {cassette}` (an older "
        "tapeproxy keyed some requests differently), or record it again if it was edited by hand"
    )


def _finite(value: Any) -> bool:
    """Whether `value` is JSON as RFC 8259 has it: no NaN, Infinity or -Infinity in it."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def _key_held(cassette: str, exchange: Exchange, keys: Scrubber) -> str | None:
    found = held_key(exchange, keys)
    if found is None:
        return None
    where, kind = found
    fix = (
        "edit the file or record it again (redact scrubs values, not names)"
        if where.endswith(MEMBER_NAME)
        else f"run `tapeproxy redact {cassette}` to scrub it"
    )
    return (
        f"holds a well-known key format ({kind}) in {where}: {fix} (and revoke the key), "
        f"or give --keep {kind} if it is kept on purpose"
    )


def held_key(exchange: Exchange, keys: Scrubber) -> tuple[str, str] | None:
    """Where the first well-known key in a recording is (`response.headers.x-echo-key`), and
    its format; or None. The file as JSON is looked at once, walked only when it holds one."""
    if not keys.matches(exchange.model_dump_json()):
        return None
    for where, text in _texts(exchange.record(), "", keys.text):
        if keys.matches(text):
            seen = (text, decoded(text))  # a path may spell it percent-encoded
            kinds = (n for n, (rx, _) in FORMATS.items() if any(re.search(rx, t) for t in seen))
            return where, next(kinds, "?")
    return None  # split across two stream frames: `redact` joins them, this does not


MEMBER_NAME = " (a member's name)"


def _texts(value: Any, where: str, scrub: Callable[[str], str]) -> Iterator[tuple[str, str]]:
    """Each string of a JSON value and where it is; a member's name too (a key there is one
    recording keeps: names are not scrubbed), shown scrubbed in where a value is."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for name, item in value.items():
            named = scrub(str(name))
            yield f"{where}{MEMBER_NAME}", str(name)
            yield from _texts(item, f"{where}.{named}" if where else named, scrub)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _texts(item, f"{where}[{index}]", scrub)
