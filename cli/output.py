"""Rendering for the upkeep commands (verify, rekey, prune, redact): lines for people, stable
JSON for --json (ls, show and diff render in reports.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console

from tapeproxy.tools.prune import PruneReport
from tapeproxy.tools.redact import RedactReport
from tapeproxy.tools.rekey import RekeyReport
from tapeproxy.tools.verify import Verdict


def make_console(**options: Any) -> Console:
    """A rich Console that, under NO_COLOR, writes no ANSI code at all (rich alone drops
    colours but still writes bold and the like), and that wraps no line when it writes to no
    terminal: rich would break lines at 80 columns in a pipe, a log or a CI job, where a
    script greps them and a reader's window is wider."""
    if os.environ.get("NO_COLOR"):
        options.setdefault("color_system", None)
    console = Console(**options)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def print_rekey(report: RekeyReport, dry_run: bool, as_json: bool) -> None:
    if as_json:
        print_json({**asdict(report), "dry_run": dry_run})
        return
    console = make_console()
    verb = "would move" if dry_run else "moved"
    for old, new in report.moved:
        shown = f"  {old} -> {new}" if old != new else f"  {old} (same key, rules fingerprint)"
        console.print(shown, highlight=False, soft_wrap=True)
    console.print(
        f"cassette {report.cassette!r}: {len(report.moved)} {verb}, {report.unchanged} unchanged"
        + (f", {report.merged} now repeat an earlier request" if report.merged else ""),
        highlight=False,
    )
    if report.duplicates:
        console.print(
            f"{len(report.duplicates)} copies an interrupted rekey left removed", highlight=False
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


def print_verdicts(verdicts: Sequence[Verdict], as_json: bool) -> None:
    if as_json:
        print_json([asdict(v) for v in verdicts])
        return
    console = make_console()
    for v in verdicts:
        state = "ok" if not v.problems else f"{len(v.problems)} problem(s)"
        console.print(f"{v.cassette}: {v.checked} file(s) checked, {state}", highlight=False)
        for problem in v.problems:
            console.print(
                f"  {problem['file']}: {problem['problem']}", highlight=False, soft_wrap=True
            )
        for warning in v.warnings:
            console.print(
                f"  warning: {warning['file']}: {warning['problem']}",
                highlight=False,
                soft_wrap=True,
            )
        if v.upgraded:
            console.print(f"  upgraded {len(v.upgraded)} file(s) to today's schema_version")
        if v.outdated:
            console.print(
                f"  {len(v.outdated)} file(s) in an older schema_version (read fine); "
                f"`tapeproxy verify {v.cassette} --upgrade` rewrites them",
                highlight=False,
                soft_wrap=True,
            )


def print_prune(report: PruneReport, as_json: bool) -> None:
    if as_json:
        print_json(asdict(report))
        return
    console = make_console()
    verb = "would delete" if report.dry_run else "deleted"
    console.print(f"relying on {report.run}", highlight=False, markup=False, soft_wrap=True)
    for file in report.pruned:
        console.print(f"  {file}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"cassette {report.cassette!r}: {verb} {len(report.pruned)} recording(s) that run did "
        f"not use, {report.kept} kept",
        highlight=False,
        markup=False,
    )
    if report.blobs:
        console.print(
            f"{verb} {len(report.blobs)} blob(s) no recording uses", highlight=False, markup=False
        )
    if report.needs_yes:
        console.print(
            "that run also recorded: prune deletes them only with --yes (a run that records "
            "may not have asked for everything the cassette's tests need)",
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
            "tapeproxy.toml, or --redact-field / --redact-pattern / --redact-keep) so requests "
            "key the same.",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if report.left:
        console.print(
            "a pattern still matches where redact cannot scrub (a header, a binary body, "
            f"stream frames' bytes outside the text they carry) in: {', '.join(report.left)}",
            highlight=False,
            markup=False,
            style="red",
            soft_wrap=True,
        )
