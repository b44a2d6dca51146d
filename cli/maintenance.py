"""The cassette upkeep commands: `tapeproxy prune` and `tapeproxy redact`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from tapeproxy.cli.library import (
    CassettesOption,
    ConfigOption,
    IgnoreOption,
    JsonOption,
    UpstreamOption,
    existing,
    fail,
    open_library,
    sweep_cassette,
)
from tapeproxy.cli.main import app
from tapeproxy.cli.output import make_console, print_json
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.sources import load_settings
from tapeproxy.tools.prune import PruneReport
from tapeproxy.tools.redact import RedactReport

DryRun = Annotated[bool, typer.Option(help="Show what would change; change nothing.")]


@app.command()
def prune(
    name: Annotated[str, typer.Argument(help="The cassette to prune.")],
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    dry_run: DryRun = False,
    as_json: JsonOption = False,
) -> None:
    """Delete the recordings the last finished replay run of a cassette did not use.

    A replay run is finished by a PUT on /__tapeproxy/cassette or by stopping the server; it
    leaves a note of what it used in the library's state folder, .tapeproxy/runs/ (never in
    the cassette). Recordings of upstreams that ran live are kept. With no such note nothing
    is deleted and the exit status is 2."""
    from tapeproxy.tools.prune import prune as prune_cassette

    try:
        library = open_library(cassettes, None, None, config, rules=False)
        report = prune_cassette(library.store, existing(library, name), dry_run)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_prune(report, as_json)


def print_prune(report: PruneReport, as_json: bool) -> None:
    if as_json:
        print_json(asdict(report))
        return
    console = make_console()
    verb = "would delete" if report.dry_run else "deleted"
    for file in report.pruned:
        console.print(f"  {file}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"cassette {report.cassette!r}: {verb} {len(report.pruned)} recording(s) the last "
        f"replay run did not use, {report.kept} kept",
        highlight=False,
        markup=False,
    )
    if report.gone:
        console.print(
            f"{len(report.gone)} listed as unused were already gone", highlight=False, markup=False
        )
    if report.changed:
        console.print(
            f"{len(report.changed)} listed as unused hold another recording since that run "
            "(rekeyed, redacted or recorded anew): kept",
            highlight=False,
            markup=False,
        )


@app.command()
def redact(
    name: Annotated[str, typer.Argument(help="The cassette to redact.")],
    field: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            metavar="PATH",
            help="A body field to scrub, e.g. messages[*].content or user.email; repeatable.",
        ),
    ] = None,
    pattern: Annotated[
        list[str] | None,
        typer.Option(
            "--pattern", metavar="REGEX", help="A regular expression to scrub; repeatable."
        ),
    ] = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    dry_run: DryRun = False,
    as_json: JsonOption = False,
) -> None:
    """Scrub request and response bodies (stream frames too): each --field and each match of
    a --pattern becomes [redacted]. Without either, the [redact] rules of tapeproxy.toml apply.

    Files are rewritten atomically; a recording whose request changed moves to its new key,
    so replay it with the same rules in [redact] (they apply when requests are keyed). Exit
    1 when a pattern still matches a file where scrubbing cannot reach (a header, a match
    split across stream frames, a binary body)."""
    from tapeproxy.tools.redact import redact as redact_cassette

    try:
        scrubber = _scrubber(field, pattern, config)
        library = open_library(cassettes, upstream, ignore, config)
        report = redact_cassette(
            library.store, existing(library, name), scrubber, library.rules, dry_run
        )
        if not dry_run:
            sweep_cassette(library, name)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_redact(report, as_json)
    if report.left:
        raise typer.Exit(1)


def _scrubber(field: list[str] | None, pattern: list[str] | None, config: Path | None) -> Scrubber:
    Scrubber.build(field or (), pattern or ())  # the command's own words in an error
    settings = load_settings(
        {
            "redact_field": tuple(field or ()) or None,
            "redact_pattern": tuple(pattern or ()) or None,
        },
        config=config,
        fields={"redact_field", "redact_pattern"},
    )
    scrubber = Scrubber.build(settings.redact_field, settings.redact_pattern)
    if not scrubber:
        raise ConfigError(
            "nothing to redact: give --field PATH or --pattern REGEX, or put "
            "[redact] fields = [...] / patterns = [...] in tapeproxy.toml"
        )
    return scrubber


def print_redact(report: RedactReport, as_json: bool) -> None:
    if as_json:
        print_json(asdict(report))
        return
    console = make_console()
    would = "would be " if report.dry_run else ""
    for file in report.changed:
        console.print(f"  {file}: {would}rewritten", highlight=False, markup=False, soft_wrap=True)
    for old, new in report.moved:
        console.print(f"  {old} -> {new}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"cassette {report.cassette!r}: {len(report.changed)} {would}rewritten, "
        f"{len(report.moved)} {would}re-keyed, {report.unchanged} unchanged",
        highlight=False,
        markup=False,
    )
    if report.duplicates:
        console.print(
            f"{len(report.duplicates)} copies an interrupted redact left removed",
            highlight=False,
            markup=False,
        )
    if report.moved:
        console.print(
            "A re-keyed recording's request changed: replay with the same rules ([redact] in "
            "tapeproxy.toml, or --redact-field / --redact-pattern) so requests key the same.",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if report.left:
        console.print(
            "a pattern still matches where redact cannot scrub (a header, split across stream "
            f"frames, a binary body) in: {', '.join(report.left)}",
            highlight=False,
            markup=False,
            style="red",
            soft_wrap=True,
        )
