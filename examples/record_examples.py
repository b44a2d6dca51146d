"""Record the example agents' cassettes (cassettes/examples/) anew, against the fake upstream
of the test suite, through the real server. Run from the repository root:

    .venv/bin/python examples/record_examples.py [NAME ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import mcp_example  # noqa: E402
from tests.e2e.examples import EXAMPLES, record  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402


def main(names: list[str]) -> int:
    chosen = [e for e in EXAMPLES if not names or e.name in names]
    for example in chosen:
        why = example.missing()
        if why:
            print(f"{example.name}: skipped ({why})")
            continue
        with FakeUpstream() as fake:
            output = record(example, ROOT / "cassettes", fake)
        print(f"{example.name}: recorded into cassettes/{example.cassette}: {output.strip()[-60:]}")
    if not names or "mcp-agent" in names:  # a model and an MCP tool server in one cassette
        with FakeUpstream() as fake:
            output = mcp_example.record(ROOT / "cassettes", fake)
        print(f"mcp-agent: recorded into cassettes/{mcp_example.CASSETTE}: {output.strip()[-60:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
