"""The pytest plugin, run by pytester on test files that drive the openai SDK: record with
`once`, replay offline, fail on a miss (caught or not), rewrite, unused recordings, xdist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.store.protocol import parse_exchange_file
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under

pytest_plugins = ["pytester"]

CHAT_TEST = """
import openai

def ask(prompt):
    client = openai.OpenAI(max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
    )
    return answer.choices[0].message.content

def test_capital(tapeproxy):
    assert ask(PROMPT) == "echo: " + PROMPT
"""


def chat_test(prompt: str, body: str = "") -> str:
    return f"PROMPT = {prompt!r}\n" + CHAT_TEST + body


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project with its tests under tests/ and no tapeproxy settings of the outer session."""
    for name in list(os.environ):
        if name.startswith(("TAPEPROXY_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    pytester.mkdir("tests")
    return pytester


def write_test(project: pytest.Pytester, source: str, name: str = "test_chat") -> Path:
    path = project.path / "tests" / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return path


def recordings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.json") if parse_exchange_file(p.name))


def upstream_at(monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream) -> None:
    """Record against the fake, with a key as a real recording needs one."""
    monkeypatch.setenv("TAPEPROXY_UPSTREAM", f"openai={fake.url},anthropic={fake.url}")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_OPENAI)


def test_once_records_a_new_test_then_it_replays_offline(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    write_test(project, chat_test("What is the capital of France?"))

    first = project.runpytest("--tapeproxy-mode", "once")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["tapeproxy: 0 replayed, 1 recorded, 0 missed*"])
    cassette = project.path / "tests" / "cassettes" / "test_chat" / "test_capital"
    assert len(recordings(cassette)) == 1
    assert len(fake.hits) == 1

    assert not any(SECRET_OPENAI.encode() in data for data in files_under(cassette).values())

    fake.stop()
    monkeypatch.delenv("OPENAI_API_KEY")  # replay needs none: the plugin sets a placeholder
    second = project.runpytest()  # replay, the default; the upstream is gone
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["tapeproxy: 1 replayed, 0 recorded, 0 missed*"])
    second.stdout.fnmatch_lines(
        ["tapeproxy tokens and cost per test:", "  *test_chat.py::test_capital: ? in / ? out, $*"]
    )
    assert len(fake.hits) == 1


def test_the_library_may_be_a_file_url_and_an_unknown_scheme_is_refused(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    write_test(project, chat_test("Hello?"))
    url = f"file://{project.path / 'elsewhere'}"
    result = project.runpytest("--tapeproxy-mode", "once", "--tapeproxy-cassettes", url)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"tapeproxy: 0 replayed, 1 recorded, 0 missed (cassettes in {url})"]
    )
    [cassette] = (project.path / "elsewhere").glob("**/test_capital")
    assert len(recordings(cassette)) == 1
    wrong = project.runpytest("--tapeproxy-cassettes", "nosuch://tapes")
    wrong.assert_outcomes(errors=1)
    wrong.stdout.fnmatch_lines(["*tapeproxy: no cassette store for 'nosuch://tapes'*file://*"])


