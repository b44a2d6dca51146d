"""The Typer app: parse options -> Settings -> call into proxy -> render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tapeproxy.cli import tools
from tapeproxy.cli.library import (
    CassettesOption,
    ConfigOption,
    IgnoreOption,
    JsonOption,
    UpstreamOption,
    existing,
    fail,
    open_library,
    option,
    sweep_cassette,
)
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.settings import Mode, RepeatPolicy, load_settings, parse_pairs

app = typer.Typer(
    name="tapeproxy",
    help="Record and replay LLM and HTTP API traffic through content-addressed cassettes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich's boxed tables cut option and variable names at 80 columns.
    rich_markup_mode=None,
)


def _print_version(given: bool) -> None:
    if given:
        from tapeproxy import __version__

        print(f"tapeproxy {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    """Record and replay LLM and HTTP API traffic through content-addressed cassettes."""


@app.command()
def serve(
    mode: Annotated[Mode | None, option("mode")] = None,
    host: Annotated[str | None, option("host")] = None,
    port: Annotated[int | None, option("port")] = None,
    cassettes: Annotated[str | None, option("cassettes")] = None,
    cassette: Annotated[str | None, option("cassette")] = None,
    upstream: Annotated[list[str] | None, option("upstream")] = None,
    live: Annotated[list[str] | None, option("live")] = None,
    record_failures: Annotated[
        bool | None, option("record_failures", "--no-record-failures")
    ] = None,
    replay_timing: Annotated[str | None, option("replay_timing")] = None,
    repeat: Annotated[RepeatPolicy | None, option("repeat")] = None,
    strict_order: Annotated[bool | None, option("strict_order", "--any-order")] = None,
    fail_on_unused: Annotated[bool | None, option("fail_on_unused", "--allow-unused")] = None,
    ignore: Annotated[list[str] | None, option("ignore")] = None,
    connect_timeout: Annotated[float | None, option("connect_timeout")] = None,
    read_timeout: Annotated[float | None, option("read_timeout")] = None,
    shutdown_timeout: Annotated[float | None, option("shutdown_timeout")] = None,
    log_level: Annotated[str | None, option("log_level")] = None,
    max_body: Annotated[str | None, option("max_body")] = None,
    max_record: Annotated[str | None, option("max_record")] = None,
    admin_token: Annotated[str | None, option("admin_token")] = None,
    redact_field: Annotated[list[str] | None, option("redact_field")] = None,
    redact_pattern: Annotated[list[str] | None, option("redact_pattern")] = None,
    ready_file: Annotated[Path | None, option("ready_file")] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="Config file. Default: ./tapeproxy.toml if present.", metavar="FILE"),
    ] = None,
) -> None:
    """Start the proxy. Point OPENAI_BASE_URL at http://HOST:PORT/openai/v1 and
    ANTHROPIC_BASE_URL at http://HOST:PORT/anthropic. Every option also reads TAPEPROXY_<OPTION>
    and tapeproxy.toml; the command line wins over the environment, which wins over the file."""
    options = dict(locals())
    options.pop("config")
    from tapeproxy.cli.server import serve as run_server

    try:
        if upstream:
            options["upstream"] = parse_pairs(upstream, "upstream")
        options["live"] = tuple(live) if live else None
        options["ignore"] = tuple(ignore) if ignore else None
        options["redact_field"] = tuple(redact_field) if redact_field else None
        options["redact_pattern"] = tuple(redact_pattern) if redact_pattern else None
        settings = load_settings(options, config=config)
    except ConfigError as exc:
        raise fail(exc.message) from exc
    raise typer.Exit(run_server(settings))


@app.command()
def rekey(
    name: Annotated[str, typer.Argument(help="The cassette to rekey.")],
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    dry_run: Annotated[bool, typer.Option(help="Show what would move; change nothing.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Move recordings to their keys under today's match rules.

    Run it after changing --ignore rules or [match.*] tables, so that no recording is
    orphaned. Requests that now match each other become ordinals in recorded order."""
    from tapeproxy.cli.output import print_rekey
    from tapeproxy.tools.rekey import rekey as rekey_cassette

    try:
        library = open_library(cassettes, upstream, ignore, config)
        report = rekey_cassette(library.store, existing(library, name), library.rules, dry_run)
        if not dry_run:
            sweep_cassette(library, name)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_rekey(report, dry_run, as_json)


@app.command()
def verify(
    name: Annotated[str | None, typer.Argument(help="One cassette; all when left out.")] = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    upgrade: Annotated[
        bool, typer.Option(help="Rewrite files of an older schema_version in today's.")
    ] = False,
) -> None:
    """Check every exchange file; exit 1 on a problem.

    Each file must parse under the schema, carry the key and ordinal its name says, and have
    that key under today's match rules. Leftover temporary files are reported too. Files of
    an older schema_version are read fine and listed; --upgrade rewrites them."""
    from tapeproxy.cli.output import print_verdicts
    from tapeproxy.tools.verify import verify as verify_cassette

    try:
        library = open_library(cassettes, upstream, ignore, config)
        names = (
            [existing(library, name, folder_will_do=True)] if name else (library.store.cassettes())
        )
        if not names:
            raise ConfigError(f"no cassettes under {library.store.where()} to verify")
        verdicts = [verify_cassette(library.store, n, library.rules, upgrade) for n in names]
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_verdicts(verdicts, as_json)
    if any(v.problems for v in verdicts):
        raise typer.Exit(1)


tools.register(app)
# The upkeep commands (prune, redact) register themselves on `app`.
import tapeproxy.cli.maintenance  # noqa: E402, F401

if __name__ == "__main__":
    app()
