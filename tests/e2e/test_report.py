"""`tapeproxy report`: what each cassette holds and what its last finished run came to, as
Markdown (shown in the guide, docs/looking.md), JSON and JUnit XML."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from xml.etree import ElementTree

from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.store import open_store
from tapeproxy.store.lastrun import LastRun

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def examples(tmp_path: Path) -> Path:
    """The repository's example library, without what a replay of it left in its state
    folder."""
    library = tmp_path / "cassettes"
    shutil.copytree(ROOT / "cassettes", library, ignore=shutil.ignore_patterns(".tapeproxy"))
    return library


def test_the_guide_shows_what_report_markdown_prints_for_the_examples(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--markdown", "--cassettes", str(examples(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "| `example` | 3 | 18 | 21 | $0.000010 + unknown | 0 | none | no run yet |" in (
        result.output
    )
    page = (ROOT / "docs" / "looking.md").read_text(encoding="utf-8")
    shown = re.search(r"<!-- report: examples -->\n```markdown\n(.*?)```\n", page, re.S)
    assert shown is not None, "docs/looking.md shows no `report --markdown` output"
    assert shown.group(1) == result.output


def test_a_last_run_with_misses_and_faults_is_reported_in_every_form(tmp_path: Path) -> None:
    library = examples(tmp_path)
    store = open_store(str(library))
    store.write_last_run("example", LastRun(misses=2, failed=True, faults={"rate_limit": 3}))
    store.write_last_run("examples/curl", LastRun(used=["x.json"]))
    args = ["report", "--cassettes", str(library)]

    text = runner.invoke(app, args).output
    assert "| `example` | 3 | 18 | 21 | $0.000010 + unknown | 2 | rate_limit 3 | failed |" in text
    assert "| `examples/curl` | 2 | 6 | 7 | $0.000005 + unknown | 0 | none | passed |" in text
    assert "2 miss(es), 3 fault(s) in their last runs" in text

    data = json.loads(runner.invoke(app, [*args, "--json"]).output)
    first = data["cassettes"][0]
    assert (first["cassette"], first["misses"], first["faults"]) == (
        "example",
        2,
        {"rate_limit": 3},
    )
    assert (first["failed"], first["passed"], first["ran"]) == (True, False, True)

    junit = tmp_path / "report.xml"
    assert runner.invoke(app, [*args, "--junit", str(junit)]).exit_code == 0
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    # one test case per example cassette
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("7", "1")
    failed = [
        case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
    ]
    assert failed == ["example"]


def test_a_bad_library_or_note_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--cassettes", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "no cassette library" in result.output and "Traceback" not in result.output
    library = examples(tmp_path)
    note = library / ".tapeproxy" / "runs" / "example.json"
    note.parent.mkdir(parents=True)
    note.write_text("{not json", encoding="utf-8")
    result = runner.invoke(app, ["report", "--json", "--cassettes", str(library)])
    assert result.exit_code == 2
    assert json.loads(result.output)["error"]["message"].startswith("cannot read")


def test_a_note_edited_to_hold_markup_or_a_negative_count_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """A fault kind is a word: one with `|`, markup or a control character would break the
    Markdown table (or show an image from elsewhere in a job summary) and the JUnit XML."""
    library = examples(tmp_path)
    notes = library / ".tapeproxy" / "runs"
    notes.mkdir(parents=True)
    for faults in ('{"![x](https://example.com/t.png) |\\u0001": 1}', '{"cut": -5}'):
        (notes / "example.json").write_text(f'{{"version": 3, "faults": {faults}}}')
        junit = tmp_path / "junit.xml"
        result = runner.invoke(app, ["report", "--cassettes", str(library), "--junit", str(junit)])
        assert result.exit_code == 2, result.output
        assert "runs/example.json" in result.output and "delete it" in result.output
        assert not junit.exists()