def test_a_diverging_request_fails_with_the_field_diff_even_when_caught(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    write_test(project, chat_test("Say hello"))
    project.runpytest("--tapeproxy-mode", "record").assert_outcomes(passed=1)
    fake.stop()

    swallowing = """
@pytest.mark.tapeproxy(cassette="test_chat/test_capital")
def test_swallows_the_error():
    try:
        ask(PROMPT)
    except openai.APIStatusError:
        pass  # the code under test catches it: the plugin still fails the test
"""
    write_test(project, "import pytest\n" + chat_test("Say goodbye", swallowing))
    result = project.runpytest()
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    failure = out[out.index("_ test_swallows_the_error _") :]
    assert (
        "tapeproxy: 1 request(s) missed cassette 'test_chat/test_capital' (mode replay" in failure
    )
    assert 'body.messages[0].content: "Say hello" -> "Say goodbye"' in failure
    assert "--tapeproxy-mode record" in failure
    result.stdout.fnmatch_lines(["tapeproxy: 0 replayed, 0 recorded, 2 missed*"])


def test_record_mode_rewrites_a_tests_cassette_to_what_it_asks_now(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    twice = "\ndef test_two(tapeproxy):\n    ask('one'); ask('two')\n"
    write_test(project, chat_test("x", twice))
    project.runpytest("--tapeproxy-mode", "record", "-k", "test_two").assert_outcomes(passed=1)
    cassette = project.path / "tests" / "cassettes" / "test_chat" / "test_two"
    assert len(recordings(cassette)) == 2

    write_test(project, chat_test("x", "\ndef test_two(tapeproxy):\n    ask('one')\n"))
    project.runpytest("--tapeproxy-mode", "record", "-k", "test_two").assert_outcomes(passed=1)
    assert len(recordings(cassette)) == 1

    fake.stop()
    project.runpytest("-k", "test_two").assert_outcomes(passed=1)


def test_record_mode_deletes_nothing_of_a_cassette_a_marker_shares_between_tests(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    shared = (
        "\nimport pytest\n\n"
        "@pytest.mark.tapeproxy(cassette='shared')\n"
        "def test_one():\n    ask('one'); ask('one'); ask('uno')\n\n"
        "@pytest.mark.tapeproxy(cassette='shared')\n"
        "def test_two():\n    ask('one'); ask('two')\n"
    )
    write_test(project, chat_test("x", shared))
    project.runpytest("--tapeproxy-mode", "record", "-k", "one or two").assert_outcomes(passed=2)
    assert len(recordings(project.path / "tests" / "cassettes" / "shared")) == 4

    fake.stop()
    project.runpytest("-k", "one or two").assert_outcomes(passed=2)


def test_fail_on_unused_fails_a_test_that_left_recordings_unused(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    write_test(project, chat_test("x", "\ndef test_two(tapeproxy):\n    ask('one'); ask('two')\n"))
    project.runpytest("--tapeproxy-mode", "record", "-k", "test_two").assert_outcomes(passed=1)
    fake.stop()

    write_test(project, chat_test("x", "\ndef test_two(tapeproxy):\n    ask('one')\n"))
    project.runpytest("-k", "test_two").assert_outcomes(passed=1)
    strict = project.runpytest("-k", "test_two", "--tapeproxy-fail-on-unused")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*1 recording(s) of cassette 'test_chat/test_two' went unused*"])


def prune(project: pytest.Pytester, *args: str) -> tuple[int, str]:
    library = project.path / "tests" / "cassettes"
    result = CliRunner().invoke(
        app, ["prune", "test_chat/test_two", "--cassettes", str(library), *args]
    )
    return result.exit_code, result.output


def test_prune_deletes_nothing_after_a_failing_test_and_then_only_what_it_did_not_use(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    write_test(project, chat_test("x", "\ndef test_two(tapeproxy):\n    ask('one'); ask('two')\n"))
    project.runpytest("--tapeproxy-mode", "record", "-k", "test_two").assert_outcomes(passed=1)
    cassette = project.path / "tests" / "cassettes" / "test_chat" / "test_two"
    recorded = recordings(cassette)
    assert len(recorded) == 2
    fake.stop()

    # Its request changed: the test fails on the miss, and both recordings went unused.
    changed = "\ndef test_two(tapeproxy):\n    ask('one, changed'); ask('two')\n"
    write_test(project, chat_test("x", changed))
    project.runpytest("-k", "test_two").assert_outcomes(failed=1)
    code, out = prune(project)
    assert code == 2 and "did not pass (its test failed, and 1 request(s) missed" in out
    assert "nothing deleted" in out and recordings(cassette) == recorded

    # It passes asking one of the two; then it fails before asking anything.
    write_test(project, chat_test("x", "\ndef test_two(tapeproxy):\n    ask('one')\n"))
    project.runpytest("-k", "test_two").assert_outcomes(passed=1)
    failing = "\ndef test_two(tapeproxy):\n    assert False, 'not yet'\n    ask('one')\n"
    write_test(project, chat_test("x", failing))
    project.runpytest("-k", "test_two").assert_outcomes(failed=1)
    code, out = prune(project, "--dry-run")
    assert code == 2 and "did not pass (its test failed, errored or was skipped" in out
    assert recordings(cassette) == recorded

    # Passing again: prune relies on that run and deletes only what it did not use.
    write_test(project, chat_test("x", "\ndef test_two(tapeproxy):\n    ask('one')\n"))
    result = project.runpytest("-k", "test_two")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["tapeproxy: the plugin added * s over 1 test(s) (* ms a test), measured in its hooks*"]
    )
    code, out = prune(project, "--dry-run")
    assert code == 0 and "relying on the last finished run, in replay mode, started " in out
    assert "which passed: it served 1 recording(s) and left 1 unused" in out
    code, out = prune(project)
    assert code == 0 and "deleted 1 recording(s)" in out
    assert len(recordings(cassette)) == 1 and set(recordings(cassette)) < set(recorded)
    project.runpytest("-k", "test_two").assert_outcomes(passed=1)  # what it needs is still there


def test_the_fixture_gives_urls_and_sets_the_environment_only_during_the_test(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://before.invalid/v1")
    write_test(
        project,
        """
import os
import pytest

def test_fixture(tapeproxy):
    assert tapeproxy.url.startswith("http://127.0.0.1:")
    base = tapeproxy.base_url("openai")
    assert os.environ["OPENAI_BASE_URL"] == base == tapeproxy.url + "/openai/v1"
    assert os.environ["ANTHROPIC_BASE_URL"] == tapeproxy.url + "/anthropic"
    assert tapeproxy.cassette == "test_urls/test_fixture"
    assert tapeproxy.mode == "replay"
    assert os.environ["OPENAI_API_KEY"]  # a placeholder in replay: the SDK wants one
    with pytest.raises(ValueError, match="no upstream named 'nope'"):
        tapeproxy.base_url("nope")

@pytest.mark.tapeproxy(cassette="shared/one", mode="auto")
def test_marker(tapeproxy):
    assert tapeproxy.cassette == "shared/one"
    assert tapeproxy.mode == os.environ.get("EXPECTED_MODE", "auto")

@pytest.mark.tapeproxy
def test_marker_alone():
    assert os.environ["OPENAI_BASE_URL"].endswith("/openai/v1")

def test_after():
    assert os.environ["OPENAI_BASE_URL"] == "http://before.invalid/v1"
""",
        name="test_urls",
    )
    project.runpytest().assert_outcomes(passed=4)

    # The command line wins over the marker.
    monkeypatch.setenv("EXPECTED_MODE", "passthrough")
    project.runpytest("--tapeproxy-mode", "passthrough", "-k", "test_marker").assert_outcomes(
        passed=2
    )


def test_a_bad_marker_fails_its_test_with_a_clear_message(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import pytest

@pytest.mark.tapeproxy(cassette="../escape")
def test_bad_name():
    pass

@pytest.mark.tapeproxy(mode="rewind")
def test_bad_mode():
    pass

@pytest.mark.tapeproxy(faults=["rate_limit@p=2"])
def test_bad_fault():
    pass
""",
    )
    result = project.runpytest()
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        [
            "*cassette name '../escape' is not allowed*",
            "*mode='rewind'*use one of record*",
            "*fault 'rate_limit@p=2': probability '2' is outside [[]0, 1[]]*",
        ]
    )


FAULTS_TEST = """
import openai
import pytest

def ask():
    client = openai.OpenAI(max_retries=0)
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}]
    )

@pytest.mark.tapeproxy(cassette="shared", faults=["server_error:status=502@1"])
def test_first(tapeproxy):
    with pytest.raises(openai.InternalServerError) as raised:
        ask()
    assert raised.value.status_code == 502
    assert ask().choices[0].finish_reason == "stop"

@pytest.mark.tapeproxy(cassette="shared", faults=["server_error:status=502@1"])
def test_second_starts_a_new_run_of_faults(tapeproxy):
    with pytest.raises(openai.InternalServerError):
        ask()
    assert ask().choices[0].finish_reason == "stop"

@pytest.mark.tapeproxy(cassette="shared")
def test_without_faults(tapeproxy):
    assert ask().choices[0].finish_reason == "stop"
"""


def test_a_markers_faults_start_anew_with_every_test_and_are_never_recorded(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    write_test(project, FAULTS_TEST)
    project.runpytest("--tapeproxy-mode", "once").assert_outcomes(passed=3)
    cassette = project.path / "tests" / "cassettes" / "shared"
    assert len(recordings(cassette)) == 1  # the 502s were never written
    fake.stop()
    replay = project.runpytest()  # the faults come again over the recording
    replay.assert_outcomes(passed=3)


def test_xdist_workers_each_run_their_own_server(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: FakeUpstream
) -> None:
    upstream_at(monkeypatch, fake)
    tests = "".join(
        f"\ndef test_{n}(tapeproxy):\n    assert ask('question {n}') == 'echo: question {n}'\n"
        for n in range(4)
    )
    write_test(project, chat_test("x", tests))
    first = project.runpytest_subprocess("-p", "xdist", "-n", "2", "--tapeproxy-mode", "once")
    first.assert_outcomes(passed=5)
    first.stdout.fnmatch_lines(["tapeproxy: 0 replayed, 5 recorded, 0 missed*"])
    fake.stop()
    project.makeconftest(
        "import sys\n\n"
        "def pytest_unconfigure(config):\n"
        "    if not hasattr(config, 'workerinput'):  # the controller\n"
        "        read = 'tapeproxy.tools.listing' in sys.modules\n"
        "        served = 'tapeproxy.settings' in sys.modules\n"
        "        (config.rootpath / 'controller-read.txt').write_text(f'{read} {served}')\n"
    )

    second = project.runpytest_subprocess("-p", "xdist", "-n", "2")
    second.assert_outcomes(passed=5)
    second.stdout.fnmatch_lines(["tapeproxy: 5 replayed, 0 recorded, 0 missed*"])
    second.stdout.fnmatch_lines(["  *test_chat.py::test_3: ? in / ? out, $*"])  # from a worker
    second.stdout.fnmatch_lines(["tapeproxy: the plugin added * 5 test(s)*"])  # all workers'
    # Each worker read its tests' cassettes for tokens and cost; the controller read none,
    # and did not import the server's side (the settings, pydantic) at all.
    assert (project.path / "controller-read.txt").read_text() == "False False"


def passes_alone(project: pytest.Pytester, source: str) -> None:
    """`source` as the project's one test file, run in a fresh interpreter (what it imports
    is what pytest and the plugin import): its one test passes."""
    write_test(project, source)
    project.runpytest_subprocess().assert_outcomes(passed=1)


def test_a_run_that_uses_no_tapeproxy_never_imports_its_server(project: pytest.Pytester) -> None:
    passes_alone(
        project,
        "import sys\n\n"
        "def test_plain():\n"
        "    assert 'tapeproxy.cli.pytest_plugin' in sys.modules, 'the plugin is loaded'\n"
        "    assert 'tapeproxy.cli.background' not in sys.modules\n"
        "    assert 'aiohttp' not in sys.modules and 'uvicorn' not in sys.modules\n"
        "    assert 'tapeproxy.settings' not in sys.modules, 'nor the settings, nor pydantic'\n"
        "    assert 'pydantic' not in sys.modules\n",
    )


def test_a_server_builds_its_page_at_the_first_request_for_it(project: pytest.Pytester) -> None:
    passes_alone(
        project,
        "import sys, urllib.request\n\n"
        "def test_page(tapeproxy):\n"
        "    assert 'jinja2' not in sys.modules, 'no one asked for the page yet'\n"
        "    with urllib.request.urlopen(tapeproxy.url + '/__tapeproxy/ui/') as answer:\n"
        "        assert answer.status == 200 and b'</html>' in answer.read()\n"
        "    assert 'tapeproxy.viewer.app' in sys.modules\n",
    )


def test_a_replaying_server_never_imports_the_upstream_client(project: pytest.Pytester) -> None:
    passes_alone(
        project,
        "import json, sys, urllib.request\n\n"
        "def test_replaying(tapeproxy):\n"
        "    with urllib.request.urlopen(tapeproxy.url + '/__tapeproxy/health') as answer:\n"
        "        assert json.load(answer)['status'] == 'ok'\n"
        "    assert 'tapeproxy.cli.background' in sys.modules, 'the server runs'\n"
        "    assert 'aiohttp' not in sys.modules, 'made at the first request that goes live'\n",
    )
