"""Running the app on uvicorn: the ready line, bounded graceful shutdown, the end-of-run summary."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

import uvicorn
from starlette.types import ASGIApp

from tapeproxy.app import Server
from tapeproxy.doors.head_limits import HeadLimitedProtocol
from tapeproxy.engine.rules import rule_warnings
from tapeproxy.engine.stats import Snapshot
from tapeproxy.errors import ConfigError
from tapeproxy.logs import configure_logging, scrub_lines
from tapeproxy.modes import Mode
from tapeproxy.outputs import write_whole
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.settings import Settings, is_loopback
from tapeproxy.store import open_store
from tapeproxy.store.names import derived_name
from tapeproxy.store.protocol import CassetteStore

log = logging.getLogger("tapeproxy")

# uvicorn closes a connection this long idle after its last answer. A request's head has
# its own cap and deadline (tapeproxy.doors.head_limits). tapeproxy does not set
# `limit_concurrency`: uvicorn counts idle keep-alive connections against it, so a few idle
# sockets would turn every client's requests into 503s.
KEEP_ALIVE_SECONDS = 5


# Objects the cyclic collector lets pile up before it looks at the young ones (Python's own
# 700): each request in flight holds a hundred or so (coroutines, futures, cells), and with
# 32 in flight every young collection walked them all, every few requests (about 30 us of the
# loop per recorded request at 32 connections; bench/RESULTS.md).
GC_YOUNG = 10_000


class ReadyServer(uvicorn.Server):
    """Calls `on_ready(url)` once every socket listens, with the port really bound."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[str], None]) -> None:
        super().__init__(config)
        self.on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self.on_ready(f"http://{f'[{host}]' if ':' in host else host}:{port}")

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # uvicorn re-raises the captured SIGINT/SIGTERM after shutdown, so the process would
        # die of the signal; the contract is a clean exit 0 once the cassettes are on disk.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()


def uvicorn_config(
    app: ASGIApp,
    settings: Settings,
    keep_alive: int = KEEP_ALIVE_SECONDS,
    protocol: Callable[..., asyncio.Protocol] | None = None,
) -> uvicorn.Config:
    """uvicorn's settings for the app: `keep_alive` is the idle seconds before a connection
    closes (tests give a short one); `protocol` makes each connection's protocol (the
    forward door's, which hands the reverse proxy's requests to the usual one)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="debug" if settings.log_level == "debug" else "warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout),
        server_header=False,
        date_header=False,  # a live answer carries the upstream's Date; no second one
        timeout_keep_alive=keep_alive,
        # httptools, with a cap and a deadline on each request's head (uvicorn calls what it
        # is given with its keyword arguments: the class, or the forward door's factory)
        http=cast("type[asyncio.Protocol]", protocol or HeadLimitedProtocol),
        # WebSocket sessions (proxy/doors/sockets.py), on the websockets library's sans-I/O
        # protocol (its legacy one is deprecated).
        ws="websockets-sansio",
        ws_max_size=settings.max_frame,  # a client frame past it closes the session with 1009
        # tapeproxy is reached directly, never through a proxy of its own: a client's
        # X-Forwarded-For must not change the address a request is judged by (a loopback
        # client claiming 8.8.8.8, or the reverse). It also saves a middleware per request.
        proxy_headers=False,
    )


def write_ready_file(path: Path, url: str) -> None:
    """The URL in `path`, whole, so a reader never sees half of it."""
    write_whole(path, lambda out: out.write(url.encode() + b"\n"))


def serve(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM. Exit status: 0, 1 when it could not start (the port, the
    --ready-file, or a cassette library a recording mode cannot write), 2 for a --cassettes
    no backend opens, 3 with --fail-on-unused when recordings went unused or a cassette it
    was told to serve was never touched, 4 when a recording could not be written."""
    configure_logging(settings.log_level)
    # What is logged before the Server exists (an --cassettes no backend opens, the path it
    # cannot write, the rule warnings) is scrubbed as every later line is, by a scrubber of
    # the same rules, held until the Server's own is on the lines.
    early = Scrubber.build(settings.redact_field, settings.redact_pattern, settings.redact_keep)
    scrub_lines(early.text)
    store = opened_store(settings)
    if isinstance(store, int):
        return store
    warn_at_start(settings, store)
    tapeproxy = made_server(settings, store)
    if isinstance(tapeproxy, int):
        return tapeproxy
    del early  # (held weakly by the lines: gone, it is passed over from now on)
    announced: list[str] = []

    def ready(url: str) -> None:
        try:
            if settings.ready_file is not None:
                write_ready_file(settings.ready_file, url)
        except OSError as exc:
            log.error("could not write --ready-file %s: %s", settings.ready_file, exc)
            server.should_exit = True
            return
        announced.append(url)
        print(f"tapeproxy {settings.mode.value} ready on {url}", flush=True)

    door = tapeproxy.protocol
    config = uvicorn_config(tapeproxy.app, settings, protocol=door)
    server = ReadyServer(config, ready)
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    try:
        # uvicorn raises SystemExit when it cannot start; its reason is already logged.
        with contextlib.suppress(SystemExit):
            server.run()
    finally:
        if settings.ready_file is not None and announced:
            settings.ready_file.unlink(missing_ok=True)
    if not server.started:
        log.error("could not listen on %s:%d; see the error above", settings.host, settings.port)
        return 1
    if tapeproxy.final is None:
        log.error("tapeproxy stopped before its cassettes were closed; see the error above")
        return 1
    return report(tapeproxy.final, settings) if announced else 1


