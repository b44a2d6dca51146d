"""What every cassette command shares: its options, the library it opens, the price table it
reads, how it fails (text, or JSON under --json) and its progress bar."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from tapeproxy.cli.output import make_console
from tapeproxy.engine.rules import MatchRules
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.modes import Mode
from tapeproxy.settings import MIB, RepeatPolicy, Settings, env_name, option_name
from tapeproxy.sources import load_settings, load_tool_settings, parse_pairs
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.prices import PriceTable, load_prices

if TYPE_CHECKING:
    from tapeproxy.redaction.scrubber import Scrubber

# A command that reads more files than this shows a progress bar (on a terminal).
PROGRESS_FROM = 2000


@dataclass(frozen=True)
class Library:
    store: CassetteStore
    rules: Callable[[str], MatchRules]
    ignore: tuple[str, ...] = ()  # the --ignore rules in force, from every source


METAVARS = {
    "mode": f"<{'|'.join(m.value for m in Mode)}>",
    "repeat": f"<{'|'.join(r.value for r in RepeatPolicy)}>",
    "host": "HOST",
    "port": "PORT",
    "cassettes": "DIR|URL",
    "cassette": "NAME",
    "upstream": "NAME=URL",
    "live": "UPSTREAM",
    "replay_timing": "none|recorded|FACTOR",
    "ignore": "UPSTREAM:WHAT:NAME",
    "connect_timeout": "SECONDS",
    "read_timeout": "SECONDS",
    "shutdown_timeout": "SECONDS",
    "log_level": "LEVEL",
    "resign": "aws",
    "max_body": "SIZE",
    "max_record": "SIZE",
    "max_frame": "SIZE",
    "admin_token": "TOKEN",
    "redact_field": "PATH",
    "redact_pattern": "REGEX",
    "redact_keep": "FORMAT",
    "ready_file": "FILE",
    "fault": "SPEC",
    "fault_seed": "N",
}


def option(field: str, off_flag: str | None = None) -> Any:
    """A serve option described once, in Settings: its help, its default, its variable."""
    info = Settings.model_fields[field]
    default = info.get_default(call_default_factory=True)
    shown = (
        ", ".join(f"{k}={v}" for k, v in default.items())
        if isinstance(default, dict)
        else (", ".join(default) if isinstance(default, tuple) else str(default))
    )
    if isinstance(default, bool):
        shown = "on" if default else "off"
    elif default is None:
        shown = ""
    elif field in ("max_body", "max_record"):
        shown = f"{default // MIB}MiB"
    flags = [option_name(field) + (f"/{off_flag}" if off_flag else "")]
    text = f"{info.description} Env: {env_name(field)}."
    return typer.Option(
        *flags,
        help=text + (f" Default: {shown}." if shown else ""),
        show_default=False,
        metavar=METAVARS.get(field),
    )


def fail(error: TapeproxyError | str, as_json: bool = False, code: int = 2) -> typer.Exit:
    """Say what went wrong (one JSON object on stdout under --json, else a line on stderr,
    red only on a terminal and without NO_COLOR), the key formats scrubbed out of it, and
    give the exit to raise."""
    from tapeproxy.redaction.scrubber import Scrubber

    message = error.message if isinstance(error, TapeproxyError) else error
    message = Scrubber.build().text(message)  # it may quote a setting given a key (a URL's)
    kind = error.error_type if isinstance(error, TapeproxyError) else "tapeproxy_error"
    if as_json:
        print(json.dumps({"error": {"type": kind, "message": message}}, indent=2))
    else:
        make_console(stderr=True).print(
            f"tapeproxy: {message}", style="red", highlight=False, markup=False, soft_wrap=True
        )
    return typer.Exit(code)


CassettesOption = Annotated[str | None, option("cassettes")]
UpstreamOption = Annotated[list[str] | None, option("upstream")]
IgnoreOption = Annotated[list[str] | None, option("ignore")]
ConfigOption = Annotated[
    Path | None,
    typer.Option(help="Config file. Default: ./tapeproxy.toml if present.", metavar="FILE"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
PricesOption = Annotated[
    Path | None,
    typer.Option(
        help="A price table (JSON, as tapeproxy's own) whose models override the shipped "
        f"prices. Env: {env_name('prices')}; `prices` in tapeproxy.toml.",
        metavar="FILE",
    ),
]


def library_store(cassettes: str | None, config: Path | None) -> CassetteStore:
    """The library's store, whether or not it is there."""
    from tapeproxy.store import open_store

    fields = {"cassettes", "cache_size"}
    settings = load_settings({"cassettes": cassettes}, config=config, fields=fields)
    return open_store(settings.cassettes, settings.cache_size)


