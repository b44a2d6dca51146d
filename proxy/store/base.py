"""The CassetteStore protocol and the file naming shared by every backend."""

from __future__ import annotations

import re
from typing import Protocol

from llmtape.models import Exchange

# Ordinal 1 is `<key>.json`; n >= 2 is `<key>.<n>.json`, with no leading zero, so each
# recording has exactly one name.
EXCHANGE_FILE = re.compile(r"^([0-9a-f]{64})(?:\.([2-9]|[1-9]\d+))?\.json$")
LIKE_EXCHANGE_FILE = re.compile(r"^[0-9a-f]{64}(?:\.\d+)?\.json$")


def exchange_file(key: str, ordinal: int) -> str:
    """`<key>.json` for the first recording of a request, `<key>.<n>.json` for the n-th."""
    return f"{key}.json" if ordinal == 1 else f"{key}.{ordinal}.json"


def parse_exchange_file(name: str) -> tuple[str, int] | None:
    match = EXCHANGE_FILE.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2) or 1)


class CassetteStore(Protocol):
    def entries(self, cassette: str) -> dict[str, list[int]]:
        """Every recorded key of a cassette with its ordinals, ascending; no file is read."""
        ...

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange: ...

    def write(self, cassette: str, exchange: Exchange) -> bool:
        """Store atomically; False when an equal recording (timing aside) is already there."""
        ...

    def delete(self, cassette: str, key: str, ordinal: int) -> None: ...

    def cassettes(self) -> list[str]: ...
