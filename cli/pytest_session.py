"""One pytest session's tapeproxy: the server (started by the first test that needs it), each
test's run of its cassette and mode, and what the run came to (misses, unused recordings)."""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tapeproxy.cli.pytest_clock import SPENT, Clock
from tapeproxy.cli.pytest_marker import choose, marked_faults
from tapeproxy.cli.pytest_tape import Tape
from tapeproxy.cli.pytest_usage import USAGE, WORKER_LINES, Usage
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.modes import SERVES_RECORDINGS, Mode
from tapeproxy.store import anchored, split_location

if TYPE_CHECKING:  # the server's side: imported by the first test that needs it (`server`)
    from tapeproxy.cli.background import BackgroundServer
    from tapeproxy.engine.core import Engine
    from tapeproxy.engine.run import Run
    from tapeproxy.engine.runs import Opened
    from tapeproxy.engine.stats import RunSummary
    from tapeproxy.settings import Settings

DEFAULT_CASSETTES = "tests/cassettes"
MISSES_SHOWN = 5


@dataclass
class Watch:
    """One test's use of tapeproxy: its tape, the miss count when it began, and the time the
    plugin took for it so far (its hooks and its calls to the server)."""

    tape: Tape
    misses_before: int
    opened: Opened | None  # what its server read ahead as it began
    ended: bool = False
    own: bool = True  # the cassette is the test's own (from its node id), not a marker's
    spent: float = 0.0  # seconds


@dataclass(frozen=True)
class Verdict:
    """What one test's run came to."""

    kind: str | None  # replayed, recorded, missed; None when it made no request
    misses: list[str]
    unused: RunSummary | None


PLUGIN = pytest.StashKey["Plugin"]()
WATCH = pytest.StashKey[Watch]()


