"""Rendering for the cassette commands: rich tables for people, stable JSON for --json."""

from __future__ import annotations

import json
from dataclasses import asdict

from rich.console import Console

from proxy.library import RekeyReport


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
