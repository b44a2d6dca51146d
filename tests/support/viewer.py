"""The cassette viewer as a user runs it (`tapeproxy view` in a process of its own), and a
library for it: the repository's examples, a copy of `example` whose answer holds markup
that must run nothing, and an exchange with an inline image."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from tests.support.serve import ROOT, Serve

OPENAI = "91011a519cbf50f19ae59da253d41954155deabece19a684b4ad64db550d0cf6.json"
# What a recorded answer may hold: were it not escaped, each would set the sentinel global.
PAYLOAD = (
    '<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> '
    "<b onmouseover=window.__pwned=3>bold?</b>"
)
IMAGE_FILE = "a" * 64 + ".json"
# The smallest PNG there is: one transparent pixel.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


# An SVG picture that would run script wherever a browser let it: as a document of its own,
# inline, or from the viewer's own origin (which the pages' policy allows).
SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" '
    b'onload="window.__pwned=4"><script>window.__pwned=5</script>'
    b'<script href="static/viewer.js"/>'
    b'<rect width="16" height="16" fill="#1849a9"/></svg>'
)


def make_library(tmp_path: Path) -> Path:
    """tmp_path/cassettes: `example`, `examples/*`, and `example-xss` (the same recordings,
    the OpenAI answer replaced by PAYLOAD, and one more exchange asking about two inline
    images, a PNG and an SVG (SVG), and one elsewhere)."""
    library = tmp_path / "cassettes"
    shutil.copytree(ROOT / "cassettes", library, ignore=shutil.ignore_patterns(".tapeproxy"))
    xss = library / "example-xss"
    shutil.copytree(library / "example", xss)
    data = json.loads((xss / OPENAI).read_text(encoding="utf-8"))
    data["response"]["body"]["json"]["choices"][0]["message"]["content"] = PAYLOAD
    (xss / OPENAI).write_text(json.dumps(data, indent=2), encoding="utf-8")
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    svg = "data:image/svg+xml;base64," + base64.b64encode(SVG).decode()
    data["key"], data["seq"] = IMAGE_FILE[:64], 9
    data["request"]["body"]["json"]["messages"] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "image_url", "image_url": {"url": svg}},
            ],
        }
    ]
    (xss / IMAGE_FILE).write_text(json.dumps(data, indent=2), encoding="utf-8")
    return library


class View(Serve):
    """`tapeproxy view --port 0` over a library; `url` ends with `/`."""

    command = "view"

    def __init__(self, library: Path, cwd: Path, *extra: str) -> None:
        super().__init__(["--cassettes", str(library), *extra], cwd)
