"""`tapeproxy serve` as a user runs it: a real process, its ready line, its signals, its config."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tapeproxy.exchange.model import load_exchange
from tests.fakes.upstream import FakeUpstream
from tests.support import copy_committed, files_under
from tests.support.serve import ROOT, TAPEPROXY, Serve


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_its_url_and_exits_cleanly_on_signals_with_cassettes_on_disk(
    workdir: Path, fake: FakeUpstream, sig: int
) -> None:
    serve = Serve(["--mode", "record", "--upstream", f"openai={fake.url}"], workdir)
    assert serve.url.startswith("http://127.0.0.1:"), serve.ready
    response = httpx.post(
        serve.url + "/openai/v1/embeddings",
        json={"model": "m", "input": "x"},
        headers={"authorization": "Bearer sk-test-fake"},
    )
    assert response.status_code == 200
    code, err = serve.stop(sig)
    assert code == 0, err
    [stored] = (workdir / "cassettes" / "default").glob("*.json")
    assert json.loads(stored.read_text())["response"]["status"] == 200
    assert "1 recorded" in err and "key=" in err
    assert "sk-test-fake" not in err


def test_environment_beats_the_config_file_and_the_command_line_beats_both(
    workdir: Path, fake: FakeUpstream
) -> None:
    (workdir / "tapeproxy.toml").write_text('mode = "passthrough"\ncassette = "from_file"\n')
    serve = Serve(["--cassette", "from_cli"], workdir, env={"TAPEPROXY_MODE": "auto"})
    state = httpx.get(serve.url + "/__tapeproxy/cassette").json()
    assert state == {"cassette": "from_cli", "mode": "auto"}
    assert serve.stop()[0] == 0


def run_in(
    workdir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`tapeproxy ARGS` run in `workdir`, with no TAPEPROXY_* of this process's and `env` on top."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    return subprocess.run(
        [*TAPEPROXY, *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--mode", "rewind"], {}, "--mode"),
        ([], {"TAPEPROXY_MODE": "rewind"}, "TAPEPROXY_MODE"),
        ([], {"TAPEPROXY_REPLAY_TIMING": "fast"}, "none, recorded"),
        (["--upstream", "openai"], {}, "NAME=URL"),
        (["--cassette", "../up"], {}, "not allowed"),
        (["--ignore", "openai:nose:user"], {}, "UPSTREAM:WHAT:NAME"),
        (["--cassettes", "ftp://host/tapes"], {}, "location starting with file://"),
        ([], {"TAPEPROXY_CASSETTES": "nosuch://tapes"}, "location starting with file://"),
        (["--fault", "rate_limit@p=2"], {}, "fault 'rate_limit@p=2': probability '2' is outside"),
        ([], {"TAPEPROXY_FAULT": "flood"}, "fault 'flood': unknown kind 'flood'"),
    ],
)
def test_a_bad_value_fails_at_start_naming_the_option(
    workdir: Path, args: list[str], env: dict[str, str], needle: str
) -> None:
    result = run_in(workdir, "serve", "--port", "0", *args, env=env)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


# What pydantic wraps around a message: never shown (tapeproxy.problems takes it off).
PYDANTIC_NOISE = ("Value error", "[type=", "errors.pydantic.dev", "validation error for", "('")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--ignore", "bogus"],
            {},
            "invalid settings: --ignore 'bogus': expected UPSTREAM:WHAT:NAME",
        ),
        (
            ["--fault", "flood"],
            {},
            "invalid settings: --fault: fault 'flood': unknown kind 'flood'",
        ),
        (
            [],
            {"TAPEPROXY_IGNORE": "bogus"},
            "invalid settings: --ignore (from TAPEPROXY_IGNORE): --ignore 'bogus': expected",
        ),
        (
            [],
            {"TAPEPROXY_CONNECT_TIMEOUT": "soon"},
            "invalid settings: --connect-timeout (from TAPEPROXY_CONNECT_TIMEOUT) 'soon': Input",
        ),
        (  # a choice on the command line is checked where the environment's is, not by Typer
            ["--mode", "rewind"],
            {},
            "invalid settings: --mode 'rewind': Input should be 'record', 'replay', 'auto', "
            "'once' or 'passthrough'",
        ),
        (
            ["--repeat", "forever"],
            {},
            "invalid settings: --repeat 'forever': Input should be 'error', 'repeat-last' or "
            "'cycle'",
        ),
    ],
)
def test_a_bad_value_is_one_line_without_pydantics_noise(
    workdir: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    result = run_in(workdir, "serve", "--port", "0", *args, env=env)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"tapeproxy: {message}"), line
    assert not [noise for noise in PYDANTIC_NOISE if noise in line], line


PASSWORD = "pass" + "word-" + "0123456789"  # (made at run time: no secret-shaped literal)


@pytest.mark.parametrize(
    ("args", "env", "toml", "shown"),
    [
        (["--upstream", f"openai=ftp://user:{PASSWORD}@x"], {}, "", "'ftp://***@x' needs"),
        (["--upstream", f"openai=https://user:{PASSWORD}@x/#a"], {}, "", "https://***@x/#a"),
        (["--upstream", f"openai=https://{PASSWORD}@x/?q=1"], {}, "", "https://***@x/?q=1"),
        (["--upstream", f"openai=user:{PASSWORD}@x"], {}, "", "'***@x' needs"),
        (["--upstream", f"https://user:{PASSWORD}@x"], {}, "", "'https://***@x' is not NAME"),
        (["--upstream", f"https://u:{PASSWORD}@x/a=b"], {}, "", "'https://***@x/a'"),
        ([], {"TAPEPROXY_UPSTREAM": f"openai=ftp://u:{PASSWORD}@x"}, "", "ftp://***@x"),
        ([], {}, f'upstream = "https://u:{PASSWORD}@x"\n', "'https://***@x': Input"),
        ([], {}, f'[upstream]\nopenai = "ftp://u:{PASSWORD}@x"\n', "ftp://***@x"),
        ([], {}, f'[upstream]\nopenai = ["https://u:{PASSWORD}@x"]\n', "['https://***@x']"),
        ([], {}, f'upstream = [["https://u:{PASSWORD}@x"]]\n', "['https://***@x']"),
    ],
    ids=[
        *("ftp", "fragment", "query", "no-scheme", "no-name", "in-name", "env", "toml"),
        *("table", "table-of-lists", "list-of-lists"),
    ],
)
def test_a_refused_upstream_url_is_quoted_without_its_user_and_password(
    workdir: Path, args: list[str], env: dict[str, str], toml: str, shown: str
) -> None:
    """Before, the message quoted the URL as typed, password and all."""
    if toml:
        (workdir / "tapeproxy.toml").write_text(toml)
    result = run_in(workdir, "serve", "--port", "0", *args, env=env)
    assert result.returncode == 2, result.stderr
    assert shown in result.stderr, result.stderr
    assert PASSWORD not in result.stderr + result.stdout


def test_a_bad_price_file_says_what_is_wrong_in_it(workdir: Path) -> None:
    (workdir / "prices.json").write_text('{"models": {"m": {"input": "cheap"}}}')
    copy_committed("example", workdir / "cassettes")
    result = run_in(workdir, "ls", "--prices", "prices.json")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "price file prices.json is not a price table: models.m.input: Input should be" in line
    assert not [noise for noise in PYDANTIC_NOISE if noise in line], line


def test_an_open_stream_cannot_hold_the_exit_forever(workdir: Path, fake: FakeUpstream) -> None:
    fake.frame_delay = 0.5
    serve = Serve(
        ["--mode", "record", "--shutdown-timeout", "1", "--upstream", f"openai={fake.url}"], workdir
    )
    long_prompt = " ".join(["word"] * 60)  # about 30 s of frames
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": long_prompt}]}
    with httpx.stream(
        "POST",
        serve.url + "/openai/v1/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-test-fake"},
    ) as response:
        next(response.iter_raw())
        code, err = serve.stop(signal.SIGTERM)
    assert code == 0, err
    assert len(fake.frames_sent) < 20, "the upstream stream was closed at shutdown"
    assert not (workdir / "cassettes" / "default").exists(), "no half exchange was written"


def test_cassettes_takes_a_file_url_for_serve_and_the_tools(
    workdir: Path, fake: FakeUpstream
) -> None:
    url = f"file://{workdir / 'tapes'}"
    serve = Serve(
        ["--mode", "record", "--cassettes", url, "--upstream", f"openai={fake.url}"], workdir
    )
    body = {"model": "m", "input": "x"}
    assert httpx.post(serve.url + "/openai/v1/embeddings", json=body).status_code == 200
    assert serve.stop()[0] == 0
    assert len(list((workdir / "tapes" / "default").glob("*.json"))) == 1
    listed = run_cli("ls", "--json", env={"TAPEPROXY_CASSETTES": url})
    assert [c["exchanges"] for c in json.loads(listed.stdout)] == [1], listed.stderr
    replay = Serve(["--upstream", f"openai={fake.url}"], workdir, env={"TAPEPROXY_CASSETTES": url})
    assert httpx.post(replay.url + "/openai/v1/embeddings", json=body).status_code == 200
    assert replay.stop()[0] == 0
    assert len(fake.hits) == 1, "replayed from the library the URL names"


def test_a_killed_proxy_leaves_only_whole_readable_exchanges(
    workdir: Path, fake: FakeUpstream
) -> None:
    """SIGKILL while 50 clients record: every exchange a client saw complete is on disk and
    parses, no file is torn, and the next recording server removes the kill's temp files."""
    serve = Serve(
        ["--mode", "record", "--log-level", "warning", "--upstream", f"openai={fake.url}"], workdir
    )
    stop = threading.Event()
    answered: list[str] = []  # the keys of the answers clients got whole

    def agent(worker: int) -> None:
        with httpx.Client(timeout=10) as client:
            for n in range(100):  # bounded; the kill normally comes first
                if stop.is_set():
                    return
                try:
                    response = client.post(
                        serve.url + "/openai/v1/embeddings",
                        json={"model": "m", "input": f"{worker}-{n}"},
                    )
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    answered.append(response.headers["x-tapeproxy-key"])

    workers = [threading.Thread(target=agent, args=(w,)) for w in range(50)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 60
    while len(answered) < 200 and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    serve.process.kill()
    serve.process.communicate(timeout=30)
    stop.set()
    for worker in workers:
        worker.join(timeout=30)
    cassette = workdir / "cassettes" / "default"
    assert len(answered) >= 200
    for key in answered:
        exchange = load_exchange((cassette / f"{key}.json").read_bytes())
        assert exchange.key == key
    for path in cassette.glob("*.json"):
        load_exchange(path.read_bytes())  # none torn
    recorded = files_under(cassette)
    # The next server that may record sweeps them (a replay deletes nothing in a cassette).
    again = Serve(["--mode", "record", "--log-level", "warning"], workdir)
    deadline = time.monotonic() + 30
    while list(cassette.glob(".*.tmp")) and time.monotonic() < deadline:
        threading.Event().wait(0.1)
    code, err = again.stop()
    assert code == 0, err
    assert list(cassette.glob(".*.tmp")) == [], "the next recording server sweeps them"
    assert {k: v for k, v in files_under(cassette).items() if not k.endswith(".tmp")} == {
        k: v for k, v in recorded.items() if not k.endswith(".tmp")
    }


def test_a_port_in_use_fails_at_start_with_status_1_and_says_so(workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            [*TAPEPROXY, "serve", "--port", port],
            cwd=workdir,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=30,
        )
    assert result.returncode == 1
    assert "address already in use" in result.stderr and "could not listen" in result.stderr


def run_cli(
    *args: str, columns: int = 80, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns), **(env or {})}
    return subprocess.run(
        [*TAPEPROXY, *args], capture_output=True, text=True, timeout=60, env=environ
    )


