"""The cassette upkeep commands: `tapeproxy verify`, `rekey`, `prune` and `redact`."""

from __future__ import annotations

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
    library_scrubber,
    open_library,
    sweep_cassette,
    warn,
)
from tapeproxy.cli.output import print_prune, print_redact, print_rekey, print_verdicts
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.sources import load_settings

DryRun = Annotated[bool, typer.Option(help="Show what would change; change nothing.")]
KeepOption = Annotated[
    list[str] | None,
    typer.Option(
        "--keep",
        metavar="FORMAT",
        help="A well-known key format left unscrubbed (openai, anthropic, google, github, "
        "openai-ephemeral, aws, aws-session, slack, jwt, or all); repeatable.",
    ),
]


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
    orphaned. Requests that now match each other become ordinals in recorded order. A rule
    that ignores a body field which changes the answer (model, messages, ...) is warned
    about on stderr, as serve warns at its start."""
    from tapeproxy.engine.rules import rule_warnings
    from tapeproxy.tools.rekey import rekey as rekey_cassette

    try:
        library = open_library(cassettes, upstream, ignore, config)
        for warning in rule_warnings(library.ignore):  # as `serve` warns at its start
            warn(warning)
        report = rekey_cassette(library.store, existing(library, name), library.rules, dry_run)
        if not dry_run:
            sweep_cassette(library, name)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_rekey(report, dry_run, as_json)


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
    keep: KeepOption = None,
) -> None:
    """Check every exchange file; exit 1 on a problem.

    Each file must parse under the schema, carry the key and ordinal its name says, have
    that key under today's match rules, and hold no well-known key format (unless kept, with
    --keep or [redact] keep, as recording kept it): `tapeproxy redact NAME` scrubs one.
    Leftover temporary files are reported too. Files of an older schema_version are read
    fine and listed; --upgrade rewrites them."""
    from tapeproxy.store import FOLDER, split_location
    from tapeproxy.tools.verify import misnamed
    from tapeproxy.tools.verifyall import verify_all

    try:
        library = open_library(cassettes, upstream, ignore, config)
        skipped: dict[str, str] = {}
        names = (
            [existing(library, name, folder_will_do=True)]
            if name
            else library.store.cassettes(skipped)
        )
        if not names and not skipped:
            raise ConfigError(f"no cassettes under {library.store.where()} to verify")
        keys = library_scrubber(config, keep=keep or ())
        forkable = split_location(library.store.where())[0] == FOLDER  # a folder: no client
        verdicts = verify_all(library.store, names, library.rules, upgrade, keys, forkable)
        verdicts += [misnamed(folder, why) for folder, why in skipped.items()]
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_verdicts(verdicts, as_json)
    if any(v.problems for v in verdicts):
        raise typer.Exit(1)


def prune(
    name: Annotated[str, typer.Argument(help="The cassette to prune.")],
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    dry_run: DryRun = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Delete even when the run prune goes by also recorded (an auto run): it may "
            "not have asked for everything the cassette's tests need.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete the recordings the last finished replay run of a cassette did not use.

    A run counts when it served or refused requests from the cassette (replay, auto, once
    replaying) and was finished by a PUT on /__tapeproxy/cassette or by stopping the server;
    it leaves a note of what it used in the library's state folder, .tapeproxy/runs/ (never
    in the cassette). prune names that run: its mode, start and what it served and recorded.
    Recordings of upstreams that ran live are kept. With no such note, or when that run did
    not pass (a pytest test that failed, errored or was skipped, or requests that missed),
    nothing is deleted and the exit status is 2; so too after a run that also recorded (an
    auto run), unless --yes."""
    from tapeproxy.tools.prune import prune as prune_cassette

    try:
        library = open_library(cassettes, None, None, config, rules=False)
        report = prune_cassette(library.store, existing(library, name), dry_run, yes)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_prune(report, as_json)


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
    keep: KeepOption = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    dry_run: DryRun = False,
    as_json: JsonOption = False,
) -> None:
    """Scrub request and response bodies (stream frames too), paths, queries and header
    values: each --field, each match of a --pattern and each well-known key (unless --keep)
    becomes [redacted]. Without --field or
    --pattern, the [redact] rules of tapeproxy.toml apply. A pattern is matched in the text
    a stream's client joins across frames, and a match is scrubbed from every frame it spans.

    Files are rewritten atomically; a recording whose request changed moves to its new key,
    so replay it with the same rules in [redact] (they apply when requests are keyed). Exit
    1 when a pattern still matches a file where scrubbing cannot reach (a header's name, a
    binary body, frames whose bytes hold a match the joined text does not)."""
    from tapeproxy.tools.redact import redact as redact_cassette

    try:
        scrubber = _scrubber(field, pattern, keep, config)
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


def _scrubber(
    field: list[str] | None, pattern: list[str] | None, keep: list[str] | None, config: Path | None
) -> Scrubber:
    Scrubber.build(field or (), pattern or (), keep or ())  # the command's own words in an error
    settings = load_settings(
        {
            "redact_field": tuple(field or ()) or None,
            "redact_pattern": tuple(pattern or ()) or None,
            "redact_keep": tuple(keep or ()) or None,
        },
        config=config,
        fields={"redact_field", "redact_pattern", "redact_keep"},
    )
    scrubber = Scrubber.build(settings.redact_field, settings.redact_pattern, settings.redact_keep)
    if not scrubber:
        raise ConfigError(
            "nothing to redact: give --field PATH or --pattern REGEX, or put "
            "[redact] fields = [...] / patterns = [...] in tapeproxy.toml (every key format "
            "is kept)"
        )
    return scrubber
