"""The generated test suite of bench/suite.py: one project per tool, the same N tests in each,
every test making 3 calls with the official openai SDK (2 JSON, 1 stream of STREAM_FRAMES
chunks) against the fake provider, directly or through the tool under test.

Each test builds its own client, as tests do, over one TLS context per file. The SDK's own
default builds a context per client by loading the system's certificates: 25-60 ms on the
bench machine, the same for every tool, and its swing over a 200-test suite was larger than
the few ms per test the benchmark has to tell apart. Each client still opens its own
connections."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.apps import stream_model
from bench.procs import clean_env

STREAM_FRAMES = 20  # the stream's chunks, `data: [DONE]` included
TESTS_PER_FILE = 50
TOOLS = ("none", "tapeproxy", "vcr")
# tool -> its pytest plugin's module. A run loads only its tool's plugin (and xdist's): the
# plugins this venv holds besides (hypothesis's session summary alone costs ~1.7 s of CPU in
# every process) would be the same for every tool and swing more than the tools differ.
PLUGINS = {"none": (), "tapeproxy": ("tapeproxy.cli.pytest_plugin",),
           "vcr": ("pytest_recording.plugin",)}  # fmt: skip
KEY = "sk-bench-not-a-real-key"

HEAD = """import ssl

import openai
import pytest

pytestmark = {mark}
TLS = ssl.create_default_context()  # the certificates loaded once, not per client


def new_client():
    return openai.OpenAI(max_retries=0, http_client=openai.DefaultHttpxClient(verify=TLS))


def ask(client, question):
    answer = client.chat.completions.create(
        model="bench-json", messages=[{{"role": "user", "content": question}}]
    )
    return answer.choices[0].message.content


def stream(client, question):
    chunks = client.chat.completions.create(
        model={stream_model!r}, messages=[{{"role": "user", "content": question}}], stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
"""

TEST = """

def test_{n}():
    client = new_client()
    assert ask(client, "question {n} a")
    assert ask(client, "question {n} b")
    assert stream(client, "question {n} c")
"""

# pytest-recording's own settings: match on the body too (tapeproxy keys on it), and the
# key kept out of the cassette (tapeproxy never writes one).
VCR_CONFTEST = """import pytest


@pytest.fixture(scope="session")
def vcr_config():
    return {
        "match_on": ["method", "scheme", "host", "port", "path", "query", "body"],
        "filter_headers": ["authorization"],
    }
"""

MARKS = {"none": "[]", "tapeproxy": "pytest.mark.tapeproxy", "vcr": "pytest.mark.vcr"}


@dataclass(frozen=True)
class Project:
    """One tool's copy of the suite, and how to run it."""

    tool: str
    folder: Path
    tests: int

    def argv(self, mode: str, workers: int) -> list[str]:
        """pytest in a fresh interpreter, replaying or recording (`mode`) on `workers`."""
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
        argv += ["-p", "xdist.plugin", "-n", str(workers)] if workers else []
        for plugin in PLUGINS[self.tool]:
            argv += ["-p", plugin]
        if self.tool == "tapeproxy":
            argv += ["--tapeproxy-mode", "replay" if mode == "replay" else "record"]
        elif self.tool == "vcr":
            argv += ["--record-mode", "none" if mode == "replay" else "all"]
        return argv

    def env(self, fake_url: str) -> dict[str, str]:
        env = {**clean_env(), "OPENAI_API_KEY": KEY, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        for name in ("OPENAI_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.pop(name, None)
        if self.tool == "tapeproxy":
            env["TAPEPROXY_UPSTREAM"] = f"openai={fake_url}"
        else:  # the SDK goes to the fake itself: VCR.py patches it in-process
            env["OPENAI_BASE_URL"] = f"{fake_url}/v1"
        env["NO_PROXY"] = "127.0.0.1,localhost"
        return env


def make_project(parent: Path, tool: str, tests: int) -> Project:
    """Write `tool`'s copy of the suite of `tests` tests under `parent`."""
    folder = parent / tool
    (folder / "tests").mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "tests" / "__init__.py").write_text("")
    if tool == "vcr":
        (folder / "tests" / "conftest.py").write_text(VCR_CONFTEST)
    head = HEAD.format(mark=MARKS[tool], stream_model=stream_model(STREAM_FRAMES, 0))
    for start in range(0, tests, TESTS_PER_FILE):
        body = "".join(TEST.format(n=n) for n in range(start, min(start + TESTS_PER_FILE, tests)))
        name = f"test_suite_{start // TESTS_PER_FILE:03d}.py"
        (folder / "tests" / name).write_text(head + body)
    return Project(tool, folder, tests)


def recordings(project: Project) -> int:
    """Files the tool keeps its recordings in (a check that it recorded something)."""
    count = 0
    for _, dirs, files in os.walk(project.folder / "tests"):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        count += sum(name.endswith((".json", ".yaml")) for name in files)
    return count
