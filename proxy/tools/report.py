"""`tapeproxy report`: per cassette what it holds (exchanges, tokens, cost) and what its last
finished run came to (misses, faults, failed), read from the run note in the state folder; as
data, Markdown for a CI job summary, and a JUnit XML document."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from xml.etree import ElementTree

from tapeproxy.store.lastrun import LastRun
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.listing import Summary, Tick, no_tick
from tapeproxy.tools.prices import PriceTable
from tapeproxy.tools.summaries import summarize


@dataclass(frozen=True)
class Entry:
    """One cassette in the report. `ran` is False when no finished run left a note: its
    misses and faults are then 0 and none, not known to be so."""

    cassette: str
    exchanges: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    unpriced: int
    ran: bool
    misses: int = 0
    failed: bool = False
    faults: dict[str, int] = field(default_factory=dict)

    @property
    def fault_count(self) -> int:
        return sum(self.faults.values())

    @property
    def passed(self) -> bool:
        return not (self.failed or self.misses)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def entry_of(summary: Summary, note: LastRun | None) -> Entry:
    found = note or LastRun()
    return Entry(
        cassette=summary.cassette,
        exchanges=summary.exchanges,
        input_tokens=summary.input_tokens,
        output_tokens=summary.output_tokens,
        cost_usd=summary.cost_usd,
        unpriced=summary.unpriced,
        ran=note is not None,
        misses=found.misses,
        failed=found.failed,
        faults=dict(sorted(found.faults.items())),
    )


def report(
    store: CassetteStore, names: list[str], prices: PriceTable, tick: Tick = no_tick
) -> list[Entry]:
    """The cassettes `names` (the library's, listed), by name. A note that cannot be read
    raises CassetteCorrupt (a report that skipped it could call a failed run passed)."""
    return [
        entry_of(summarize(store, name, prices, tick), store.read_last_run(name)) for name in names
    ]


def usd(cost: float | None, unpriced: int = 0) -> str:
    shown = "unknown" if cost is None else f"${cost:,.6f}"
    return shown + (" + unknown" if unpriced and cost is not None else "")


def faults_text(faults: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in faults.items()) or "none"


def verdict(entry: Entry) -> str:
    if not entry.ran:
        return "no run yet"
    return "failed" if entry.failed else ("missed" if entry.misses else "passed")


def markdown(entries: list[Entry], prices: PriceTable) -> str:
    """A GitHub-flavoured Markdown table; a cassette name's `|` and markup are escaped."""
    lines = [
        "### tapeproxy",
        "",
        "| cassette | exchanges | tokens in | tokens out | cost | misses | faults | last run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for e in entries:
        cells = (
            _md_cell(e.cassette),
            str(e.exchanges),
            f"{e.input_tokens:,}",
            f"{e.output_tokens:,}",
            usd(e.cost_usd, e.unpriced),
            str(e.misses),
            faults_text(e.faults),
            verdict(e),
        )
        lines.append("| " + " | ".join(cells) + " |")
    total_in = sum(e.input_tokens for e in entries)
    total_out = sum(e.output_tokens for e in entries)
    known = [e.cost_usd for e in entries if e.cost_usd is not None]
    cost = usd(round(sum(known), 9) if known else None, sum(e.unpriced for e in entries))
    misses = sum(e.misses for e in entries)
    faults = sum(e.fault_count for e in entries)
    lines += [
        "",
        f"{len(entries)} cassette(s), {total_in:,} tokens in / {total_out:,} out, {cost}; "
        f"{misses} miss(es), {faults} fault(s) in their last runs.",
        "",
        f"Prices: {'; '.join(prices.sources)}.",
    ]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    escaped = "".join("\\" + c if c in "\\`*_[]<>|" else c for c in text)
    return f"`{text}`" if "`" not in text and "|" not in text else escaped


def junit(entries: list[Entry]) -> bytes:
    """A JUnit XML document: one test case per cassette, a failure for a failed run or a
    run with misses, the tokens and cost as properties."""
    suite = ElementTree.Element(
        "testsuite",
        name="tapeproxy",
        tests=str(len(entries)),
        failures=str(sum(1 for e in entries if not e.passed)),
        errors="0",
    )
    for e in entries:
        case = ElementTree.SubElement(suite, "testcase", classname="tapeproxy", name=e.cassette)
        props = ElementTree.SubElement(case, "properties")
        for name, value in (
            ("exchanges", e.exchanges),
            ("input_tokens", e.input_tokens),
            ("output_tokens", e.output_tokens),
            ("cost_usd", "unknown" if e.cost_usd is None else f"{e.cost_usd:.9f}"),
            ("misses", e.misses),
            ("faults", faults_text(e.faults)),
            ("last_run", verdict(e)),
        ):
            ElementTree.SubElement(props, "property", name=name, value=str(value))
        if not e.passed:
            why = "the run failed" if e.failed else f"{e.misses} request(s) missed the cassette"
            ElementTree.SubElement(case, "failure", message=why)
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    document: bytes = ElementTree.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"
