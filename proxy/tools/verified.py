"""What `verify` found sound, kept in the library's state (beside the summary cache) by each
file's stamp, with the match rules it was keyed under, the checks it passed (this tapeproxy's,
with these key formats) and the blobs it uses: a file unchanged since is not read again."""

from __future__ import annotations

import hashlib
from typing import Any

from tapeproxy import __version__
from tapeproxy.engine.rules import MatchRules
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.sealed import seal, unseal
from tapeproxy.store.protocol import CassetteStore

VERSION = 1
Entry = list[Any]  # [stamp, upstream, rules fingerprint, [blob digests]]


def state_name(cassette: str) -> str:
    return f"verified/{hashlib.sha256(cassette.encode()).hexdigest()[:32]}.json"


class Verified:
    """One cassette's files found sound before, as a verify run goes through it."""

    def __init__(self, store: CassetteStore, cassette: str, keys: Scrubber | None) -> None:
        self.store, self.cassette = store, cassette
        self.stamps = store.stamps(cassette)  # before any file is read: a change after is new
        self.sign = f"{VERSION}|{__version__}|{keys!r}"
        self.kept = _load(store.read_state(state_name(cassette)), cassette, self.sign)
        self.found: dict[str, Entry] = {}
        self._prints: dict[str, str] = {}

    def sound_before(self, name: str, rules_for: Any) -> set[str] | None:
        """The blobs a file found sound before uses, when it is unchanged and its upstream's
        rules are the same; else None (it is read and checked)."""
        entry = self.kept.get(name)
        if entry is None or len(entry) != 4 or entry[0] != self.stamps.get(name):
            return None
        if not isinstance(entry[1], str) or self._print(entry[1], rules_for) != entry[2]:
            return None
        self.found[name] = entry
        return set(entry[3]) if isinstance(entry[3], list) else None

    def sound(self, name: str, upstream: str, rules_for: Any, blobs: set[str]) -> None:
        stamp = self.stamps.get(name)
        if stamp is not None:
            self.found[name] = [stamp, upstream, self._print(upstream, rules_for), sorted(blobs)]

    def save(self) -> None:
        if self.found != self.kept:
            sealed = seal({"cassette": self.cassette, "sign": self.sign, "ok": self.found})
            self.store.write_state(state_name(self.cassette), sealed)

    def _print(self, upstream: str, rules_for: Any) -> str:
        if upstream not in self._prints:
            rules: MatchRules = rules_for(upstream)
            self._prints[upstream] = rules.fingerprint()
        return self._prints[upstream]


def _load(raw: bytes | None, cassette: str, sign: str) -> dict[str, Entry]:
    """The entries kept; {} when none, damaged (its digest does not match), or made by
    another tapeproxy or with other key formats: never trusted, checked again."""
    data = unseal(raw)
    if data is None:
        return {}
    try:
        if data["cassette"] != cassette or data["sign"] != sign:
            return {}
        return {k: v for k, v in data["ok"].items() if isinstance(v, list)}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
