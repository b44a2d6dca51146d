"""Long texts already searched: an agent sends its whole conversation again on every turn,
and requests are scrubbed on the event loop as they are keyed, so a long text seen before is
answered from memory, bounded by the characters held."""

from __future__ import annotations

import threading
from collections.abc import Callable

MEMO_FROM = 256  # a shorter text is searched each time (looking it up costs about as much)
MEMO_CHARS = 4 * 1024 * 1024  # past this many characters held, it starts afresh


class Memo:
    """`test(text)`, remembered for texts of `least` characters or more."""

    def __init__(
        self, test: Callable[[str], bool], least: int = MEMO_FROM, limit: int = MEMO_CHARS
    ) -> None:
        self._test = test
        self._least = least
        self._limit = limit
        self._seen: dict[str, bool] = {}
        self._held = 0
        self._lock = threading.Lock()  # writer threads scrub too

    def __call__(self, text: str) -> bool:
        if len(text) < self._least:
            return self._test(text)
        found = self._seen.get(text)
        if found is None:
            found = self._test(text)
            if len(text) <= self._limit:
                with self._lock:
                    if self._held + len(text) > self._limit:
                        self._seen.clear()
                        self._held = 0
                    self._seen[text] = found
                    self._held += len(text)
        return found

    def __len__(self) -> int:
        return len(self._seen)
