"""The Typer app: parse options -> Settings -> call into proxy -> render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proxy.errors import ConfigError
from proxy.settings import Mode, RepeatPolicy, load_settings, parse_pairs

app = typer.Typer(
    name="llmtape",
    help="Record and replay LLM and HTTP API traffic through content-addressed cassettes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Record and replay LLM and HTTP API traffic through content-addressed cassettes."""


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"llmtape: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


@app.command()
def serve(
    mode: Annotated[Mode | None, typer.Option(help="record, replay, auto or passthrough.", show_default="replay")] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind.", show_default="127.0.0.1")] = None,
    port: Annotated[int | None, typer.Option(help="Port to bind; 0 picks a free one.", show_default="8787")] = None,
    cassettes: Annotated[Path | None, typer.Option(help="Cassette library folder.", show_default="./cassettes")] = None,
    cassette: Annotated[str | None, typer.Option(help="Cassette for requests that name none.", show_default="default")] = None,
    upstream: Annotated[list[str] | None, typer.Option(help="NAME=URL: add an upstream or override a built-in (repeatable).")] = None,
    live: Annotated[list[str] | None, typer.Option(help="Upstream that runs live in replay mode; answers go to CASSETTE.derived (repeatable).")] = None,
    record_failures: Annotated[bool | None, typer.Option("--record-failures/--no-record-failures", help="Also record 429/5xx answers and failed streams.")] = None,
    replay_timing: Annotated[str | None, typer.Option(help="none, recorded, or a factor on recorded gaps (0.5 = twice as fast).", show_default="none")] = None,
    repeat: Annotated[RepeatPolicy | None, typer.Option(help="When a run asks more often than recorded: error, repeat-last or cycle.", show_default="error")] = None,
    strict_order: Annotated[bool | None, typer.Option("--strict-order/--any-order", help="Replay requests must come in the recorded order.")] = None,
    fail_on_unused: Annotated[bool | None, typer.Option("--fail-on-unused/--allow-unused", help="Exit 3 at shutdown if recordings went unused.")] = None,
    ignore: Annotated[list[str] | None, typer.Option(help="Match rule UPSTREAM:WHAT:NAME, e.g. openai:body:user (repeatable).")] = None,
    connect_timeout: Annotated[float | None, typer.Option(help="Seconds to connect upstream.", show_default="10")] = None,
    read_timeout: Annotated[float | None, typer.Option(help="Seconds the upstream may stay silent mid-answer.", show_default="300")] = None,
    shutdown_timeout: Annotated[float | None, typer.Option(help="Seconds open connections get at shutdown.", show_default="5")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error.", show_default="info")] = None,
    config: Annotated[Path | None, typer.Option(help="Config file.", show_default="./llmtape.toml if present")] = None,
) -> None:
    """Start the proxy. Point OPENAI_BASE_URL at http://HOST:PORT/openai/v1 and
    ANTHROPIC_BASE_URL at http://HOST:PORT/anthropic. Every option also reads LLMTAPE_<OPTION>
    and llmtape.toml; the command line wins over the environment, which wins over the file."""
    options = dict(locals())
    options.pop("config")
    from cli.server import serve as run_server

    try:
        if upstream:
            options["upstream"] = parse_pairs(upstream, "upstream")
        options["live"] = tuple(live) if live else None
        options["ignore"] = tuple(ignore) if ignore else None
        settings = load_settings(options, config=config)
    except ConfigError as exc:
        raise fail(exc.message) from exc
    raise typer.Exit(run_server(settings))


if __name__ == "__main__":
    app()
