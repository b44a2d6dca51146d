"""`tapeproxy drift`: recorded requests sent to the live upstream again, and whether it still
answers in the recorded shape (tapeproxy.tools.drift)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from tapeproxy.cli.library import (
    CassettesOption,
    ConfigOption,
    IgnoreOption,
    JsonOption,
    PricesOption,
    UpstreamOption,
    fail,
    missing_library,
    option,
    price_table,
)
from tapeproxy.cli.output import print_json
from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.settings import Settings
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.drift import DriftReport
from tapeproxy.tools.driftplan import Budget, Target
from tapeproxy.tools.driftretry import Retry
from tapeproxy.tools.prices import PriceTable

NamesArgument = Annotated[
    list[str] | None,
    typer.Argument(help="The cassettes to check; default: every one.", metavar="[NAME]..."),
]
SampleOption = Annotated[
    int | None,
    typer.Option(
        help="Check only N exchanges, drawn at random (an MCP session whole).", metavar="N", min=1
    ),
]
MaxCostOption = Annotated[
    float,
    typer.Option(
        help="Spend at most this many USD, estimated from each recording's usage and the price "
        "table before it is sent (one whose cost is unknown, no usage recorded or no price, "
        "is sent and counted as unpriced: bound those with --max-requests).",
        metavar="USD",
        min=0.0,
    ),
]
MaxRequestsOption = Annotated[
    int | None, typer.Option(help="Send at most N requests.", metavar="N", min=0)
]
RetriesOption = Annotated[
    int,
    typer.Option(
        help="Send a request again up to N times when the live upstream answers 429, 503 or "
        "529 where the recording did not (after its Retry-After, else a backoff); 0: never.",
        metavar="N",
        min=0,
        max=10,
    ),
]
MaxWaitOption = Annotated[
    float,
    typer.Option(
        help="Wait at most this many seconds in all, over the run, before such retries (one "
        "wait: 60 s at most).",
        metavar="SECONDS",
        min=0.0,
    ),
]
ConcurrencyOption = Annotated[
    int, typer.Option(help="Requests under way at once.", metavar="N", min=1, max=64)
]
CallToolsOption = Annotated[
    bool,
    typer.Option(
        "--call-tools",
        help="Send recorded MCP tool calls too (each acts again: a mail sent, a file written); "
        "by default they are skipped and the tool list alone is checked.",
    ),
]
UpdateOption = Annotated[
    bool,
    typer.Option("--update", help="Re-record the exchanges with an error finding, nothing else."),
]
MarkdownOption = Annotated[
    Path | None, typer.Option(help="Also write the report as Markdown.", metavar="FILE")
]
JunitOption = Annotated[
    Path | None,
    typer.Option(help="Also write a JUnit XML report (a test case per exchange).", metavar="FILE"),
]


RecordFailuresOption = Annotated[bool | None, option("record_failures", "--no-record-failures")]


@dataclass(frozen=True)
class Pace:
    """How fast the run sends: requests under way at once, and how a rate limit is retried."""

    concurrency: int
    retry: Retry


def drift(
    names: NamesArgument = None,
    cassettes: CassettesOption = None,
    upstream: UpstreamOption = None,
    ignore: IgnoreOption = None,
    sample: SampleOption = None,
    max_cost: MaxCostOption = 1.0,
    max_requests: MaxRequestsOption = None,
    concurrency: ConcurrencyOption = 1,
    retries: RetriesOption = 2,
    max_wait: MaxWaitOption = 300.0,
    call_tools: CallToolsOption = False,
    update: UpdateOption = False,
    record_failures: RecordFailuresOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = None,
    junit: JunitOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
) -> None:
    """Send recorded requests to the live upstream again and say whether it still answers in
    the recorded shape: status, content type, JSON paths and their types, enum values, a
    stream's event grammar, an MCP server's tools. Never the text.

    Each finding is info (a field added, a new event type), warn (an enum value never seen)
    or error (a field removed or retyped, the status or content type changed, events
    reordered or missing, a tool removed or changed). Keys come from the environment
    (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY, MISTRAL_API_KEY).
    Nothing is written in the cassettes unless --update; the last report is kept in the
    state folder (<library>/.tapeproxy/drift.json) for `tapeproxy report`. Exit 0 with no
    error finding, 1 with one, 2 when it could not run."""
    from tapeproxy.tools.driftreport import summary

    try:
        settings = _settings(cassettes, upstream, ignore, record_failures, config)
        _writable(markdown, junit)
        budget = Budget(max_cost, max_requests, call_tools)
        table = price_table(prices, config)
        pace = Pace(concurrency, Retry(attempts=retries + 1, total=max_wait))
        report = _run(settings, names or [], sample, budget, pace, update, table)
        _reports(report, markdown, junit)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    except KeyboardInterrupt:  # (in a wait for a rate limit, say): said, not silent
        raise fail("drift interrupted: nothing more sent, no report kept", as_json, 130) from None
    if as_json:
        print_json(report.to_dict())
    else:
        print(summary(report), end="")
    raise typer.Exit(report.exit_code())


def _settings(
    cassettes: str | None,
    upstream: list[str] | None,
    ignore: list[str] | None,
    record_failures: bool | None,
    config: Path | None,
) -> Settings:
    """What `serve` would record with: its library, upstreams, match and [redact] rules,
    --max-record, --record-failures and timeouts, from the same sources."""
    from tapeproxy.sources import load_settings, parse_pairs

    fields = {"cassettes", "upstream", "ignore", "max_record", "connect_timeout", "read_timeout"}
    fields |= {"record_failures"}
    fields |= {"redact_field", "redact_pattern", "redact_keep"}
    given = {
        "cassettes": cassettes,
        "ignore": tuple(ignore or ()) or None,
        "upstream": parse_pairs(upstream, "upstream") if upstream else None,
        "record_failures": record_failures,
    }
    return load_settings(given, config=config, fields=fields)


def _run(
    settings: Settings,
    names: list[str],
    sample: int | None,
    budget: Budget,
    pace: Pace,
    update: bool,
    prices: PriceTable,
) -> DriftReport:
    """Everything checked before anything is sent (the library, the cassettes, each
    upstream's URL and key); then the run, in its own event loop."""
    from tapeproxy.cli.library import warn
    from tapeproxy.providers import provider_table
    from tapeproxy.store import open_store
    from tapeproxy.tools.driftplan import plan, targets
    from tapeproxy.tools.driftreport import keep_last
    from tapeproxy.tools.driftsend import missing_keys, no_keys, unsendable_key, unsendable_keys

    store = open_store(settings.cassettes)
    if not store.exists():
        raise missing_library(store)
    for name in names:
        if not store.entries(name):
            raise ConfigError(f"cassette {name!r} has no recordings under {store.where()}")
    chosen, unreadable = targets(store, names, prices, sample)
    sent, _ = plan(chosen, budget)
    upstreams = {t.upstream for t in sent}
    unknown = sorted(upstreams - set(provider_table(settings.upstream)))
    if unknown:
        raise ConfigError(
            f"no URL for upstream {unknown[0]!r}: give --upstream {unknown[0]}=URL "
            "(or set it in tapeproxy.toml) to send its recorded requests"
        )
    missing = missing_keys(upstreams)
    if missing:
        raise no_keys(missing)
    unsendable = unsendable_keys(upstreams)
    if unsendable:
        raise unsendable_key(unsendable[0])
    report = asyncio.run(_drift(settings, store, chosen, (budget, pace, update), prices))
    report.failed += unreadable  # (`tapeproxy verify` says more of each)
    problem = keep_last(store, report, datetime.now(UTC))
    if problem is not None:
        warn(problem)
    return report


async def _drift(
    settings: Settings,
    store: CassetteStore,
    chosen: list[Target],
    how: tuple[Budget, Pace, bool],
    prices: PriceTable,
) -> DriftReport:
    """The run, with the server's upstream client (made in this loop, closed after)."""
    from tapeproxy.providers import Rulebook, provider_table
    from tapeproxy.redaction.scrubber import Scrubber
    from tapeproxy.tools.drift import Drift
    from tapeproxy.tools.driftretry import Pacer
    from tapeproxy.tools.driftsend import Sender, key_patterns
    from tapeproxy.upstream.client import AiohttpUpstream

    budget, pace, update = how
    providers = provider_table(settings.upstream)
    patterns = (*settings.redact_pattern, *key_patterns())
    scrubber = Scrubber.build(settings.redact_field, patterns, settings.redact_keep)
    rules = Rulebook.build(providers, settings.ignore)
    client = AiohttpUpstream(settings.connect_timeout, settings.read_timeout)
    try:
        pacer = Pacer(pace.retry)
        sender = Sender(client, providers, rules, scrubber, settings.max_record, pacer=pacer)
        run = Drift(store, sender, prices, update, settings.record_failures)
        return await run.run(chosen, budget, pace.concurrency)
    finally:
        await client.close()


def _writable(*paths: Path | None) -> None:
    """A report file that could not be written is said before anything is sent (and spent)."""
    for path in paths:
        if path is not None and (path.is_dir() or not path.parent.is_dir()):
            raise ConfigError(f"cannot write {path}: no such folder, or a folder itself")


def _reports(report: DriftReport, markdown: Path | None, junit: Path | None) -> None:
    from tapeproxy.tools.driftreport import junit as junit_xml
    from tapeproxy.tools.driftreport import markdown as markdown_text

    if markdown is not None:
        _write(markdown, markdown_text(report).encode())
    if junit is not None:
        _write(junit, junit_xml(report))


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
