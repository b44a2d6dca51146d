"""The Typer app: every command registered here, in one table, and `serve` itself (its options
are Settings' fields). Each command parses its options, calls into the package, renders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tapeproxy.cli import drift, imports, looking, maintenance, run, tools
from tapeproxy.cli.library import fail, option
from tapeproxy.errors import ConfigError
from tapeproxy.settings import Settings
from tapeproxy.sources import load_settings, parse_pairs


def _print_version(given: bool) -> None:
    """--version: print it and stop, before any command runs."""
    if given:
        from tapeproxy import __version__

        print(f"tapeproxy {__version__}")
        raise typer.Exit()


def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    """Record and replay LLM and HTTP API traffic through content-addressed cassettes."""


def serve(
    # The choices (mode, repeat) are taken as text and checked by Settings, as a value from
    # the environment or the file is: Typer's own check words its refusal in pydantic's.
    mode: Annotated[str | None, option("mode")] = None,
    host: Annotated[str | None, option("host")] = None,
    port: Annotated[int | None, option("port")] = None,
    cassettes: Annotated[str | None, option("cassettes")] = None,
    cassette: Annotated[str | None, option("cassette")] = None,
    upstream: Annotated[list[str] | None, option("upstream")] = None,
    live: Annotated[list[str] | None, option("live")] = None,
    record_failures: Annotated[
        bool | None, option("record_failures", "--no-record-failures")
    ] = None,
    resign: Annotated[str | None, option("resign")] = None,
    replay_timing: Annotated[str | None, option("replay_timing")] = None,
    repeat: Annotated[str | None, option("repeat")] = None,
    strict_order: Annotated[bool | None, option("strict_order", "--any-order")] = None,
    fail_on_unused: Annotated[bool | None, option("fail_on_unused", "--allow-unused")] = None,
    ignore: Annotated[list[str] | None, option("ignore")] = None,
    connect_timeout: Annotated[float | None, option("connect_timeout")] = None,
    read_timeout: Annotated[float | None, option("read_timeout")] = None,
    shutdown_timeout: Annotated[float | None, option("shutdown_timeout")] = None,
    log_level: Annotated[str | None, option("log_level")] = None,
    max_body: Annotated[str | None, option("max_body")] = None,
    max_record: Annotated[str | None, option("max_record")] = None,
    max_frame: Annotated[str | None, option("max_frame")] = None,
    cache_size: Annotated[str | None, option("cache_size")] = None,
    admin_token: Annotated[str | None, option("admin_token")] = None,
    redact_field: Annotated[list[str] | None, option("redact_field")] = None,
    redact_pattern: Annotated[list[str] | None, option("redact_pattern")] = None,
    redact_keep: Annotated[list[str] | None, option("redact_keep")] = None,
    ready_file: Annotated[Path | None, option("ready_file")] = None,
    fault: Annotated[list[str] | None, option("fault")] = None,
    fault_seed: Annotated[int | None, option("fault_seed")] = None,
    forward: Annotated[bool | None, option("forward", "--no-forward")] = None,
    ca_cert: Annotated[Path | None, option("ca_cert")] = None,
    intercept: Annotated[list[str] | None, option("intercept")] = None,
    allow_host: Annotated[list[str] | None, option("allow_host")] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="Config file. Default: ./tapeproxy.toml if present.", metavar="FILE"),
    ] = None,
) -> None:
    """Start the proxy. Point OPENAI_BASE_URL at http://HOST:PORT/openai/v1 and
    ANTHROPIC_BASE_URL at http://HOST:PORT/anthropic. Every option also reads TAPEPROXY_<OPTION>
    and tapeproxy.toml; the command line wins over the environment, which wins over the file."""
    options = dict(locals())  # every parameter, before any other name is bound here
    from tapeproxy.cli.server import serve as run_server

    raise typer.Exit(run_server(serve_settings(options)))


def serve_settings(options: dict[str, Any]) -> Settings:
    """serve's parameters (None: not given) -> Settings, under the environment and the file."""
    config = options.pop("config")
    many = ("live", "ignore", "redact_field", "redact_pattern", "redact_keep", "fault")
    for field in (*many, "intercept", "allow_host"):
        options[field] = tuple(options[field]) if options[field] else None
    try:
        if options["upstream"]:
            options["upstream"] = parse_pairs(options["upstream"], "upstream")
        return load_settings(options, config=config)
    except ConfigError as exc:
        raise fail(exc.message) from exc


# Every command, in the order `tapeproxy --help` lists them. A command's module only defines
# it: registering happens here, so importing a module never changes the app.
COMMANDS = (
    ("serve", serve),
    ("run", run.command(serve, serve_settings)),
    ("rekey", maintenance.rekey),
    ("verify", maintenance.verify),
    ("ls", tools.list_cassettes),
    ("show", tools.show),
    ("diff", tools.diff),
    ("prune", maintenance.prune),
    ("redact", maintenance.redact),
    ("report", looking.report),
    ("view", looking.view),
    ("drift", drift.drift),
)
# Commands that take a second word (`tapeproxy import vcr`): each group's help and its
# commands, listed after COMMANDS.
GROUPS = (
    (
        "import",
        "Bring in cassettes other tools recorded: VCR.py, HAR.",
        (("vcr", imports.import_vcr), ("har", imports.import_har)),
    ),
    ("export", "Write a cassette in another tool's format: HAR.", (("har", imports.export_har),)),
)


def command_names() -> list[str]:
    """Every command as it is typed, groups and their commands too, in --help's order."""
    names = [name for name, _ in COMMANDS]
    for group, _, commands in GROUPS:
        names += [group, *(f"{group} {name}" for name, _ in commands)]
    return names


def build_app() -> typer.Typer:
    """The tapeproxy command: the --version callback and each command of COMMANDS."""
    built = typer.Typer(
        name="tapeproxy",
        help="Record and replay LLM and HTTP API traffic through content-addressed cassettes.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Plain help: rich's boxed tables cut option and variable names at 80 columns.
        rich_markup_mode=None,
    )
    built.callback()(main)
    for name, command in COMMANDS:
        built.command(name)(command)
    for group, text, commands in GROUPS:
        sub = typer.Typer(name=group, help=text, no_args_is_help=True, rich_markup_mode=None)
        for name, subcommand in commands:
            sub.command(name)(subcommand)
        built.add_typer(sub)
    return built


app = build_app()

if __name__ == "__main__":
    app()
