"""Rendering of ls, show and diff: tables that never cut a path, bodies as pretty JSON, a
stream's text, differences by JSON path, tokens and cost; stable JSON for --json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from tapeproxy.cli.output import make_console
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.tools.diff import CassetteDiff, Totals, body_view, delta
from tapeproxy.tools.listing import Listed, Row, Summary
from tapeproxy.tools.prices import PriceTable


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def usd(cost: float | None) -> str:
    return "unknown" if cost is None else f"${cost:,.6f}"


def tokens_text(tokens: Tokens) -> str:
    text = f"{tokens.input_tokens:,} in / {tokens.output_tokens:,} out"
    cached = tokens.cached_tokens + tokens.cache_write_tokens
    return text + (f" ({tokens.cached_tokens:,} cached)" if cached else "")


def print_table(table: Table) -> bool:
    """Print `table` when its rows fit on a line each: always when the output is piped (the
    table takes the width it needs; nothing is cut or folded), on a terminal when it is
    wide enough. False when it would have to wrap."""
    console = make_console()
    wanted = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if not console.is_terminal:
        make_console(width=max(wanted, 20), no_color=console.no_color).print(table)
        return True
    if wanted > console.width:
        return False
    console.print(table)
    return True


def print_summaries(summaries: Sequence[Summary], prices: PriceTable, as_json: bool) -> None:
    if as_json:
        print_json([asdict(s) for s in summaries])
        return
    console = make_console()
    if not summaries:
        console.print("no cassettes yet")
        return
    table = Table(box=None, pad_edge=False)
    for name in ("cassette", "exchanges", "streams", "failures", "tokens", "cost"):
        table.add_column(name, no_wrap=True, justify="left" if name == "cassette" else "right")
    for s in summaries:
        cost = usd(s.cost_usd) + (" + unknown" if s.unpriced and s.cost_usd is not None else "")
        tokens = Tokens(s.input_tokens, s.output_tokens, s.cached_tokens, s.cache_write_tokens)
        counts = (s.exchanges, s.streams, s.failures)
        table.add_row(s.cassette, *map(str, counts), tokens_text(tokens), cost)
    if not print_table(table):
        for s in summaries:
            console.print(f"{s.cassette}: {s.exchanges} exchange(s)", highlight=False)
    _notes(console, summaries, prices)


def _notes(console: Console, summaries: Sequence[Summary], prices: PriceTable) -> None:
    for s in summaries:
        if s.unreadable:
            console.print(
                f"{s.cassette}: {s.unreadable} unreadable file(s); run "
                f"`tapeproxy verify {s.cassette}`",
                highlight=False,
                style="red",
            )
        if s.unpriced_models:
            console.print(
                f"{s.cassette}: no price for {', '.join(s.unpriced_models)} "
                f"({s.unpriced - s.no_usage} exchange(s)); add it with --prices FILE",
                highlight=False,
                soft_wrap=True,
            )
        if s.no_usage:
            console.print(
                f"{s.cassette}: {s.no_usage} answer(s) without a usage block (a stream "
                "without stream_options.include_usage?): tokens and cost unknown",
                highlight=False,
                soft_wrap=True,
            )
    console.print(f"prices: {'; '.join(prices.sources)}", highlight=False, soft_wrap=True)


SHOW_COLUMNS = ("#", "method", "upstream", "path", "model or tool", "status", "stream", "frames")


def print_rows(cassette: str, rows: Sequence[Row], as_json: bool) -> None:
    if as_json:
        print_json({"cassette": cassette, "exchanges": [asdict(r) for r in rows]})
        return
    table = Table(box=None, pad_edge=False)
    columns = (*SHOW_COLUMNS, "tokens in/out", "cost", "key")
    for name in columns:
        table.add_column(name, no_wrap=True)
    for r in rows:
        if r.unreadable:  # nothing in it was read: no number is made up
            table.add_row("-", "unreadable", *("-" for _ in columns[2:-1]), r.key[:12])
            continue
        table.add_row(
            str(r.seq),
            r.method,
            r.upstream,
            r.path,
            r.what,
            str(r.status),
            "websocket" if r.socket else "yes" if r.streamed else "no",
            str(r.frames) if r.streamed or r.socket else "-",
            f"{r.input_tokens}/{r.output_tokens}" if r.usage_known else "unknown",
            usd(r.cost_usd),
            r.key[:12],
        )
    console = make_console()
    if not print_table(table):  # a narrow terminal: one block per exchange, nothing cut
        for r in rows:
            console.print(headline(r), highlight=False, soft_wrap=True)
            console.print("    " + details(r), highlight=False, soft_wrap=True)
    print_unreadable(console, cassette, rows)


def print_unreadable(console: Console, cassette: str, rows: Sequence[Row]) -> None:
    """A line per file that cannot be read, with why, and what to run next."""
    bad = [r for r in rows if r.unreadable]
    for r in bad:
        console.print(f"{r.file}: unreadable: {r.problem}", highlight=False, soft_wrap=True)
    if bad:
        console.print(
            f"{len(bad)} unreadable file(s); `tapeproxy verify {cassette}` checks every file",
            highlight=False,
            soft_wrap=True,
            style="red",
        )


def headline(row: Row) -> str:
    if row.unreadable:
        return f"{row.file}: unreadable: {row.problem}"
    return f"#{row.seq} {row.method} {row.upstream} {row.path}"


def details(row: Row) -> str:
    if row.unreadable:
        return f"nothing in it was read | key {row.key[:12]}"
    stream = f"stream, {row.frames} frames" if row.streamed else "not streamed"
    if row.socket:
        stream = f"websocket session, {row.frames} frames"
    tokens = tokens_text(row.tokens) if row.usage_known else "tokens unknown"
    return (
        f"{'' if row.tool else 'model '}{row.what} | status {row.status} | {stream} | "
        f"{tokens} | {usd(row.cost_usd)} | {row.outcome} | key {row.key[:12]}"
    )


def full_view(item: Listed, frames: bool) -> dict[str, Any]:
    """A row with its bodies: the request's, the response's (a stream's as its joined text)."""
    out: dict[str, Any] = asdict(item.row)
    exchange = item.exchange
    if exchange is None:
        return out
    response = exchange.response
    out["request_body"] = body_view(exchange.request.body)
    out["text"] = answers.text(exchange)
    if response.frames is None:
        out["response_body"] = body_view(response.body)
    if exchange.session is not None:
        out["session"] = answers.session_lines(exchange)
    if frames and response.frames is not None:
        out["frame_texts"] = [answers.frame_text(f) for f in response.frames]
    return out


def print_full(cassette: str, items: Sequence[Listed], frames: bool, as_json: bool) -> None:
    if as_json:
        print_json({"cassette": cassette, "exchanges": [full_view(i, frames) for i in items]})
        return
    for n, item in enumerate(items):
        print(("\n" if n else "") + f"== {headline(item.row)}")
        print("   " + details(item.row))
        if item.exchange is not None:
            _print_bodies(item.exchange, frames)
    if any(item.row.unreadable for item in items):
        print(f"\n`tapeproxy verify {cassette}` checks every file")


def _print_bodies(exchange: Exchange, frames: bool) -> None:
    response = exchange.response
    call = answers.tool_call(exchange)
    if call is not None:
        arguments = json.dumps(call["arguments"], ensure_ascii=False)
        print(f"-- tool call\n{call['name']}({arguments})")
        print(f"-- tool result\n{call['result'] if call['result'] is not None else '(none)'}")
    print("-- request body")
    print(_pretty(body_view(exchange.request.body)))
    if exchange.session is not None:
        print(f"-- websocket session ({len(exchange.session.frames)} frames)")
        print("\n".join(answers.session_lines(exchange)))
        return
    if response.frames is None:
        print("-- response body")
        print(_pretty(body_view(response.body)))
        return
    print(f"-- stream text ({response.dialect}, {len(response.frames)} frames)")
    print(answers.text(exchange) or "(no text: see the frames with --frames)")
    if frames:
        print("-- frames")
        for index, frame in enumerate(response.frames):
            print(f"[{index} +{frame.ms}ms] {answers.frame_text(frame)!r}")


def _pretty(value: Any) -> str:
    if value is None:
        return "(empty)"
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def print_diff(result: CassetteDiff, as_json: bool) -> None:
    if as_json:
        print_json(result.to_dict())
        return
    console = make_console()

    def say(text: str, style: str | None = None) -> None:
        console.print(text, highlight=False, markup=False, soft_wrap=True, style=style)

    say(f"A: {result.a}\nB: {result.b}")
    for title, rows, style in (
        ("only in A", result.only_a, "red"),
        ("only in B", result.only_b, "green"),
    ):
        if rows:
            say(f"{title} ({len(rows)}):", style)
            for row in rows:
                say(f"  {headline(row)}  {row.file}")
    if result.changed:
        say(f"changed ({len(result.changed)}):", "yellow")
        for change in result.changed:
            say(f"  {headline(change.row)}  {change.row.file}")
            for found in change.differences:
                say("    " + found.render(width=max(100, console.width - 8)))
    verdict = "equal" if result.equal else "different"
    say(
        f"{verdict}: {result.same} same, {len(result.changed)} changed, "
        f"{len(result.only_a)} only in A, {len(result.only_b)} only in B"
    )
    say(_totals_line(result.totals_a, result.totals_b))


def _totals_line(a: Totals, b: Totals) -> str:
    change = delta(a, b)
    signed = f"{change['input_tokens']:+,} in / {change['output_tokens']:+,} out"
    cost = change["cost_usd"]
    shown = "unknown" if cost is None else f"{cost:+,.6f} USD"
    if cost is not None and change["cost_partial"]:
        shown += ", leaving out exchanges with no price"
    return (
        f"tokens: A {tokens_text(a.tokens)}, B {tokens_text(b.tokens)} ({signed}); "
        f"cost: A {usd(a.cost_usd)}, B {usd(b.cost_usd)} ({shown})"
    )
