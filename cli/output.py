"""Rendering for the cassette commands: rich tables for people, stable JSON for --json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from llmtape.listing import Row, Summary
from llmtape.rekey import RekeyReport
from llmtape.verification import Verdict


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def print_rekey(report: RekeyReport, dry_run: bool, as_json: bool) -> None:
    if as_json:
        print_json({**asdict(report), "dry_run": dry_run})
        return
    console = Console()
    verb = "would move" if dry_run else "moved"
    for old, new in report.moved:
        shown = f"  {old} -> {new}" if old != new else f"  {old} (same key, rules fingerprint)"
        console.print(shown, highlight=False, soft_wrap=True)
    console.print(
        f"cassette {report.cassette!r}: {len(report.moved)} {verb}, {report.unchanged} unchanged"
        + (f", {report.merged} now repeat an earlier request" if report.merged else ""),
        highlight=False,
    )
    if report.unstored:
        console.print(
            f"{len(report.unstored)} recording(s) were made before today's rules keyed on a "
            "header they do not hold; a request that sends it will miss them. Record them "
            "again:",
            highlight=False,
            style="yellow",
            soft_wrap=True,
        )
    for item in report.unstored:
        console.print(
            f"  {item['file']}: no {', '.join(item['headers'])}", highlight=False, soft_wrap=True
        )


def print_summaries(summaries: Sequence[Summary], as_json: bool) -> None:
    if as_json:
        print_json([asdict(s) for s in summaries])
        return
    table = Table(
        "cassette", "exchanges", "streams", "failures", "input tokens", "output tokens", box=None
    )
    for s in summaries:
        table.add_row(
            s.cassette,
            str(s.exchanges),
            str(s.streams),
            str(s.failures),
            f"{s.input_tokens:,}",
            f"{s.output_tokens:,}",
        )
    console = Console()
    console.print(table if summaries else "no cassettes yet")
    for s in summaries:
        if s.unreadable:
            console.print(
                f"{s.cassette}: {s.unreadable} unreadable file(s); run "
                f"`llmtape verify {s.cassette}`",
                highlight=False,
                style="red",
            )


def print_rows(cassette: str, rows: Sequence[Row], as_json: bool) -> None:
    if as_json:
        print_json({"cassette": cassette, "exchanges": [asdict(r) for r in rows]})
        return
    table = Table(box=None)
    for name in ("seq", "request", "status", "answer", "outcome", "tokens", "file"):
        # The request takes the room; a narrow terminal wraps it, never cuts it.
        table.add_column(name, overflow="fold", no_wrap=name != "request")
    for r in rows:
        table.add_row(
            str(r.seq),
            r.request,
            str(r.status),
            r.kind,
            r.outcome,
            f"{r.input_tokens}/{r.output_tokens}",
            r.file[:12],
        )
    Console().print(table)


def print_verdicts(verdicts: Sequence[Verdict], as_json: bool) -> None:
    if as_json:
        print_json([asdict(v) for v in verdicts])
        return
    console = Console()
    for v in verdicts:
        state = "ok" if not v.problems else f"{len(v.problems)} problem(s)"
        console.print(f"{v.cassette}: {v.checked} file(s) checked, {state}", highlight=False)
        for problem in v.problems:
            console.print(
                f"  {problem['file']}: {problem['problem']}", highlight=False, soft_wrap=True
            )
        if v.upgraded:
            console.print(f"  upgraded {len(v.upgraded)} file(s) to today's schema_version")
        if v.outdated:
            console.print(
                f"  {len(v.outdated)} file(s) in an older schema_version (read fine); "
                f"`llmtape verify {v.cassette} --upgrade` rewrites them",
                highlight=False,
                soft_wrap=True,
            )
