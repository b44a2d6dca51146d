"""Running the app on uvicorn: the ready line, bounded graceful shutdown, the end-of-run summary."""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import sys
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp

from llmtape.app import Server
from llmtape.rules import rule_warnings
from llmtape.settings import Settings, is_loopback
from llmtape.stats import Snapshot
from llmtape.store.fs import sweep_leftovers

log = logging.getLogger("llmtape")


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


def uvicorn_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
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
    )


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("llmtape")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def serve(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM. Exit status: 0, 1 when it could not start, 3 with
    --fail-on-unused when recordings went unused or a cassette it was told to serve was
    never touched."""
    configure_logging(settings.log_level)
    for warning in rule_warnings(settings.ignore):
        log.warning("%s", warning)
    if settings.cassettes.is_dir():
        swept = sweep_leftovers(settings.cassettes)
        if swept:
            log.info(
                "removed %d file(s) left over from interrupted writes in %s",
                len(swept),
                settings.cassettes,
            )
    if not is_loopback(settings.host):
        log.warning(
            "binding %s, which is not loopback: anyone who reaches this address can use this "
            "proxy and read what it replays. %s",
            settings.host,
            "Control requests that change state need the admin token."
            if settings.admin_token
            else "Control requests that change state are off; enable them with --admin-token TOKEN "
            "(or LLMTAPE_ADMIN_TOKEN) and `Authorization: Bearer TOKEN`.",
        )
    llmtape = Server(settings)
    server = ReadyServer(
        uvicorn_config(llmtape.app, settings),
        lambda url: print(f"llmtape {settings.mode.value} ready on {url}", flush=True),
    )
    # uvicorn raises SystemExit when it cannot start; its reason is already logged.
    with contextlib.suppress(SystemExit):
        server.run()
    if not server.started:
        log.error("could not listen on %s:%d; see the error above", settings.host, settings.port)
        return 1
    if llmtape.final is None:
        log.error("llmtape stopped before its cassettes were closed; see the error above")
        return 1
    return report(llmtape.final, settings)


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
            "llmtape (OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...)?",
            name,
        )
    if settings.fail_on_unused and (unused or final.untouched):
        what = [f"{unused} recording(s) went unused"] if unused else []
        what += [f"{len(final.untouched)} cassette(s) never touched"] if final.untouched else []
        log.error("--fail-on-unused: %s", ", ".join(what))
        return 3
    return 0
