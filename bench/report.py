"""The result table: one Row per measurement, rendered with rich or written as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table

from bench.load import Sample


@dataclass
class Row:
    """One line of the table. `ratio` is p50 over the matching baseline figure of this run."""

    scenario: str
    requests: int | None = None
    concurrency: int | None = None
    rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    ratio: float | None = None
    rss_mb: float | None = None  # the sum of each process's peak RSS
    pss_mb: float | None = None  # their PSS at the scenario's end: shared pages counted once
    note: str = ""
    warning: bool = False

    @classmethod
    def of(cls, scenario: str, sample: Sample, baseline_ms: float | None, note: str = "") -> Row:
        p50 = sample.p50_ms()
        if sample.errors:
            note = f"{sample.errors} errors, first: {sample.first_error[:120]}; {note}"
        if sample.capped:
            note = f"stopped by the time cap; {note}"
        return cls(
            scenario=scenario,
            requests=len(sample.latencies_s),
            concurrency=sample.concurrency,
            rate=sample.rate,
            p50_ms=p50,
            p99_ms=sample.p99_ms(),
            ratio=ratio(p50, baseline_ms),
            note=note.strip("; "),
            warning=bool(sample.errors),
        )


def ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline


def _number(value: float | int | None, digits: int) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return str(value)
    return f"{value:,.{digits}f}"


def render(rows: list[Row], title: str) -> None:
    table = Table(title=title, title_justify="left", show_lines=False)
    columns: list[tuple[str, JustifyMethod]] = [
        ("scenario", "left"),
        ("requests", "right"),
        ("conc", "right"),
        ("req/s", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("x base p50", "right"),
        ("peak RSS MB", "right"),
        ("PSS MB", "right"),
        ("notes", "left"),
    ]
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(
            row.scenario,
            _number(row.requests, 0),
            _number(row.concurrency, 0),
            _number(row.rate, 0),
            _number(row.p50_ms, 2),
            _number(row.p99_ms, 2),
            _number(row.ratio, 2),
            _number(row.rss_mb, 0),
            _number(row.pss_mb, 0),
            row.note,
            style="bold red" if row.warning else None,
        )
    Console(width=200).print(table)


def write_json(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    data = {"meta": meta, "rows": [asdict(row) for row in rows]}
    path.write_text(json.dumps(data, indent=2) + "\n")
