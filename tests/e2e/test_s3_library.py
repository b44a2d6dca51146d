"""An `s3://` cassette library on a real SeaweedFS: `tapeproxy serve` records into it and replays
from it with the upstream down, its objects are the files a folder library gets, two servers
record into one bucket at once and lose nothing, and every cassette command works on it."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI
from tests.support.seaweed import BUCKET, SeaweedFS
from tests.support.serve import ROOT, TAPEPROXY, Serve

pytest_plugins = ["pytester"]
DOWN = "openai=http://127.0.0.1:9"  # the discard port: nothing answers there


def chat(url: str, text: str) -> str:
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
    )
    return answer.choices[0].message.content or ""


def objects(seaweed: SeaweedFS, library: str, state: bool = False) -> dict[str, bytes]:
    """Every object under the library's prefix (its state folder aside, unless `state`),
    with its bytes, read with obstore from the same AWS variables."""
    import obstore
    from obstore.store import S3Store

    prefix = library.removeprefix(f"s3://{BUCKET}/")
    client = S3Store(BUCKET, prefix=prefix, client_options={"allow_http": True})
    names = [meta["path"] for chunk in obstore.list(client) for meta in chunk]
    return {
        name: bytes(obstore.get(client, name).bytes())
        for name in names
        if state or not name.startswith(".tapeproxy/")
    }


def put(library: str, name: str, data: bytes) -> None:
    import obstore
    from obstore.store import S3Store

    prefix = library.removeprefix(f"s3://{BUCKET}/")
    obstore.put(S3Store(BUCKET, prefix=prefix, client_options={"allow_http": True}), name, data)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    return subprocess.run(
        [*TAPEPROXY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )


def record(library: str, fake: FakeUpstream, cwd: Path, questions: list[str]) -> None:
    server = Serve(
        ["--mode", "record", "--cassettes", library, "--upstream", f"openai={fake.url}"], cwd
    )
    assert "record ready on" in server.ready, server.stop()
    for question in questions:
        chat(server.url, question)
    code, err = server.stop()
    assert code == 0, err


def viewed(library: str) -> str:
    """The library page `tapeproxy view` serves for `library`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    view = subprocess.Popen(
        [*TAPEPROXY, "view", "--cassettes", library, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert view.stdout is not None
        ready = view.stdout.readline()
        assert library in ready, ready + view.stderr.read() if view.stderr else ready
        page = httpx.get(ready.rsplit(" on ", 1)[1].strip(), timeout=60)
        assert page.status_code == 200
        return page.text
    finally:
        view.terminate()
        view.communicate(timeout=30)


QUESTIONS = ["one", "two", "two", "three"]  # `two` twice: a second ordinal


def test_objects_have_the_names_and_bytes_a_folder_library_gets(
    seaweed: SeaweedFS, s3_library: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    folder = tmp_path / "cassettes"
    record(s3_library, fake, tmp_path, QUESTIONS)
    record(str(folder), fake, tmp_path, QUESTIONS)
    files = {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in folder.rglob("*.json")
        if ".tapeproxy" not in path.parts
    }
    assert len(files) == 4 and any(name.endswith(".2.json") for name in files)
    assert objects(seaweed, s3_library) == files


def test_a_replay_from_s3_needs_no_upstream_and_every_command_works_on_it(
    seaweed: SeaweedFS, s3_library: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    record(s3_library, fake, tmp_path, QUESTIONS)
    recorded = objects(seaweed, s3_library)
    replay = Serve(["--cassettes", s3_library, "--upstream", DOWN], tmp_path)
    answers = [chat(replay.url, question) for question in ["one", "two", "three"]]
    code, err = replay.stop()
    assert code == 0, err
    assert all(answers)
    assert fake.count() == 4, "the replay called no upstream"
    assert objects(seaweed, s3_library) == recorded, "a replay writes nothing in a cassette"
    assert ".tapeproxy/runs/default.json" in objects(seaweed, s3_library, state=True)

    stray = next(iter(recorded))  # an object no cassette may be named for, put by hand
    put(s3_library, stray.replace("default/", "has space/"), recorded[stray])
    listed = cli("ls", "--cassettes", s3_library, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(c["name"], c["exchanges"]) for c in json.loads(listed.stdout)] == [("default", 4)]
    assert listed.stderr.startswith(f"skipped {s3_library}/has space: cassette name"), listed
    commands = [["show", "default"], ["verify", "default"], ["diff", "default", "default"]]
    for command in [*commands, ["report", "--json"]]:
        done = cli(*command, "--cassettes", s3_library)
        assert done.returncode == 0, (command, done.stderr)
    assert "default" in viewed(s3_library)
    pruned = cli("prune", "default", "--cassettes", s3_library)
    assert pruned.returncode == 0, pruned.stderr
    after = json.loads(cli("ls", "--cassettes", s3_library, "--json").stdout)
    assert after[0]["exchanges"] == 3, "the second `two`, unused by the replay, is pruned"
    redacted = cli("redact", "default", "--pattern", "one", "--cassettes", s3_library)
    assert redacted.returncode == 0, redacted.stderr
    assert cli("verify", "default", "--cassettes", s3_library).returncode == 0


@pytest.mark.parametrize("mode", ["auto", "record"])
def test_two_servers_record_into_one_bucket_at_once_and_a_third_replays_it_all(
    s3_library: str, fake: FakeUpstream, tmp_path: Path, mode: str
) -> None:
    args = ["--mode", mode, "--cassettes", s3_library, "--upstream", f"openai={fake.url}"]
    servers = [Serve(args, tmp_path), Serve(args, tmp_path)]
    # Each lists the cassette on its first request; then both miss `shared` and record it.
    for n, server in enumerate(servers):
        chat(server.url, f"warm-up {n}")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        jobs = [
            pool.submit(chat, server.url, question)
            for n, server in enumerate(servers)
            for question in ["shared", *[f"server {n} question {i}" for i in range(10)]]
        ]
        [job.result() for job in jobs]
    errs = [server.stop() for server in servers]
    assert [code for code, _ in errs] == [0, 0], errs
    shared = 2 if mode == "auto" else 1  # auto: the later one takes ordinal 2; record: one file
    if mode == "record":
        assert "another server's copy kept" in "".join(err for _, err in errs)
    verified = cli("verify", "default", "--cassettes", s3_library, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = json.loads(cli("ls", "--cassettes", s3_library, "--json").stdout)
    assert listed[0]["exchanges"] == 2 + 20 + shared

    replay = Serve(["--cassettes", s3_library, "--upstream", DOWN], tmp_path)
    for n in range(2):
        chat(replay.url, f"warm-up {n}")
        for i in range(10):
            chat(replay.url, f"server {n} question {i}")
    for _ in range(shared):
        chat(replay.url, "shared")
    code, err = replay.stop()
    assert code == 0, err
    assert "0 misses" in err and "never used" not in err


PLUGIN_TEST = """
import httpx
import openai

def test_capital(tapeproxy):
    client = openai.OpenAI(max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Capital of France?"}]
    )
    assert answer.choices[0].message.content == "echo: Capital of France?"
"""


def test_the_pytest_plugin_records_into_s3_then_replays_from_it(
    seaweed: SeaweedFS,
    s3_library: str,
    fake: FakeUpstream,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith(("TAPEPROXY_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TAPEPROXY_UPSTREAM", f"openai={fake.url}")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_OPENAI)
    pytester.makepyfile(test_chat=PLUGIN_TEST)
    options = ["-p", "no:cacheprovider", "--tapeproxy-cassettes", s3_library]
    pytester.runpytest(*options, "--tapeproxy-mode", "once").assert_outcomes(passed=1)
    assert [name.rpartition("/")[0] for name in objects(seaweed, s3_library)] == [
        "test_chat/test_capital"
    ]
    fake.stop()
    monkeypatch.delenv("OPENAI_API_KEY")
    pytester.runpytest(*options).assert_outcomes(passed=1)
    assert fake.count() == 1


def test_the_guide_recipe_serves_and_lists_an_s3_library(
    seaweed: SeaweedFS, s3_library: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    """Each `tapeproxy` line of the recipe, run as written against this machine's SeaweedFS
    (its endpoint and key pair for the recipe's)."""
    from tests.e2e.test_guide_recipes import recipe

    lines = [line for line in recipe("s3-library").splitlines() if line.startswith("tapeproxy ")]
    serve_line, ls_line = lines
    assert "s3://cassettes/ci" in serve_line and BUCKET == "cassettes"
    server = Serve([*serve_line.split()[2:], "--upstream", f"openai={fake.url}"], tmp_path)
    assert "auto ready on" in server.ready, server.stop()
    chat(server.url, "from the guide")
    code, err = server.stop()
    assert code == 0, err
    listed = cli(*ls_line.split()[1:], "--json")
    assert listed.returncode == 0, listed.stderr
    assert "default" in [cassette["name"] for cassette in json.loads(listed.stdout)]
