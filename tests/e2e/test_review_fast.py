"""Adversarial review of the faster paths (d9adc8b, abf7369) on the real server: the request
line as it goes upstream, and the client connection's joined writes (Coalescing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/base#frag", "http://127.0.0.1:9/a\tb"])
def test_an_upstream_url_that_would_break_the_request_line_is_refused_at_start(
    url: str, tmp_path: Path
) -> None:
    """The request line takes the upstream URL's path as it is (d9adc8b): a `#frag` went out
    as `GET /base#frag/item` (RFC 9112 origin-form holds no fragment; urlsplit had dropped
    it, and the client's path with it), a tab raw. Such a URL is refused, with the reason."""
    done = subprocess.run(
        [sys.executable, "-m", "llmtape", "serve", "--port", "0", "--upstream", f"tools={url}"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "a URL holds no space and no #fragment" in done.stderr