def open_library(
    cassettes: str | None,
    upstream: list[str] | None,
    ignore: list[str] | None,
    config: Path | None,
    rules: bool = True,
) -> Library:
    """The cassette library and the match rules, from the same sources as `serve` (only the
    library when the command needs no `rules`); a library that is not there is an error."""
    from tapeproxy.providers import Rulebook, provider_table
    from tapeproxy.store import open_store

    settings = load_settings(
        {
            "cassettes": cassettes,
            "ignore": tuple(ignore or ()) or None,
            "upstream": parse_pairs(upstream, "upstream") if upstream else None,
        },
        config=config,
        fields={"cassettes", "cache_size", *(("upstream", "ignore") if rules else ())},
    )
    store = open_store(settings.cassettes, settings.cache_size)
    if not store.exists():
        raise missing_library(store)
    book = Rulebook.build(provider_table(settings.upstream), settings.ignore)
    return Library(store, book.for_upstream, settings.ignore)


def warn(message: str) -> None:
    """A warning on stderr (yellow only on a terminal and without NO_COLOR): stdout stays
    the command's output, --json included."""
    make_console(stderr=True).print(
        f"tapeproxy: warning: {message}",
        style="yellow",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def missing_library(store: CassetteStore) -> ConfigError:
    return ConfigError(
        f"no cassette library at {store.where()} (--cassettes / TAPEPROXY_CASSETTES): no "
        "cassettes there; check the path, or record some with `tapeproxy serve --mode record`"
    )


def existing(library: Library, name: str, folder_will_do: bool = False) -> str:
    """`name` if the cassette has recordings (or, for verify, anything at all: what an
    interrupted write left, names tapeproxy does not read)."""
    if folder_will_do and library.store.names(name):
        return name
    if not library.store.entries(name):
        raise ConfigError(f"cassette {name!r} has no recordings under {library.store.where()}")
    return name


def price_table(prices: Path | None, config: Path | None) -> PriceTable:
    """The shipped prices with the user's file (--prices > TAPEPROXY_PRICES > toml) over them."""
    return load_prices(load_tool_settings({"prices": prices}, config=config).prices)


@contextmanager
def progress(total: int | Callable[[], int], what: str) -> Iterator[Callable[[], None]]:
    """A tick per file read; a bar on stderr when there are many files and it is a terminal.
    `total` may be a function, called only for a terminal (counting lists every cassette)."""
    console = make_console(stderr=True)
    if not console.is_terminal:
        yield lambda: None
        return
    total = total() if callable(total) else total
    if total <= PROGRESS_FROM:
        yield lambda: None
        return
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda: bar.advance(task)


def sweep_cassette(library: Library, cassette: str) -> None:
    """Remove what interrupted writes left in a cassette (older than a minute: another
    tapeproxy may be writing the newer ones), as `serve` does for the library."""
    library.store.sweep(cassette)


def library_scrubber(config: Path | None, keep: Iterable[str] | None = None) -> Scrubber:
    """The scrubbing a server with these sources gives its cassettes: the [redact] rules and
    the key formats not kept; given `keep` (the command's own `--keep`, over the sources'),
    the key formats alone."""
    from tapeproxy.redaction.scrubber import Scrubber

    if keep is None:
        wanted = {"redact_field", "redact_pattern", "redact_keep"}
        settings = load_settings({}, config=config, fields=wanted)
        return Scrubber.build(settings.redact_field, settings.redact_pattern, settings.redact_keep)
    Scrubber.build(keep=keep)  # the command's own words in an error
    given = {"redact_keep": tuple(keep) or None}
    settings = load_settings(given, config=config, fields={"redact_keep"})
    return Scrubber.build(keep=settings.redact_keep)
