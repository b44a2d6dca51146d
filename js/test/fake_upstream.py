"""Runs the repository's fake provider (tests/fakes/upstream.py) for the JS suites: prints its
URL, then serves until its standard input closes (the test runner that started it ended)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.upstream import FakeUpstream

with FakeUpstream() as fake:
    print(fake.url, flush=True)
    sys.stdin.read()