def made_server(settings: Settings, store: CassetteStore) -> Server | int:
    """The Server, or 2 when it cannot be made (--forward: where its CA certificate goes)."""
    try:
        return Server(settings, store)
    except ConfigError as exc:
        log.error("%s", exc.message)
        return 2


def opened_store(settings: Settings) -> CassetteStore | int:
    """The store --cassettes opens, which a recording mode can write; else the exit status
    (2: no backend opens it, 1: it cannot be written), with its reason logged."""
    try:
        store = open_store(settings.cassettes, settings.cache_size)
    except ConfigError as exc:
        log.error("%s", exc.message)
        return 2
    problem = unwritable(settings, store)
    if problem is not None:
        log.error("%s", problem)
        return 1
    return store


def warn_at_start(settings: Settings, store: CassetteStore) -> None:
    for warning in rule_warnings(settings.ignore):
        log.warning("%s", warning)
    if records(settings):
        # Beside the start, not before it: walking a 100,000-file library takes ~0.15 s.
        # Only a server that may write sweeps: a replay deletes nothing in a cassette folder.
        threading.Thread(target=_sweep, args=(store,), daemon=True).start()
    if not is_loopback(settings.host):
        log.warning(
            "binding %s, which is not loopback: anyone who reaches this address can use this "
            "proxy and read what it replays. %s",
            settings.host,
            "Control requests that change state need the admin token."
            if settings.admin_token
            else "Control requests that change state are off; enable them with --admin-token TOKEN "
            "(or TAPEPROXY_ADMIN_TOKEN) and `Authorization: Bearer TOKEN`.",
        )


def _sweep(store: CassetteStore) -> None:
    swept = store.sweep()
    if swept:
        log.info("removed %d file(s) left over from interrupted writes in %s", swept, store.where())


def report(final: Snapshot, settings: Settings) -> int:
    """The end-of-run summary: totals, then each run (ended by a PUT or by shutdown) that
    recorded something or left recordings unused."""
    counts, unused = final.counters, final.unused_total
    log.info(
        "stopped: %d replayed, %d recorded, %d misses, %d errors, %d upstream calls",
        counts.replayed,
        counts.recorded,
        counts.misses,
        counts.errors,
        counts.upstream_calls,
    )
    if counts.faults:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.faults_by_kind.items()))
        log.info("faults served: %d (%s), --fault-seed %d", counts.faults, kinds, final.fault_seed)
    for run in [*final.ended_runs, *final.runs]:
        if run.recorded_count:
            log.info("cassette %r: %d new recording(s)", run.cassette, run.recorded_count)
        if run.unused_count:
            log.warning(
                "cassette %r: %d recording(s) never used in a run: %s",
                run.cassette,
                run.unused_count,
                ", ".join(run.unused[:10]),
            )
    for name in final.untouched:
        log.log(
            logging.WARNING if settings.fail_on_unused else logging.INFO,
            "cassette %r was never touched: no request reached it; is the agent pointed at "
            "tapeproxy (OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...)?",
            name,
        )
    if counts.write_failures:
        log.error(
            "%d recording(s) could not be written into %s and are lost; see the errors above",
            counts.write_failures,
            settings.cassettes,
        )
        return 4
    if settings.fail_on_unused and (unused or final.untouched):
        what = [f"{unused} recording(s) went unused"] if unused else []
        what += [f"{len(final.untouched)} cassette(s) never touched"] if final.untouched else []
        log.error("--fail-on-unused: %s", ", ".join(what))
        return 3
    return 0


def records(settings: Settings) -> bool:
    """Whether the server starts in a mode that writes into the cassette library (partial
    replay writes the live upstreams' answers into `NAME.derived`)."""
    writing = settings.mode in (Mode.RECORD, Mode.AUTO, Mode.ONCE)
    return writing or (settings.mode is Mode.REPLAY and bool(settings.live))


def unwritable(settings: Settings, store: CassetteStore) -> str | None:
    """Why a recording mode could not write into the cassette it starts on (the start-up one,
    or its `.derived` one under partial replay), or None; asked of the store, which may make
    the library and try a write, as the recordings will: a container whose user cannot write
    the mounted folder must not look healthy and lose every recording."""
    if not records(settings):
        return None
    live = settings.mode is Mode.REPLAY
    return store.unwritable(derived_name(settings.cassette) if live else settings.cassette)
