"""`tapeproxy import vcr|har` and `tapeproxy export har`: cassettes of other tools brought in,
keyed and scrubbed as recording does, and a cassette written out as HAR."""

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
    fail,
    option,
)
from tapeproxy.cli.output import make_console, print_json
from tapeproxy.errors import TapeproxyError
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.importing import Importer
from tapeproxy.tools.importrun import ImportReport

CassetteOption = Annotated[
    str | None,
    typer.Option(
        help="The cassette to write (every file into it); default: each file's own name.",
        metavar="NAME",
    ),
]
MergeOption = Annotated[
    bool,
    typer.Option(
        help="Add to a cassette that holds recordings already (each is kept; an identical "
        "one is left as it is). Without it such a cassette is refused."
    ),
]
MaxRecordOption = Annotated[str | None, option("max_record")]


def import_vcr(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="VCR.py cassette files, or folders of them (.yaml, .yml, .json).",
            metavar="FILE|DIR...",
        ),
    ],
    cassette: CassetteOption = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    max_record: MaxRecordOption = None,
    merge: MergeOption = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import VCR.py and pytest-recording cassettes, one tapeproxy cassette per file.

    A file under a folder is named after its path there without the extension (so
    pytest-recording's cassettes/test_module/test_name.yaml becomes test_module/test_name,
    the cassette the tapeproxy plugin gives that test). Each request is keyed as if
    recorded live, under the upstream whose scheme, host and port its URL has (a
    provider, or one --upstream gives); streams become frames; credentials and key formats
    are scrubbed. Exit 1 when anything was skipped (each says why)."""
    from tapeproxy.tools.import_vcr import read_vcr, vcr_files

    try:
        store, importer = _importer(cassettes, upstream, ignore, max_record, config)
        from tapeproxy.tools.importrun import run_import

        report = run_import(store, importer, vcr_files(paths, cassette), read_vcr, merge)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    _print(report, as_json)


def _importer(
    cassettes: str | None,
    upstream: list[str] | None,
    ignore: list[str] | None,
    max_record: str | None,
    config: Path | None,
) -> tuple[CassetteStore, Importer]:
    """The library and the importer, from the same sources as `serve`: its upstreams, match
    rules, [redact] rules and --max-record."""
    from tapeproxy.providers import Rulebook, provider_table
    from tapeproxy.redaction.scrubber import Scrubber
    from tapeproxy.sources import load_settings, parse_pairs
    from tapeproxy.store import open_store

    fields = {"cassettes", "upstream", "ignore", "max_record"}
    fields |= {"redact_field", "redact_pattern", "redact_keep"}
    settings = load_settings(
        {
            "cassettes": cassettes,
            "ignore": tuple(ignore or ()) or None,
            "upstream": parse_pairs(upstream, "upstream") if upstream else None,
            "max_record": max_record,
        },
        config=config,
        fields=fields,
    )
    providers = provider_table(settings.upstream)
    scrubber = Scrubber.build(settings.redact_field, settings.redact_pattern, settings.redact_keep)
    importer = Importer(
        providers, Rulebook.build(providers, settings.ignore), scrubber, settings.max_record
    )
    return open_store(settings.cassettes), importer


def _print(report: ImportReport, as_json: bool) -> None:
    """Per file what it gave and what was skipped and why; per cassette what was written.
    Exit 1 when anything was skipped or refused."""
    if as_json:
        print_json(asdict(report))
    else:
        console = make_console()

        def say(text: str) -> None:
            console.print(text, highlight=False, markup=False, soft_wrap=True)

        for one in report.files:
            if one.error is not None:
                say(f"{one.file}: skipped: {one.error}")
                continue
            say(f"{one.file} -> {one.cassette}: {one.exchanges} exchange(s)")
            for why in one.skipped:
                say(f"  skipped {why}")
        for done in report.cassettes:
            same = f", {len(done.same)} already there" if done.same else ""
            say(f"cassette {done.cassette!r}: {len(done.written)} written{same}")
        for name, why in report.refused.items():
            say(f"cassette {name!r}: nothing written: {why}")
    skipped = any(one.error or one.skipped for one in report.files)
    if skipped or report.refused:
        raise typer.Exit(1)