def test_serve_help_shows_every_option_and_variable_whole_at_80_columns() -> None:
    from tapeproxy.settings import Settings, env_name, option_name

    result = run_cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout and "..." not in result.stdout
    words = set(result.stdout.replace(".", " ").replace(",", " ").split())
    for field in Settings.model_fields:
        assert env_name(field) in words, env_name(field)
        assert option_name(field) in result.stdout


def test_ls_lists_the_readable_cassettes_when_one_file_is_corrupt(tmp_path: Path) -> None:
    for name in ("good", "bad"):
        copy_committed("example", tmp_path, name)
    broken = sorted((tmp_path / "bad").glob("*.json"))[0]
    broken.write_text('{"trunc')
    result = run_cli("ls", "--cassettes", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    listed = {row["cassette"]: row for row in json.loads(result.stdout)}
    assert listed["good"]["exchanges"] == 3 and listed["good"]["unreadable"] == 0
    assert listed["bad"]["unreadable"] == 1 and listed["bad"]["exchanges"] == 3
    shown = run_cli("ls", "--cassettes", str(tmp_path))
    assert "bad: 1 unreadable file(s)" in shown.stdout and "tapeproxy verify bad" in shown.stdout


def test_verify_warns_of_a_cassette_holding_only_a_torn_first_write(tmp_path: Path) -> None:
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / f".{'0' * 64}.json.k2x9.tmp").write_text('{"schema_version": 1, "ke')
    for args in (("verify",), ("verify", "fresh")):
        result = run_cli(*args, "--cassettes", str(tmp_path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "warning:" in result.stdout
        assert "left over from an interrupted write" in result.stdout


def test_a_serve_that_may_record_sweeps_what_killed_writes_left_and_a_replay_does_not(
    workdir: Path,
) -> None:
    folder = workdir / "cassettes" / "trip"
    folder.mkdir(parents=True)
    old, fresh = folder / f".{'0' * 64}.json.k2x9.tmp", folder / f".{'1' * 64}.json.a1b2.tmp"
    for path in (old, fresh):
        path.write_text('{"schema_version": 1, "ke')
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    code, err = Serve([], workdir).stop()
    assert code == 0, err
    assert old.exists() and "left over" not in err, "a replay deletes nothing in a cassette"
    code, err = Serve(["--mode", "record"], workdir).stop()
    assert code == 0, err
    assert not old.exists(), "an hour-old leftover is swept"
    assert fresh.exists(), "a fresh one may be another tapeproxy's write under way"
    assert err.count("left over") == 1


def test_serve_warns_at_start_about_a_rule_that_ignores_what_changes_the_answer(
    workdir: Path,
) -> None:
    serve = Serve(
        ["--ignore", "openai:body:model", "--ignore", "openai:body:metadata.run"], workdir
    )
    code, err = serve.stop()
    assert code == 0, err
    assert "'openai:body:model'" in err and "changes the answer" in err
    assert "metadata.run" not in err


KEY = "ghp" + "_" + "Fake0Key" * 4 + "Fake"  # a GitHub token's format, made at run time


@pytest.mark.parametrize("case", ["open_store", "unwritable", "ignore"])
def test_the_lines_serve_logs_before_its_server_exists_are_scrubbed_too(
    workdir: Path, case: str
) -> None:
    """Before, these lines were logged before the scrubbing every later line gets."""
    (workdir / "a-file").write_text("")
    args = {
        "open_store": ["--cassettes", f"nope://{KEY}"],
        "unwritable": ["--mode", "record", "--cassettes", str(workdir / "a-file" / KEY)],
        "ignore": ["--ignore", f"openai:body:{KEY}.model"],
    }[case]
    if case == "ignore":  # a warning: the server starts
        code, err = Serve(args, workdir).stop()
        assert code == 0, err
    else:
        done = run_in(workdir, "serve", "--port", "0", *args)
        code, err = done.returncode, done.stderr
        assert code == (2 if case == "open_store" else 1), err
    assert KEY not in err and "[redacted]" in err, err


def test_rekey_gives_serves_warning_about_a_rule_that_ignores_what_changes_the_answer(
    workdir: Path,
) -> None:
    rules = ["--ignore", "openai:body:model", "--ignore", "openai:body:metadata.run"]
    serve = Serve(rules, workdir)
    _, served = serve.stop()
    [warning] = [
        line.split("WARNING tapeproxy: ")[1] for line in served.splitlines() if "WARNING" in line
    ]
    assert "'openai:body:model'" in warning and "changes the answer" in warning
    copy_committed("example", workdir / "cassettes")
    for args, env in ((rules, {}), ([], {"TAPEPROXY_IGNORE": "openai:body:model"})):
        result = subprocess.run(
            [*TAPEPROXY, "rekey", "example", "--json", *args],
            cwd=workdir,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines() == [f"tapeproxy: warning: {warning}"]
        assert json.loads(result.stdout)["cassette"] == "example"  # stdout stays JSON


def test_a_shutdown_while_the_upstream_has_not_answered_is_quiet_and_exits_0(
    workdir: Path, hanging_upstream: tuple[str, threading.Event]
) -> None:
    url, hung_up = hanging_upstream
    serve = Serve(
        ["--mode", "record", "--upstream", f"tools={url}", "--shutdown-timeout", "0.5"], workdir
    )
    waiting = threading.Thread(
        target=lambda: httpx.post(serve.url + "/tools/slow", json={}, timeout=20), daemon=True
    )
    waiting.start()
    assert hung_up.wait(0.5) is False  # the request is with the upstream
    code, err = serve.stop()
    assert code == 0, err
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert hung_up.wait(10), "the upstream request was closed"


def test_the_cassette_tools_are_not_stopped_by_serve_only_settings(workdir: Path) -> None:
    env = {"TAPEPROXY_LIVE": "search", "TAPEPROXY_IGNORE": "search:query:ts", "TAPEPROXY_PORT": "x"}
    copy_committed("example", workdir / "cassettes")
    for command in ("ls", "show"):
        args = [command] + (["example"] if command == "show" else [])
        result = run_cli(*args, "--cassettes", str(workdir / "cassettes"), env=env)
        assert result.returncode == 0, result.stdout + result.stderr
