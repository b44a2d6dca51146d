"""The pytest plugin, another door onto the engine: one tapeproxy server per session (per xdist
worker), one cassette per test, and a test failed by the requests that missed its cassette.
This module is what pytest loads (entry point `pytest11`): the options, the marker and the
fixtures; the session itself is tapeproxy.cli.pytest_session."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from tapeproxy.cli.pytest_session import DEFAULT_CASSETTES, PLUGIN, WATCH, Plugin
from tapeproxy.cli.pytest_tape import Tape
from tapeproxy.modes import Mode

BASE_URL_VARIABLES = {"OPENAI_BASE_URL": "openai", "ANTHROPIC_BASE_URL": "anthropic"}
REPLAY_KEYS = {
    "OPENAI_API_KEY": "sk-tapeproxy-replay",
    "ANTHROPIC_API_KEY": "sk-ant-tapeproxy-replay",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tapeproxy", "tapeproxy record/replay proxy")
    group.addoption(
        "--tapeproxy-mode",
        choices=[mode.value for mode in Mode],
        default=None,
        help="Mode of every tapeproxy test, over a marker's mode (default: replay).",
    )
    group.addoption(
        "--tapeproxy-cassettes",
        default=None,
        metavar="DIR|URL",
        help="The cassette library: a folder, relative to the rootdir (default: "
        f"{DEFAULT_CASSETTES}), a file:// URL, or s3://BUCKET/PREFIX.",
    )
    group.addoption(
        "--tapeproxy-fail-on-unused",
        action="store_true",
        default=False,
        help="Fail a test that left recordings of its cassette unused.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tapeproxy(cassette=None, mode=None, faults=None): run the test against tapeproxy with "
        "its own cassette (named from the node id unless given) in this mode (--tapeproxy-mode "
        "wins), with these faults (specs as --fault takes; a new run of them per test).",
    )
    config.stash[PLUGIN] = Plugin(config)
    config.pluginmanager.register(config.stash[PLUGIN], "tapeproxy-session")


@pytest.fixture
def tapeproxy(request: pytest.FixtureRequest) -> Iterator[Tape]:
    """This test's tapeproxy: `url`, `base_url(upstream)`, `cassette`, `mode`, `path`. While
    the test runs, OPENAI_BASE_URL and ANTHROPIC_BASE_URL point at the server."""
    started = time.perf_counter()
    plugin = request.config.stash[PLUGIN]
    watch = plugin.begin(request.node)
    tape = watch.tape
    try:
        with pytest.MonkeyPatch.context() as patch:
            for variable, upstream in BASE_URL_VARIABLES.items():
                if upstream in tape.upstreams:
                    patch.setenv(variable, tape.base_url(upstream))
            if tape.mode is Mode.REPLAY:  # the SDKs want a key; replay needs none
                for variable, placeholder in REPLAY_KEYS.items():
                    if not os.environ.get(variable):
                        patch.setenv(variable, placeholder)
            watch.spent += time.perf_counter() - started
            yield tape
    finally:
        if not watch.ended:  # the test never ran (setup failed, skipped): close its run
            plugin.end(watch, passed=False)
        del request.node.stash[WATCH]


@pytest.fixture(autouse=True)
def _tapeproxy_marked(request: pytest.FixtureRequest) -> None:
    """A test marked @pytest.mark.tapeproxy gets the fixture without asking for it."""
    if request.node.get_closest_marker("tapeproxy") and "tapeproxy" not in request.fixturenames:
        request.getfixturevalue("tapeproxy")