class Plugin:
    """The session's state: the options, the server (started by the first test that needs
    it) and the tally for the terminal summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        given = config.getoption("tapeproxy_cassettes")
        self.cassettes = anchored(given or DEFAULT_CASSETTES, config.rootpath)
        self.mode: str | None = config.getoption("tapeproxy_mode")
        self.fail_on_unused: bool = config.getoption("tapeproxy_fail_on_unused")
        self.tally: Counter[str] = Counter()
        self.usage = Usage(self.cassettes)  # each test's tokens and cost
        self.clock = Clock()  # the time the plugin took, measured
        self._prefix = self._library_prefix()  # a path resolved once, not per test
        self._server: BackgroundServer | None = None

    @property
    def server(self) -> BackgroundServer:
        if self._server is None:
            # Imported here, not as pytest loads the plugin: the server's side (settings,
            # pydantic, engine) takes ~0.35 s, unpaid by a run or xdist controller not using it.
            from tapeproxy.cli.background import BackgroundServer

            self._server = BackgroundServer(self._settings()).start()
        return self._server

    def _settings(self) -> Settings:
        """Upstreams and match rules as `tapeproxy serve` reads them; the plugin picks where."""
        from tapeproxy.settings import env_name
        from tapeproxy.sources import DEFAULT_CONFIG_FILE, load_settings

        config = None
        root_file = self.config.rootpath / DEFAULT_CONFIG_FILE
        if env_name("config") not in os.environ and root_file.is_file():
            config = root_file
        cli = {"host": "127.0.0.1", "port": 0, "cassettes": self.cassettes, "mode": "replay"}
        try:
            settings = load_settings(cli, config=config)
            split_location(settings.cassettes)  # a backend opens it
            return settings
        except ConfigError as exc:
            raise pytest.UsageError(f"tapeproxy: {exc.message}") from exc

    def begin(self, item: pytest.Item) -> Watch:
        """Switch the server to this test's cassette and mode: a fresh run of the cassette."""
        cassette, mode, own = choose(item, self.mode, self._prefix)
        server = self.server
        engine = server.engine
        faults = marked_faults(item, engine.settings.fault)
        opened = self._open(engine, cassette, mode)

        async def switch() -> int:
            await engine.switch(cassette, mode, opened)
            engine.set_faults(faults)  # a new run of faults with every test
            return engine.counters.misses

        misses = server.call(switch)
        upstreams = tuple(sorted(engine.providers))
        tape = Tape(
            server.url, cassette, mode, self.cassettes, upstreams, engine.store.where(cassette)
        )
        watch = item.stash[WATCH] = Watch(tape, misses, opened, own=own)
        return watch

    @staticmethod
    def _open(engine: Engine, cassette: str, mode: Mode) -> Opened | None:
        """What the test's run starts from, read in this thread, which waits anyway: its first
        request then waits for no trip to a worker thread. If it cannot be read, the first
        request reads it and the test gets the error the way a client would."""
        try:
            return engine.runs.open(cassette, mode in SERVES_RECORDINGS)
        except (TapeproxyError, OSError):
            return None

    def _library_prefix(self) -> str | None:
        """The folder that holds the cassette library, relative to the rootdir (`tests` for
        tests/cassettes): test modules under it are named without it."""
        try:
            return (  # a URL is under no rootdir
                Path(self.cassettes).parent.relative_to(self.config.rootpath.resolve()).as_posix()
            )
        except ValueError:
            return None

    def end(self, watch: Watch, passed: bool) -> Verdict:
        """End the test's run and read what it came to. A record run that passed prunes what
        it did not record from the test's own cassette, which then holds exactly this run; a
        cassette a marker named may be shared by other tests, so nothing of it is deleted
        (not even the repeats this run asked fewer times). A test that did not pass leaves a
        note `tapeproxy prune` will not act on."""
        started = time.perf_counter()
        watch.ended = True
        tape, engine, before = watch.tape, self.server.engine, watch.misses_before
        prune = passed and tape.mode is Mode.RECORD and watch.own

        async def take() -> tuple[list[tuple[str, Run | None]], int, list[dict[str, Any]]]:
            taken = await engine.take_run(tape.cassette)
            misses = engine.counters.misses
            return taken, misses, list(engine.misses) if misses > before else []

        taken, misses, journal = self.server.call(take)
        summary = engine.close_run(taken, prune, watch.own, not passed)
        count = misses - before
        messages = [entry["message"] for entry in reversed(journal[: min(count, len(journal))])]
        messages += ["(a miss no longer in the journal: see the log)"] * (count - len(messages))
        kind = None
        if count:
            kind = "missed"
        elif summary is not None and summary.recorded_count:
            kind = "recorded"
        elif summary is not None and summary.served:
            kind = "replayed"
        unused = summary if summary is not None and summary.unused_count else None
        self._learn(watch, kind)
        watch.spent += time.perf_counter() - started
        return Verdict(kind, messages, unused)

    def _learn(self, watch: Watch, kind: str | None) -> None:
        """A replaying test's tokens and cost, from what its server read ahead (a replay
        writes nothing: that is what the cassette holds); any other test's cassette is read
        at the session's end."""
        opened, watch.opened = watch.opened, None
        if watch.tape.mode is not Mode.REPLAY:
            self.usage.forget(watch.tape.cassette)
        elif kind and opened is not None and opened.read and opened.whole:
            self.usage.learn(watch.tape.cassette, opened.read.values())

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        watch = item.stash.get(WATCH, None)
        verdict = None
        if call.when == "call" and watch is not None and not watch.ended:
            verdict = self.end(watch, passed=call.excinfo is None)
            if verdict.kind:
                item.user_properties.append(("tapeproxy", verdict.kind))
                item.user_properties.append((USAGE, watch.tape.cassette))
            item.user_properties.append((SPENT, watch.spent))
        report = yield
        if verdict is not None and watch is not None:
            self._judge(report, watch.tape, verdict)
        return report

    def _judge(self, report: pytest.TestReport, tape: Tape, verdict: Verdict) -> None:
        problems = []
        if verdict.misses:
            shown = "\n\n".join(verdict.misses[:MISSES_SHOWN])
            more = len(verdict.misses) - MISSES_SHOWN
            problems.append(
                f"tapeproxy: {len(verdict.misses)} request(s) missed cassette {tape.cassette!r} "
                f"(mode {tape.mode.value}, in {tape.cassettes}):\n{shown}"
                + (f"\n... and {more} more" if more > 0 else "")
                + "\nWith pytest: --tapeproxy-mode record records the test anew, auto adds to it."
            )
        if verdict.unused is not None and self.fail_on_unused:
            run = verdict.unused
            problems.append(
                f"--tapeproxy-fail-on-unused: {run.unused_count} recording(s) of cassette "
                f"{tape.cassette!r} went unused: {', '.join(run.unused[:10])}"
            )
        if not problems:
            return
        text = "\n\n".join(problems)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = text
        else:
            report.sections.append(("tapeproxy", text))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Tally each test once, on the controller too (xdist sends user_properties)."""
        if report.when == "call":
            for name, value in report.user_properties:
                if name == "tapeproxy":
                    self.tally[str(value)] += 1
                elif name == USAGE:
                    self.usage.used[report.nodeid] = str(value)
                elif name == SPENT:
                    self.clock.add(value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.tally:
            counts = self.tally
            terminalreporter.write_line(
                f"tapeproxy: {counts['replayed']} replayed, {counts['recorded']} recorded, "
                f"{counts['missed']} missed (cassettes in {self.cassettes})"
            )
        self.usage.write(terminalreporter)
        self.clock.write(terminalreporter)

    def pytest_sessionfinish(self) -> None:
        self.stop()
        output = getattr(self.config, "workeroutput", None)  # an xdist worker's, to send
        if output is not None and self.usage.used:
            with contextlib.suppress(TapeproxyError, OSError):  # the controller tells it
                output[WORKER_LINES] = self.usage.lines()

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's: a worker finished
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.usage.known.update(getattr(node, "workeroutput", {}).get(WORKER_LINES, {}))
