"""`tapeproxy drift` against a fake provider whose answers vary on every call and drift on a
switch: no false alarm on an unchanged provider, every seeded mutation found at its level and
path, the budget kept, keys from the environment, --update re-recording only what broke."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import anthropic
import httpx
import openai
import pytest
import yaml
from mcp import Client
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.settings import Settings
from tests.e2e.test_ci_workflow import WORKFLOWS, without_expressions
from tests.e2e.test_guide_recipes import recipe
from tests.fakes.drifting import MUTATIONS, DriftingUpstream
from tests.fakes.mcp_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import ProxyServer, check_jsonschema, files_under
from tests.support.viewer import View

KEYS = {
    "OPENAI_API_KEY": "sk-test-drift-openai",
    "ANTHROPIC_API_KEY": "sk-ant-test-drift",
    "GEMINI_API_KEY": "AIza-test-drift-gemini",
}
CASSETTES = (
    "anthropic-stream",
    "chat",
    "errors",
    "gemini-stream",
    "mcp",
    "mcp-legacy",
    "openai-stream",
)


def record(fake: DriftingUpstream, tools: ToolServer, library: Path) -> None:
    """One cassette of each kind, recorded through tapeproxy from the unchanged fakes."""
    upstreams = {"openai": fake.url, "anthropic": fake.url, "gemini": fake.url, "tools": tools.url}
    given = {"port": 0, "cassettes": library, "upstream": upstreams, "mode": "record"}
    settings = Settings.model_validate({**given, "cassette": "mcp"})
    with ProxyServer(settings) as proxy:

        def oai(cassette: str) -> openai.OpenAI:
            headers = {"x-tapeproxy-cassette": cassette}
            return openai.OpenAI(
                base_url=proxy.url + "/openai/v1",
                api_key=KEYS["OPENAI_API_KEY"],
                default_headers=headers,
                max_retries=0,
            )

        hello: Any = [{"role": "user", "content": "hello there"}]
        oai("chat").chat.completions.create(model="gpt-4o-mini", messages=hello)
        for _ in oai("openai-stream").chat.completions.create(
            model="gpt-4o-mini",
            messages=hello,
            stream=True,
        ):
            pass
        claude = anthropic.Anthropic(
            base_url=proxy.url + "/anthropic",
            api_key=KEYS["ANTHROPIC_API_KEY"],
            max_retries=0,
            default_headers={"x-tapeproxy-cassette": "anthropic-stream"},
        )
        with claude.messages.stream(model="claude-haiku-4-5", max_tokens=50, messages=hello) as s:
            s.until_done()
        gemini = proxy.url + "/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent"
        body = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}
        headers = {
            "x-tapeproxy-cassette": "gemini-stream",
            "x-goog-api-key": KEYS["GEMINI_API_KEY"],
        }
        assert httpx.post(gemini + "?alt=sse", json=body, headers=headers).status_code == 200
        with pytest.raises(openai.NotFoundError):
            oai("errors").chat.completions.create(model="gpt-bad", messages=hello)
        claude = claude.with_options(default_headers={"x-tapeproxy-cassette": "errors"})
        with pytest.raises(anthropic.NotFoundError):
            claude.messages.create(model="claude-bad", max_tokens=5, messages=hello)
        asyncio.run(mcp_session(proxy.url + "/tools/mcp", "2026-07-28"))
        proxy.put_cassette(cassette="mcp-legacy")  # a session: initialize, then its id
        asyncio.run(mcp_session(proxy.url + "/tools/mcp", "legacy"))


async def mcp_session(url: str, mode: str) -> None:
    async with Client(url, mode=mode) as client:
        await client.list_tools()
        await client.call_tool("add", {"a": 1, "b": 2})


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[DriftingUpstream, ToolServer]]:
    fake = DriftingUpstream()
    fake.start()
    try:
        with ToolServer() as tools:
            yield fake, tools
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def recorded(
    fakes: tuple[DriftingUpstream, ToolServer], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    library = tmp_path_factory.mktemp("drift") / "cassettes"
    record(*fakes, library)
    assert sorted(p.name for p in library.iterdir() if not p.name.startswith(".")) == list(
        CASSETTES
    )
    return library


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def drift(library: Path, fake: DriftingUpstream, tools_url: str, *args: str) -> tuple[int, Any]:
    """`tapeproxy drift --json` on `library` against the fakes: the exit code and the report."""
    upstreams = [f"openai={fake.url}", f"anthropic={fake.url}", f"gemini={fake.url}"]
    upstreams.append(f"tools={tools_url}")
    given = [f"--upstream={u}" for u in upstreams]
    result = CliRunner().invoke(
        app, ["drift", *args, "--cassettes", str(library), *given, "--json", "--call-tools"]
    )
    try:
        return result.exit_code, json.loads(result.output)
    except ValueError:
        raise AssertionError(result.output) from None


@pytest.mark.usefixtures("keys")
def test_an_unchanged_provider_gives_no_finding_in_three_runs(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer]
) -> None:
    fake, tools = fakes
    fake.mutation = None
    before = files_under(recorded)
    for how in ([], ["--concurrency", "4"], []):
        code, report = drift(recorded, fake, tools.url, *how)
        assert report["findings"] == [] and report["failed"] == [], report
        assert code == 0
        assert report["checked"] == len(before) and report["skipped"] == []
    assert files_under(recorded) == before  # drift writes nothing without --update


# Each mutation: the cassette it shows in, and the finding it must give (level, path).
EXPECTED: dict[str, tuple[str, str, str]] = {
    "chat-field-removed": ("chat", "error", "usage"),
    "chat-field-retyped": ("chat", "error", "created"),
    "chat-field-renamed": ("chat", "error", "system_fingerprint"),
    "chat-nested-added": ("chat", "info", "choices[].message.audio"),
    "chat-nested-removed": ("chat", "error", "usage.prompt_tokens_details"),
    "chat-item-retyped": ("chat", "error", "choices[].index"),
    "chat-enum-value": ("chat", "warn", "choices[].finish_reason"),
    "chat-status-400": ("chat", "error", "status"),
    "chat-content-type": ("chat", "error", "content-type"),
    "stream-field-removed": ("openai-stream", "error", "<message>.system_fingerprint"),
    "stream-enum-value": ("openai-stream", "warn", "<message>.object"),
    "stream-done-missing": ("openai-stream", "error", "<[DONE]>"),
    "anthropic-new-event": ("anthropic-stream", "info", "<content_block_citation>"),
    "anthropic-reordered": ("anthropic-stream", "error", "events"),
    "anthropic-event-missing": ("anthropic-stream", "error", "<content_block_stop>"),
    "anthropic-retyped": ("anthropic-stream", "error", "<message_delta>.usage.output_tokens"),
    "anthropic-stop-reason": ("anthropic-stream", "warn", "<message_delta>.delta.stop_reason"),
    "anthropic-nested-added": ("anthropic-stream", "info", "<message_start>.message.container"),
    "gemini-field-removed": ("gemini-stream", "error", "<message>.usageMetadata"),
    "gemini-finish-reason": ("gemini-stream", "warn", "<message>.candidates[].finishReason"),
    "error-shape": ("errors", "error", "error.type"),
    "error-status": ("errors", "error", "status"),
}


def test_the_suite_seeds_every_mutation_the_fake_knows() -> None:
    assert set(EXPECTED) == set(MUTATIONS) and len(EXPECTED) + 2 >= 20


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("mutation", sorted(EXPECTED))
def test_each_mutation_is_found_at_its_level_and_path(
    mutation: str, recorded: Path, fakes: tuple[DriftingUpstream, ToolServer]
) -> None:
    fake, tools = fakes
    cassette, level, path = EXPECTED[mutation]
    fake.mutation = mutation
    try:
        code, report = drift(recorded, fake, tools.url)  # the whole library
    finally:
        fake.mutation = None
    assert {f["cassette"] for f in report["findings"]} == {cassette}  # nothing else flagged
    at = {(f["level"], f["path"]) for f in report["findings"]}
    assert (level, path) in at, report["findings"]
    assert [f["level"] for f in report["findings"] if f["path"] == path] == [level]
    finding = next(f for f in report["findings"] if f["path"] == path)
    assert finding["cassette"] == cassette and "#1" in finding["exchange"]
    assert code == (1 if level == "error" else 0)


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize(
    ("variant", "path"),
    [("tool-removed", "tools.get_weather"), ("schema-changed", "tools.add.inputSchema")],
)
def test_an_mcp_server_whose_tools_changed(
    variant: str, path: str, recorded: Path, fakes: tuple[DriftingUpstream, ToolServer]
) -> None:
    fake, _ = fakes
    with ToolServer(variant) as changed:
        code, report = drift(recorded, fake, changed.url, "mcp")
    assert ("error", path) in {(f["level"], f["path"]) for f in report["findings"]}, report
    assert code == 1


def test_without_a_key_it_names_the_variable_and_exits_2(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    fake, _ = fakes
    hits = fake.count()
    result = CliRunner().invoke(
        app, ["drift", "chat", "--cassettes", str(recorded), f"--upstream=openai={fake.url}"]
    )
    assert result.exit_code == 2
    assert "OPENAI_API_KEY is not set" in result.output and len(result.output.splitlines()) == 1
    assert fake.count() == hits  # nothing sent


@pytest.mark.usefixtures("keys")
def test_the_budget_stops_before_spending_past_it_and_lists_what_it_skipped(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer]
) -> None:
    fake, tools = fakes
    hits = fake.count()
    code, report = drift(recorded, fake, tools.url, "--max-cost", "0")
    priced = [s for s in report["skipped"] if "--max-cost" in s["why"]]
    assert code == 0 and priced, report
    assert report["spent_usd"] == 0
    assert {s["cassette"] for s in priced} == {"chat", "anthropic-stream", "gemini-stream"}
    to_fake = [e for e in report["exchanges"] if " tools " not in e["request"]]
    assert fake.count() - hits == len(to_fake)  # the skipped ones were never sent
    code, report = drift(recorded, fake, tools.url, "--max-requests", "2")
    assert report["checked"] == 2 and len(report["skipped"]) == len(files_under(recorded)) - 2
    # anthropic-stream and chat, each priced by its live usage: a few cents at most
    assert 0 < report["spent_usd"] < 0.1 and report["unpriced"] == 0, report


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize(
    ("mutation", "broken"),
    [("chat-field-removed", "chat"), ("anthropic-event-missing", "anthropic-stream")],
)
def test_update_re_records_only_the_exchanges_with_an_error(
    mutation: str,
    broken: str,
    recorded: Path,
    fakes: tuple[DriftingUpstream, ToolServer],
    tmp_path: Path,
) -> None:
    fake, tools = fakes
    library = tmp_path / "cassettes"
    shutil.copytree(recorded, library)
    before = files_under(library)
    fake.mutation = mutation
    try:
        code, report = drift(library, fake, tools.url, "--update")
        again = drift(library, fake, tools.url, broken)
    finally:
        fake.mutation = None
    assert again[0] == 0 and again[1]["findings"] == []  # the new recording has the new shape
    assert code == 1 and [u["cassette"] for u in report["updated"]] == [broken], report
    after = files_under(library)
    changed = {name for name in before if before[name] != after.get(name)}
    assert len(changed) == 1 and changed.pop().startswith(f"{broken}/")
    assert set(after) == set(before)
    for path in library.rglob("*"):  # the keys drift sent: in no cassette, no state file
        if path.is_file():
            assert not any(key.encode() in path.read_bytes() for key in KEYS.values()), path
    verify = CliRunner().invoke(app, ["verify", "--cassettes", str(library)])
    assert verify.exit_code == 0, verify.output
    for cassette in CASSETTES:  # `tapeproxy diff` of each cassette, before and after
        compared = CliRunner().invoke(
            app, ["diff", str(recorded / cassette), str(library / cassette), "--json"]
        )
        assert compared.exit_code == (1 if cassette == broken else 0), compared.output
        shown = json.loads(compared.output)
        assert len(shown["changed"]) == (cassette == broken) and not shown["only_a"]
        assert not shown["only_b"]


@pytest.mark.usefixtures("keys")
def test_sample_markdown_and_junit(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer], tmp_path: Path
) -> None:
    fake, tools = fakes
    for _ in range(3):  # an MCP session is drawn whole, or not at all
        code, report = drift(recorded, fake, tools.url, "--sample", "3")
        assert code == 0 and report["checked"] >= 3 and report["skipped"] == [], report
        legacy = [e for e in report["exchanges"] if e["cassette"] == "mcp-legacy"]
        assert len(legacy) in (0, 5)
    fake.mutation = "anthropic-reordered"
    md, xml = tmp_path / "drift.md", tmp_path / "drift.xml"
    try:
        code, report = drift(recorded, fake, tools.url, "--markdown", str(md), "--junit", str(xml))
    finally:
        fake.mutation = None
    assert code == 1
    assert "| `error` | `anthropic-stream` |" in md.read_text()
    suite = ElementTree.parse(xml).getroot()[0]
    assert suite.get("tests") == str(report["checked"]) and suite.get("failures") == "1"
    failed = [c for c in suite if c.find("failure") is not None]
    assert [c.get("classname") for c in failed] == ["anthropic-stream"]
    assert "events reordered" in (failed[0].findtext("failure") or "")
    # The last report is kept in the state folder: `tapeproxy report` shows it.
    shown = CliRunner().invoke(app, ["report", "--cassettes", str(recorded)])
    assert shown.exit_code == 0 and "## Last drift" in shown.output, shown.output
    assert "error: `anthropic-stream " in shown.output and "events reordered" in shown.output
    shown = CliRunner().invoke(app, ["report", "--cassettes", str(recorded), "--json"])
    assert json.loads(shown.output)["drift"]["counts"]["error"] == 1
    viewer = View(recorded, tmp_path)  # and the viewer's library page
    try:
        page = httpx.get(viewer.url, timeout=30).text
    finally:
        viewer.stop()
    assert 'id="drift"' in page and "events reordered" in page


@pytest.mark.usefixtures("keys")
def test_the_weekly_ci_recipe_validates_and_its_drift_step_runs(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer], tmp_path: Path
) -> None:
    """docs/drift.md's workflow: a valid GitHub workflow on a weekly schedule, whose drift
    step, run by bash as on the runner (against the fakes), writes the JUnit report and
    fails the job on an error finding."""
    text = recipe("drift-ci")
    workflow = tmp_path / "drift.yml"
    workflow.write_text(text)
    checked = check_jsonschema(WORKFLOWS, workflow)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    loaded = yaml.safe_load(text)
    cron = loaded[True]["schedule"][0]["cron"].split()  # YAML reads `on` as True
    assert len(cron) == 5 and cron[2:4] == ["*", "*"] and cron[4] != "*"  # weekly
    step = next(
        s for s in loaded["jobs"]["drift"]["steps"] if "tapeproxy drift" in s.get("run", "")
    )
    assert "--junit" in step["run"]
    project = tmp_path / "project"
    shutil.copytree(recorded / "chat", project / "tests" / "cassettes" / "chat")
    fake, _ = fakes
    env = {
        **os.environ,
        **KEYS,
        "CASSETTES": loaded["env"]["CASSETTES"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TAPEPROXY_UPSTREAM": f"openai={fake.url}",
    }
    script = without_expressions(step["run"])
    for mutation, code in ((None, 0), ("chat-field-removed", 1)):
        fake.mutation = mutation
        try:
            ran = subprocess.run(
                ["bash", "-eo", "pipefail", "-c", script],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            fake.mutation = None
        assert ran.returncode == code, ran.stdout + ran.stderr
        assert "1 exchange(s) checked" in ran.stdout and KEYS["OPENAI_API_KEY"] not in ran.stdout
        suite = ElementTree.parse(project / "drift.xml").getroot()[0]
        assert suite.get("failures") == str(code)
        assert (project / "drift.md").read_text().startswith("# tapeproxy drift")


@pytest.mark.usefixtures("keys")
def test_a_recording_that_cannot_be_read_is_named_and_the_rest_checked(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer], tmp_path: Path
) -> None:
    fake, tools = fakes
    library = tmp_path / "cassettes"
    shutil.copytree(recorded, library)
    broken = next((library / "errors").glob("*.json"))
    broken.write_text("{")
    code, report = drift(library, fake, tools.url, "errors")
    assert code == 2 and report["checked"] == 1
    assert [f["exchange"][:12] for f in report["failed"]] == [broken.name[:12]]
    assert "cannot read" in report["failed"][0]["why"]


def test_no_library_or_no_such_cassette_is_one_line_and_exit_2(
    recorded: Path, tmp_path: Path
) -> None:
    for args in (["--cassettes", str(tmp_path / "none")], ["nope", "--cassettes", str(recorded)]):
        result = CliRunner().invoke(app, ["drift", *args])
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert "no recordings" in result.output
    result = CliRunner().invoke(app, ["drift", "mcp", "--cassettes", str(recorded)])
    assert result.exit_code == 2 and "--upstream tools=URL" in result.output


@pytest.mark.usefixtures("keys")
def test_mcp_tool_calls_are_not_sent_again_unless_asked(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer]
) -> None:
    """A tool call sent again acts again (a mail, a write): skipped, and said, by default;
    the session around it (initialize, tools/list) is still checked."""
    _, tools = fakes
    before = list(tools.calls)
    given = [f"--upstream=tools={tools.url}", "--json"]
    result = CliRunner().invoke(
        app, ["drift", "mcp", "mcp-legacy", "--cassettes", str(recorded), *given]
    )
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["findings"] == [], report
    assert tools.calls == before  # no tool ran
    calls = [s for s in report["skipped"] if "--call-tools" in s["why"]]
    assert {s["cassette"] for s in calls} == {"mcp", "mcp-legacy"} and len(calls) == 2
    assert (
        report["checked"]
        == len(files_under(recorded / "mcp")) + len(files_under(recorded / "mcp-legacy")) - 2
    )


@pytest.mark.usefixtures("keys")
def test_error_and_mcp_answers_cost_nothing_and_are_not_unpriced(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer]
) -> None:
    """An error answer is not billed and an MCP server's has no tokens: both are free, known
    to be, so not counted among the answers whose cost is unknown."""
    fake, tools = fakes
    fake.mutation = None
    code, report = drift(recorded, fake, tools.url, "errors", "mcp", "mcp-legacy")
    assert code == 0 and report["failed"] == [] and report["checked"] >= 6, report
    assert report["spent_usd"] == 0 and report["unpriced"] == 0, report


@pytest.mark.usefixtures("keys")
def test_an_mcp_session_whose_initialize_stays_limited_is_not_sent_on_nor_updated(
    recorded: Path, fakes: tuple[DriftingUpstream, ToolServer], tmp_path: Path
) -> None:
    """Its `initialize` rate limited past the retries: the requests after it would go with
    no session, and an MCP server refuses them (400, no session id). They say nothing of
    the server's shape, so they are not compared, and --update never writes those 400s over
    the recordings: they are listed as not sent, and nothing is sent after the initialize."""
    fake, _ = fakes
    library = tmp_path / "cassettes"
    shutil.copytree(recorded, library)
    before = files_under(library)
    limited = Reply(429, {"error": {"message": "slow down"}}, {"retry-after": "0"})
    missing = {"code": -32600, "message": "Bad Request: Missing session ID"}
    refused = Reply(400, {"jsonrpc": "2.0", "id": "server-error", "error": missing})
    with FakeUpstream() as server:
        server.script("/mcp", *[limited] * 3, *[refused] * 4)
        code, report = drift(library, fake, server.url, "mcp-legacy", "--update")
        sent = server.count()
    assert code == 2 and report["updated"] == [] and report["findings"] == [], report
    assert len(report["failed"]) == 5, report["failed"]
    assert files_under(library) == before
    assert sent == 3
