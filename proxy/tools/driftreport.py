"""A drift report written out: the summary (exchanges checked, findings by level, cost spent,
what the budget skipped), Markdown for a CI job summary, JUnit XML (a test case per exchange,
a failure for an `error` finding); the last one kept in the library's state folder, for
`tapeproxy report`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from xml.etree import ElementTree

from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.drift import DriftReport, Finding
from tapeproxy.tools.driftplan import Left


def value_text(value: Any, width: int = 60) -> str:
    """A recorded or live value in one short line."""
    text = "-" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def finding_line(f: Finding) -> str:
    return (
        f"{f.level}: {f.cassette} {f.exchange} ({f.request}): {f.path}: {f.what} "
        f"(recorded {value_text(f.recorded)}, live {value_text(f.live)})"
    )


def summary(report: DriftReport) -> str:
    """The findings, one a line, then what was checked, spent, skipped and left unsent."""
    counts = report.counts()
    lines = [finding_line(f) for f in report.findings]
    lines += [f"skipped: {s.cassette} {s.exchange} ({s.request}): {s.why}" for s in report.skipped]
    lines += [f"not sent: {s.cassette} {s.exchange} ({s.request}): {s.why}" for s in report.failed]
    lines += [f"updated: {s.cassette} {s.exchange} ({s.request})" for s in report.updated]
    lines += [
        f"not updated: {s.cassette} {s.exchange} ({s.request}): {s.why}" for s in report.not_updated
    ]
    lines.append(
        f"{len(report.checked)} exchange(s) checked: {counts['error']} error(s), "
        f"{counts['warn']} warning(s), {counts['info']} info; ${report.spent:.4f} spent"
        f"{unpriced(report)}; {len(report.skipped)} skipped by the budget"
        + (f"; {len(report.failed)} not sent" if report.failed else "")
        + (f"; {len(report.updated)} re-recorded" if report.updated else "")
    )
    return "\n".join(lines) + "\n"


def unpriced(report: DriftReport) -> str:
    """The answers whose cost is unknown, which the sum spent leaves out (never as free)."""
    if not report.unpriced:
        return ""
    return f" and {report.unpriced} unpriced (cost unknown: no usage, or no price)"


def markdown(report: DriftReport) -> str:
    counts = report.counts()
    lines = [
        "# tapeproxy drift",
        "",
        f"{len(report.checked)} exchange(s) checked: **{counts['error']} error(s)**, "
        f"{counts['warn']} warning(s), {counts['info']} info; ${report.spent:.4f} spent"
        f"{unpriced(report)}; {len(report.skipped)} skipped by the budget.",
        "",
    ]
    if report.findings:
        lines += [
            "| level | cassette | exchange | path | recorded | live | what |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for f in report.findings:
            cells: tuple[str, ...] = (f.level, f.cassette, f"{f.exchange} {f.request}", f.path)
            cells += (value_text(f.recorded), value_text(f.live), f.what)
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    for title, listed in (("Skipped", report.skipped), ("Not sent", report.failed)):
        if listed:
            lines += [f"## {title}", ""]
            lines += [f"- {_cell(s.cassette)} {_cell(s.exchange)}: {s.why}" for s in listed]
            lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    escaped = "".join("\\" + c if c in "\\`*_[]<>|" else c for c in text)
    return f"`{text}`" if "`" not in text and "|" not in text else escaped


def junit(report: DriftReport) -> bytes:
    """A test case per exchange checked (a failure for an `error` finding), per exchange not
    sent (an error), per exchange skipped (skipped)."""
    suite = ElementTree.Element("testsuite", name="tapeproxy drift")
    cases = 0
    by_exchange: dict[tuple[str, str], list[Finding]] = {}
    for f in report.findings:
        by_exchange.setdefault((f.cassette, f.exchange), []).append(f)
    for left in report.checked:
        case = _case(suite, left)
        found = by_exchange.get((left.cassette, left.exchange), [])
        errors = [f for f in found if f.level == "error"]
        if errors:
            failure = ElementTree.SubElement(case, "failure", message=f"{len(errors)} error(s)")
            failure.text = "\n".join(finding_line(f) for f in errors)
        if found:
            ElementTree.SubElement(case, "system-out").text = "\n".join(map(finding_line, found))
        cases += 1
    for left in report.failed:
        ElementTree.SubElement(_case(suite, left), "error", message=left.why)
        cases += 1
    for left in report.skipped:
        ElementTree.SubElement(_case(suite, left), "skipped", message=left.why)
        cases += 1
    failures = sum(1 for c in suite if c.find("failure") is not None)
    suite.attrib.update(
        tests=str(cases),
        failures=str(failures),
        errors=str(len(report.failed)),
        skipped=str(len(report.skipped)),
    )
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    document: bytes = ElementTree.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _case(suite: ElementTree.Element, left: Left) -> ElementTree.Element:
    name = f"{left.exchange} {left.request}"
    return ElementTree.SubElement(suite, "testcase", classname=left.cassette, name=name)


LAST = "drift.json"  # the last drift report, in the library's state folder


def keep_last(store: CassetteStore, report: DriftReport, finished: datetime) -> str | None:
    """Keep the report in the state folder for `tapeproxy report` (never in a cassette);
    why it could not be, else None."""
    data = {"finished": finished.isoformat(timespec="seconds"), **report.to_dict()}
    try:
        store.write_report(LAST, json.dumps(data, indent=2).encode() + b"\n")
    except OSError as exc:
        return f"the report was not kept in the state folder: {exc}"
    return None


def last(store: CassetteStore) -> dict[str, Any] | None:
    """The last drift report kept, None when there is none or it cannot be read."""
    try:
        raw = store.read_report(LAST)
        saved = json.loads(raw) if raw is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or not isinstance(saved.get("counts"), dict):
        return None
    # Written by another version, or by hand: what the report and the viewer read, of its kind.
    named = ("findings", "skipped", "failed")
    lists = all(isinstance(saved.get(name, []), list) for name in named)
    return saved if lists else None


def last_markdown(saved: dict[str, Any]) -> str:
    """The last drift report as `tapeproxy report` shows it: when, what, its errors."""
    counts = saved["counts"]
    lines = [
        "",
        f"## Last drift ({_cell(str(saved.get('finished', '?')))})",
        "",
        f"{saved.get('checked', 0)} exchange(s) checked: **{counts.get('error', 0)} error(s)**, "
        f"{counts.get('warn', 0)} warning(s), {counts.get('info', 0)} info; "
        f"{len(saved.get('skipped') or [])} skipped by the budget"
        + (f"; {len(saved['failed'])} not sent." if saved.get("failed") else "."),
        "",
    ]
    for f in saved.get("findings") or []:
        if isinstance(f, dict) and f.get("level") in ("error", "warn"):
            where = f"{f.get('cassette')} {f.get('exchange')}"
            lines.append(
                f"- {f.get('level')}: {_cell(where)} {_cell(str(f.get('path')))}: "
                f"{_cell(str(f.get('what')))}"
            )
    return "\n".join(lines) + "\n"
