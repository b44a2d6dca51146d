"""The commands that look at a library: `report` (for CI: Markdown, JSON, JUnit) and `view`
(the read-only cassette viewer in a browser)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tapeproxy.cli.library import (
    CassettesOption,
    ConfigOption,
    PricesOption,
    fail,
    library_scrubber,
    open_library,
    price_table,
    progress,
)
from tapeproxy.errors import ConfigError, TapeproxyError

VIEW_PORT = 8790


def report(
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown", help="A Markdown table, for a CI job summary ($GITHUB_STEP_SUMMARY)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    junit: Annotated[
        Path | None,
        typer.Option(help="Also write a JUnit XML report to FILE.", metavar="FILE"),
    ] = None,
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
) -> None:
    """Per cassette (with the pytest plugin: per test) the exchanges, tokens and cost it holds,
    and the misses and faults of its last finished run (read from the state folder,
    <library>/.tapeproxy/), then the last `tapeproxy drift` report kept there. Markdown by
    default; exit 0 whatever the runs came to, 2 on an error."""
    from tapeproxy.cli.reports import print_json
    from tapeproxy.tools.listing import count_files
    from tapeproxy.tools.report import junit as junit_xml
    from tapeproxy.tools.report import markdown as markdown_text
    from tapeproxy.tools.report import report as build

    if markdown and as_json:
        raise fail("give one of --markdown and --json", as_json)
    try:
        library = open_library(cassettes, None, None, config, rules=False)
        table = price_table(prices, config)
        names = library.store.cassettes()
        with progress(lambda: count_files(library.store, names), "reading cassettes") as tick:
            entries = build(library.store, names, table, tick)
        if junit is not None:
            _write(junit, junit_xml(entries))
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    from tapeproxy.tools.driftreport import last, last_markdown

    drift = last(library.store)  # the last `tapeproxy drift`, when one left its report
    if as_json:
        shown = {"cassettes": [e.to_dict() for e in entries], "prices": list(table.sources)}
        print_json({**shown, "drift": drift} if drift is not None else shown)
    else:
        print(markdown_text(entries, table) + (last_markdown(drift) if drift else ""), end="")


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write the JUnit report {path}: {exc.strerror}") from exc


def view(
    port: Annotated[
        int, typer.Option(help="The port on 127.0.0.1 (0: a free one).", metavar="PORT")
    ] = VIEW_PORT,
    server: Annotated[
        str | None,
        typer.Option(
            help="A running tapeproxy serve (its URL): the page shows its last misses, and "
            "follows it as exchanges happen. Give --cassettes its library.",
            metavar="URL",
        ),
    ] = None,
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
) -> None:
    """Look at the cassettes in a browser: a read-only page on 127.0.0.1 (its URL is printed)
    with every cassette's exchanges, tokens and cost, each exchange as a conversation, and
    two cassettes compared; with --server, a running server's last misses. No cassette is
    written (a summary of each file is kept in the state folder); no asset comes from
    another host. A running `tapeproxy serve` shows the same
    page, with its misses, at /__tapeproxy/ui/."""
    import contextlib

    from tapeproxy.cli.server import ReadyServer
    from tapeproxy.viewer.app import viewer_app
    from tapeproxy.viewer.remote import remote

    if not 0 <= port <= 65535:
        raise fail(f"--port {port}: a port is 0 to 65535")
    try:
        library = open_library(cassettes, None, None, config, rules=False)
        table = price_table(prices, config)
        live = remote(server) if server is not None else None
        app = viewer_app(library.store, table, live, scrub=library_scrubber(config).text)
    except TapeproxyError as exc:
        raise fail(exc) from exc

    def ready(url: str) -> None:
        print(f"tapeproxy view of {library.store.where()} on {url}/", flush=True)

    running = ReadyServer(view_config(app, port), ready)
    with contextlib.suppress(SystemExit):  # uvicorn's reason for not starting is logged
        running.run()
    if not running.started:
        raise fail(f"could not listen on 127.0.0.1:{port}; see the error above", code=1)
    abandon_pages()


VIEW_GRACE = 3  # seconds a stopping viewer lets a page under way finish


def view_config(app: Any, port: int) -> Any:
    """uvicorn's settings for the viewer: quiet, and a bounded grace when it stops."""
    import uvicorn

    return uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=VIEW_GRACE,
    )


def abandon_pages() -> None:
    """Exit now, when a page is still being worked out in a worker thread (a cassette that
    takes minutes to read): it only reads, so nothing is lost, and the viewer stops on
    SIGTERM within its grace whatever a page is doing (Python would wait for the thread)."""
    import os
    import sys
    import threading

    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
