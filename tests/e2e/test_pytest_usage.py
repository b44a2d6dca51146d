"""The pytest plugin's tokens and cost per test: a replaying test's line is summed from what
its server read ahead as it began, the same line `tapeproxy ls` gives; a cassette a test
records into is read again at the session's end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.e2e.test_pytest_plugin import chat_test, project, upstream_at, write_test
from tests.fakes.upstream import FakeUpstream

__all__ = ["project"]  # the fixture, shared with the plugin's other tests
pytest_plugins = ["pytester"]


def ls_line(cassettes: Path, cassette: str) -> str:
    """The cassette's line as the plugin writes it, from `tapeproxy ls --json`."""
    result = CliRunner().invoke(app, ["ls", "--cassettes", str(cassettes), "--json"])
    assert result.exit_code == 0, result.output
    [found] = [row for row in json.loads(result.output) if row["name"] == cassette]
    cost = "unknown" if found["cost_usd"] is None else f"${found['cost_usd']:,.6f}"
    return f"{found['input_tokens']:,} in / {found['output_tokens']:,} out, {cost}"


def usage_lines(output: list[str]) -> dict[str, str]:
    """The summary's lines, by test name."""
    start = output.index("tapeproxy tokens and cost per test:")
    lines = {}
    for line in output[start + 1 :]:
        if not line.startswith("  ") or "::" not in line:
            break
        nodeid, _, text = line.strip().partition(": ")
        lines[nodeid.rpartition("::")[2]] = text
    return lines


def test_a_replaying_tests_line_is_what_its_cassette_held_as_it_ran(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    # The test removes its own cassette once it has replayed it: a line read at the
    # session's end would find nothing there.
    gone = "\ndef test_gone(tapeproxy):\n    assert ask('a longer question, to count') \n"
    gone += "    if tapeproxy.mode.value == 'replay':\n"
    gone += "        import shutil; shutil.rmtree(tapeproxy.path)\n"
    write_test(project, chat_test("What is the capital of France?", gone))
    project.runpytest("--tapeproxy-mode", "once").assert_outcomes(passed=2)
    cassettes = project.path / "tests" / "cassettes"
    expected = {
        name: ls_line(cassettes, f"test_chat/{name}") for name in ("test_capital", "test_gone")
    }
    fake.stop()

    replayed = project.runpytest()
    replayed.assert_outcomes(passed=2)
    assert usage_lines(replayed.outlines) == expected
    assert not (cassettes / "test_chat" / "test_gone").exists()


def test_a_cassette_a_test_records_into_is_read_again_at_the_sessions_end(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    shared = (
        "\nimport pytest\n\n"
        "@pytest.mark.tapeproxy(cassette='shared', mode='replay')\n"
        "def test_a():\n    assert ask('first')\n\n"
        "@pytest.mark.tapeproxy(cassette='shared', mode='auto')\n"
        "def test_b():\n    assert ask('first') and ask('second, which is longer')\n"
    )
    write_test(project, chat_test("unused", shared))
    cassettes = project.path / "tests" / "cassettes"
    first = project.runpytest("-k", "test_b")  # records both questions into `shared`
    first.assert_outcomes(passed=1, deselected=2)
    (cassettes / "shared" / next(iter(_recorded(cassettes / "shared")))).unlink()
    # test_a replays what is left (one question), then test_b records the missing one anew.
    run = project.runpytest("-k", "test_a or test_b", "-p", "no:randomly")
    run.assert_outcomes(passed=2, deselected=1)
    line = ls_line(cassettes, "shared")
    assert usage_lines(run.outlines) == {"test_a": line, "test_b": line}


def _recorded(folder: Path) -> list[str]:
    """The recording of the second question (the one test_a does not ask)."""
    return [p.name for p in folder.glob("*.json") if b"second, which is longer" in p.read_bytes()]
