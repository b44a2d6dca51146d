"""`tapeproxy show` (table, bodies, a stream's joined text, one exchange) and `tapeproxy diff`
on cassettes recorded by the real server from the fake upstream, run as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_GEMINI, SECRET_OPENAI, committed

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
KEYS = {
    "authorization": f"Bearer {SECRET_OPENAI}",
    "x-api-key": SECRET_ANTHROPIC,
    "anthropic-version": "2023-06-01",
}
CHAT = "/openai/v1/chat/completions"


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], **extra}


# (path, body, the assistant's text as the fake answers it)
STREAMS = [
    (CHAT, ask("stream from chat", stream=True), "echo: stream from chat"),
    (
        "/openai/v1/responses",
        {"model": "gpt-4.1", "input": "stream from responses", "stream": True},
        "echo: stream from responses",
    ),
    (
        "/anthropic/v1/messages",
        {**ask("stream from claude", stream=True), "model": "claude-haiku-4-5", "max_tokens": 9},
        "echo: stream from claude",
    ),
    (
        f"/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key={SECRET_GEMINI}",
        {"contents": [{"parts": [{"text": "stream from gemini"}]}]},
        "echo: stream from gemini",
    ),
    (
        "/ollama/api/chat",
        {"model": "llama3.2", "messages": [{"role": "user", "content": "stream from ollama"}]},
        "echo: stream from ollama",
    ),
]


def post(url: str, path: str, body: dict[str, Any], cassette: str = "default") -> httpx.Response:
    answer = httpx.post(url + path, json=body, headers={**KEYS, "x-tapeproxy-cassette": cassette})
    assert answer.status_code == 200, answer.text
    return answer


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tapeproxy ARGS` in a real process, its output piped."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    environ.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "tapeproxy", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def recorded(make_proxy: MakeProxy, cassettes: Path) -> Path:
    """One cassette with a JSON answer and a stream of every dialect."""
    proxy = make_proxy(mode="record")
    post(proxy.url, CHAT, ask("What is the capital of France?"))
    for path, body, _ in STREAMS:
        post(proxy.url, path, body)
    proxy.stop()
    return cassettes


def test_show_full_prints_bodies_and_each_streams_joined_text(recorded: Path) -> None:
    code, out = run("show", "default", "--full", "--cassettes", str(recorded))
    assert code == 0, out
    assert '"content": "echo: What is the capital of France?"' in out, "the JSON answer"
    assert '"content": "What is the capital of France?"' in out, "the request body"
    for _, _, text in STREAMS:
        assert text in out, f"joined: {text}"
    assert "data: " not in out, "frames only on request"
    code, out = run("show", "default", "--full", "--frames", "--cassettes", str(recorded))
    assert code == 0 and "data: " in out and '"text_delta"' in out
    code, out = run("show", "default", "--full", "--json", "--cassettes", str(recorded))
    texts = [row["text"] for row in json.loads(out)["exchanges"]]
    assert texts == ["echo: What is the capital of France?", *(t for _, _, t in STREAMS)]


def test_show_exchange_takes_a_key_prefix_and_refuses_an_ambiguous_one(recorded: Path) -> None:
    keys = sorted(p.name.split(".")[0] for p in (recorded / "default").glob("*.json"))
    unique = next(
        key[:n]
        for key in keys
        for n in range(1, 65)
        if sum(other.startswith(key[:n]) for other in keys) == 1
    )
    code, out = run("show", "default", "--exchange", unique, "--cassettes", str(recorded))
    assert code == 0, out
    assert out.count("== #") == 1 and "-- request body" in out
    # the first two keys in order share the most with each other (maybe nothing: "" is
    # then the prefix, which every key has)
    shared = keys[0][: next(n for n in range(64) if keys[0][n] != keys[1][n])]
    code, out = run("show", "default", "--exchange", shared, "--cassettes", str(recorded))
    assert code == 2 and "ambiguous" in out and "give more of the key" in out
    code, out = run("show", "default", "--exchange", "zz", "--cassettes", str(recorded), "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "config_error"


def test_the_table_never_folds_a_path_in_a_narrow_or_piped_terminal(recorded: Path) -> None:
    done = cli("show", "default", "--cassettes", str(recorded), env={"COLUMNS": "60"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0].split()
    assert header[:4] == ["#", "method", "upstream", "path"] and "cost" in header
    assert "key" in header and "model" in header and "frames" in header
    assert len(lines) == 1 + 1 + len(STREAMS), "one line per exchange"
    gemini = [line for line in lines if "gemini" in line]
    assert gemini and "/v1beta/models/gemini-2.5-flash:streamGenerateContent" in gemini[0]
    assert "\x1b[" not in done.stdout + done.stderr, "no colour when piped"


def spoil(folder: Path) -> tuple[Path, Path]:
    """Two of a cassette's files spoiled as by hand: one cut short, one with a status that is
    no number. Which is which, by file."""
    torn, edited = sorted(folder.glob("*.json"))[:2]
    torn.write_text(torn.read_text()[:50])
    data = json.loads(edited.read_text())
    data["response"]["status"] = "two hundred"
    edited.write_text(json.dumps(data, indent=2))
    return torn, edited


def test_show_says_which_files_are_unreadable_and_why_and_exits_1(recorded: Path) -> None:
    torn, edited = spoil(recorded / "default")
    done = cli("show", "default", "--cassettes", str(recorded))
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "-1" not in out and "0/0" not in out, "no made-up numbers for a file not read"
    assert "gpt-4o-mini" in out, "the readable exchanges are still listed"
    notes = [line for line in out.splitlines() if "unreadable:" in line]
    assert any(torn.name in line and "Unterminated string" in line for line in notes), out
    assert any(edited.name in line and "response.status" in line for line in notes), out
    assert "tapeproxy verify default" in out
    done = cli("show", "default", "--cassettes", str(recorded), "--json")
    assert done.returncode == 1
    rows = {row["file"]: row for row in json.loads(done.stdout)["exchanges"]}
    assert rows[edited.name]["outcome"] == "unreadable"
    assert rows[edited.name]["problem"].startswith("response.status: ")
    assert rows[torn.name]["problem"].startswith("Unterminated string")
    readable = [row for row in rows.values() if row["outcome"] != "unreadable"]
    assert len(readable) == len(rows) - 2 and all(row["problem"] is None for row in readable)
    done = cli("show", "default", "--full", "--cassettes", str(recorded))
    assert done.returncode == 1 and f"{edited.name}: unreadable: response.status" in done.stdout


def test_verify_names_the_field_that_failed_validation(recorded: Path) -> None:
    torn, edited = spoil(recorded / "default")
    done = cli("verify", "default", "--cassettes", str(recorded))
    assert done.returncode == 1
    assert f"{edited.name}: unreadable: response.status: Input should be a valid integer" in (
        done.stdout
    ), done.stdout
    assert "'two hundred'" in done.stdout, "what was found there"
    done = cli("verify", "default", "--cassettes", str(recorded), "--json")
    problems = {p["file"]: p["problem"] for p in json.loads(done.stdout)[0]["problems"]}
    assert problems[edited.name].startswith("unreadable: response.status: ")
    assert problems[torn.name].startswith("unreadable: Unterminated string")


def test_verify_flags_a_body_stored_with_nan_by_an_older_tapeproxy(recorded: Path) -> None:
    older = sorted((recorded / "default").glob("*.json"))[0]
    data = json.loads(older.read_text())
    data["request"]["body"] = {"json": {"model": "m", "temperature": float("nan")}}
    older.write_text(json.dumps(data, indent=2))  # as json.dumps writes it: `NaN`
    done = cli("verify", "default", "--cassettes", str(recorded))
    assert done.returncode == 1
    assert f"{older.name}: request.body.json holds NaN or Infinity" in done.stdout, done.stdout


@pytest.mark.parametrize("command", [("ls",), ("show", "nope"), ("diff", "a", "b"), ("verify",)])
def test_errors_are_json_under_json_and_plain_text_without_colour_otherwise(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    missing = str(tmp_path / "typo")
    done = cli(*command, "--cassettes", missing, "--json")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "config_error" and error["message"]
    done = cli(*command, "--cassettes", missing, env={"NO_COLOR": "1"})
    assert done.returncode == 2 and done.stderr.startswith("tapeproxy: ")
    assert "\x1b[" not in done.stderr and done.stdout == ""


def record_pair(make_proxy: MakeProxy, fake: FakeUpstream) -> None:
    """`a`: q1, q2, q3 and a stream. `b`: the stream (slower, first), q1, q2 answered
    otherwise, and q4."""
    proxy = make_proxy(mode="record")
    stream = ask("a stream", stream=True)
    for text in ("q1", "q2", "q3"):
        post(proxy.url, CHAT, ask(text), "a")
    post(proxy.url, CHAT, stream, "a")
    fake.frame_delay = 0.02  # other timings, and another recorded order: neither counts
    post(proxy.url, CHAT, stream, "b")
    post(proxy.url, CHAT, ask("q1"), "b")
    answer = httpx.post(fake.url + "/v1/chat/completions", json=ask("q2")).json()
    answer["choices"][0]["message"]["content"] = "a new answer"
    answer["usage"]["completion_tokens"] += 5
    fake.script("/v1/chat/completions", Reply(body=answer))
    post(proxy.url, CHAT, ask("q2"), "b")
    post(proxy.url, CHAT, ask("q4"), "b")
    proxy.stop()


def test_diff_finds_the_added_removed_and_changed_exchanges_and_exits_1(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    record_pair(make_proxy, fake)
    code, out = run("diff", "a", "b", "--cassettes", str(cassettes), "--json")
    assert code == 1, out
    found = json.loads(out)
    assert found["equal"] is False and found["same"] == 2
    [removed], [added], [changed] = found["only_a"], found["only_b"], found["changed"]
    for entry in (removed, added, changed):
        assert entry["request"] == "POST openai /v1/chat/completions"
    paths = {d["path"]: d for d in changed["differences"]}
    content = paths["response.body.choices[0].message.content"]
    assert content == {
        "path": "response.body.choices[0].message.content",
        "a": "echo: q2",
        "b": "a new answer",
    }
    assert "response.body.usage.completion_tokens" in paths
    assert found["delta"]["output_tokens"] == 5
    assert found["delta"]["input_tokens"] == 0, "q3 and q4 ask alike"
    assert found["delta"]["cost_usd"] == pytest.approx(5 * 0.6 / 1e6)
    code, out = run("diff", "a", "b", "--cassettes", str(cassettes))
    assert code == 1
    assert "only in A (1):" in out and "only in B (1):" in out and "changed (1):" in out
    assert 'response.body.choices[0].message.content: "echo: q2" -> "a new answer"' in out
    assert "+5 out" in out


def test_diff_of_identical_cassettes_exits_0_and_of_a_missing_one_2(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    record_pair(make_proxy, fake)
    copy = tmp_path / "elsewhere" / "copy-of-a"
    shutil.copytree(cassettes / "a", copy)
    code, out = run("diff", "a", str(copy), "--cassettes", str(cassettes), "--json")
    assert code == 0, out
    found = json.loads(out)
    assert found["equal"] is True and found["only_a"] == found["only_b"] == found["changed"] == []
    assert found["same"] == 4 and found["delta"]["cost_usd"] == 0
    code, out = run("diff", "a", "nope", "--cassettes", str(cassettes))
    assert code == 2 and "no cassette 'nope'" in out
    code, out = run("diff", "a", "nope", "--cassettes", str(cassettes), "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "config_error"


def test_diff_of_two_libraries_is_an_error_not_equal(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    record_pair(make_proxy, fake)
    other = tmp_path / "other-library"
    shutil.copytree(cassettes, other)
    shutil.rmtree(other / "a")  # the libraries differ, but hold no exchange at the top
    code, out = run("diff", str(cassettes), str(other))
    assert code == 2, out
    assert "no exchange files in" in " ".join(out.split())


def test_diff_reports_a_changed_stream_by_its_text_and_frame_count(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    body = ask("tell me", stream=True)
    post(proxy.url, CHAT, body, "a")
    fake.script(
        "/v1/chat/completions",
        Reply(
            body='data: {"choices":[{"delta":{"content":"told"}}]}\n\ndata: [DONE]\n\n',
            headers={"content-type": "text/event-stream"},
            chunked=True,
        ),
    )
    post(proxy.url, CHAT, body, "b")
    proxy.stop()
    code, out = run("diff", "a", "b", "--cassettes", str(cassettes), "--json")
    assert code == 1
    [changed] = json.loads(out)["changed"]
    paths = {d["path"]: d for d in changed["differences"]}
    assert paths["response.stream.text"] == {
        "path": "response.stream.text",
        "a": "echo: tell me",
        "b": "told",
    }
    assert paths["response.stream.frames"]["b"] == 2


def test_a_walk_over_thousands_of_files_shows_a_progress_bar_on_a_terminal_only(
    tmp_path: Path,
) -> None:
    [template] = [p for p in committed("example") if "frames" not in p.read_text()]
    exchange = json.loads(template.read_text())
    folder = tmp_path / "library" / "many"
    folder.mkdir(parents=True)
    for n in range(2100):
        key = f"{n:064x}"
        (folder / f"{key}.json").write_text(json.dumps({**exchange, "key": key, "seq": n}))
    library = str(tmp_path / "library")
    piped = cli("ls", "--cassettes", library)
    assert piped.returncode == 0 and piped.stderr == "" and "2100" in piped.stdout
    # rich takes FORCE_COLOR for a terminal
    terminal = cli("ls", "--cassettes", library, env={"FORCE_COLOR": "1"})
    assert terminal.returncode == 0
    assert "reading cassettes" in terminal.stderr and "/2100" in terminal.stderr


def test_no_color_writes_no_ansi_code_at_all_even_on_a_terminal(recorded: Path) -> None:
    terminal = {"FORCE_COLOR": "1", "COLUMNS": "400"}  # wide: the tables with bold headers
    for command in (["ls"], ["show", "default"]):
        coloured = cli(*command, "--cassettes", str(recorded), env=terminal)
        assert coloured.returncode == 0 and "\x1b[" in coloured.stdout, "a terminal: bold"
        plain = cli(*command, "--cassettes", str(recorded), env={**terminal, "NO_COLOR": "1"})
        assert plain.returncode == 0 and "\x1b[" not in plain.stdout + plain.stderr, command
