"""`tapeproxy import vcr|har` and `tapeproxy export har`: cassettes of other tools brought in,
keyed and scrubbed as recording does, and a cassette written out as HAR."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Annotated

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
from tapeproxy.outputs import write_whole
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


def import_har(
    file: Annotated[Path, typer.Argument(help="A HAR file (HAR 1.2).", metavar="FILE")],
    cassette: CassetteOption = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    max_record: MaxRecordOption = None,
    merge: MergeOption = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import a HAR file (browsers, mitmproxy, Polly.JS, Charles, `tapeproxy export har`)
    as one cassette, named after the file without its extension, or --cassette NAME.

    Each entry is keyed as if recorded live, as `import vcr` does; entries with no answer
    (status 0) or with their content not saved are skipped, saying so. Exit 1 when
    anything was skipped."""
    from tapeproxy.tools.har import read_har
    from tapeproxy.tools.importrun import run_import

    try:
        store, importer = _importer(cassettes, upstream, ignore, max_record, config)
        report = run_import(store, importer, [(file, cassette or file.stem)], read_har, merge)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    _print(report, as_json)


def export_har(
    name: Annotated[str, typer.Argument(help="The cassette to export.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="The HAR file to write; default: stdout.", metavar="FILE"
        ),
    ] = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    config: ConfigOption = None,
) -> None:
    """Write a cassette as a HAR 1.2 file, for a browser's or a proxy's HAR viewer.

    A stream is written as its joined body; its frames (and their times) are kept in each
    entry's `_tapeproxy` field, so `tapeproxy import har` gives back the same exchange
    files. URLs use each upstream's URL (a built-in's, or the one --upstream or tapeproxy.toml
    gives). A file given with -o is written whole or not at all."""
    from tapeproxy.cli.library import existing, open_library
    from tapeproxy.providers import provider_table
    from tapeproxy.sources import load_settings, parse_pairs
    from tapeproxy.tools.har import write_har

    try:
        library = open_library(cassettes, upstream, None, config, rules=False)
        cassette = existing(library, name)
        # The upstreams' URLs from the same sources as serve's: tapeproxy.toml and
        # TAPEPROXY_UPSTREAM too, not only --upstream.
        given = {"upstream": parse_pairs(upstream, "upstream") if upstream else None}
        settings = load_settings(given, config=config, fields={"upstream"})
        providers = provider_table(settings.upstream)
        if output is None:
            write_har(library.store, cassette, providers, sys.stdout)
            return
        count = _write_aside(output, lambda out: write_har(library.store, cassette, providers, out))
    except TapeproxyError as exc:
        raise fail(exc) from exc
    except OSError as exc:
        raise fail(f"cannot write {output or 'stdout'}: {exc.strerror or exc}") from exc
    make_console(stderr=True).print(
        f"cassette {cassette!r}: {count} exchange(s) written to {output}",
        highlight=False,
        markup=False,
    )


def _write_aside(path: Path, write: Callable[[IO[str]], int]) -> int:
    """Write a text file whole or not at all (see `write_whole`)."""

    def text(out: IO[bytes]) -> int:
        wrapped = io.TextIOWrapper(out, encoding="utf-8")
        count = write(wrapped)
        wrapped.flush()
        wrapped.detach()  # (the binary file is closed by its owner)
        return count

    return write_whole(path, text)


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
