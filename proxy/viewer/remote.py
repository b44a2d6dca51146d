"""The misses and the refresh stamp of a tapeproxy server elsewhere, for `tapeproxy view
--server URL`: read from its control API (`GET /__tapeproxy/misses`, `GET
/__tapeproxy/stats`), straight to it, never through a proxy of the environment."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tapeproxy.errors import ConfigError
from tapeproxy.viewer.app import Live

MAX_ANSWER = 16 * 1024 * 1024  # 50 misses of 12 differences, excerpts of 1,000 characters
COUNTS = ("upstream_calls", "replayed", "recorded", "misses", "errors")


def check_server(url: str) -> str:
    """`url` without its trailing slash; a ConfigError in one line when it is no http URL."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--server {url!r}: give the server's URL, as `serve` prints it")
    return url.rstrip("/")


def remote(url: str, timeout: float = 5.0) -> Live:
    base = check_server(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get(path: str) -> dict[str, Any]:
        try:
            with opener.open(base + path, timeout=timeout) as answer:
                found = json.loads(answer.read(MAX_ANSWER))
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            raise ConfigError(f"cannot read {base}{path}: {exc}") from exc
        if not isinstance(found, dict):
            raise ConfigError(f"cannot read {base}{path}: not a tapeproxy server's answer")
        return found

    def misses() -> list[dict[str, Any]]:
        found = get("/__tapeproxy/misses").get("misses")
        return [_shaped(m) for m in found if isinstance(m, dict)] if isinstance(found, list) else []

    def stamp() -> int:
        stats = get("/__tapeproxy/stats")
        counts = [stats.get(name) for name in COUNTS]
        return sum(n for n in counts if isinstance(n, int) and not isinstance(n, bool))

    return Live(misses, stamp)


def _shaped(miss: dict[str, Any]) -> dict[str, Any]:
    """A remote miss as the misses page reads it: text where it shows text, a closest
    recording only where it names its file, differences only where they name their field.
    The server may be another version of tapeproxy, or no tapeproxy at all: what does not
    fit is left out."""
    shaped: dict[str, Any] = {
        name: value if isinstance(value := miss.get(name), str) else ""
        for name in ("cassette", "request", "key", "message")
    }
    closest = miss.get("closest")
    if isinstance(closest, dict) and isinstance(closest.get("file"), str):
        differences = closest.get("differences")
        listed = differences if isinstance(differences, list) else []
        named = [d for d in listed if isinstance(d, dict) and isinstance(d.get("path"), str)]
        shaped["closest"] = {"file": closest["file"], "differences": named}
    return shaped
