"""What the pytest plugin's `tapeproxy` fixture gives a test (`Tape`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tapeproxy.modes import Mode

SDK_PATHS = {"openai": "/v1"}  # what an SDK's base URL adds after the upstream's prefix


@dataclass(frozen=True)
class Tape:
    """What the `tapeproxy` fixture gives a test: the server's URL and this test's cassette."""

    url: str
    cassette: str
    mode: Mode
    cassettes: str  # the library: a folder, or a URL
    upstreams: tuple[str, ...]
    where: str  # the cassette's place, as its store names it: a folder, or a URL

    def base_url(self, upstream: str) -> str:
        """The base URL an SDK of `upstream` takes: `.../openai/v1`, `.../anthropic`, ..."""
        if upstream not in self.upstreams:
            raise ValueError(
                f"no upstream named {upstream!r}; known upstreams: {', '.join(self.upstreams)}"
            )
        return f"{self.url}/{upstream}{SDK_PATHS.get(upstream, '')}"

    @property
    def path(self) -> Path:
        """The cassette's folder (in a folder library; `where` names the place in any)."""
        return Path(self.where)
