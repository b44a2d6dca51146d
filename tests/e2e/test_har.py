"""`tapeproxy export har` writes HAR 1.2 that `tapeproxy import har` reads back into the same
exchange files, byte for byte: JSON answers, SSE streams of two dialects, NDJSON, a
repeated request; and a HAR another tool wrote imports and replays."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import REPOSITORY, SECRET_ANTHROPIC, SECRET_OPENAI, files_under

MESSAGES: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]


def record_some(make_proxy: MakeProxy, fake: FakeUpstream) -> None:
    proxy = make_proxy(mode="record")
    chat = openai.OpenAI(base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    chat.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    for _ in chat.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True):
        pass
    claude = anthropic.Anthropic(
        base_url=proxy.url + "/anthropic", api_key=SECRET_ANTHROPIC, max_retries=0
    )
    with claude.messages.stream(
        model="claude-3-5-haiku-latest", max_tokens=64, messages=MESSAGES
    ) as stream:
        stream.get_final_message()
    fake.script("/v1/embeddings", Reply(body={"n": 1}), Reply(body={"n": 2}))
    for _ in range(2):
        httpx.post(proxy.url + "/openai/v1/embeddings", json={"model": "e", "input": "again"})
    ndjson = {"model": "llama3", "messages": MESSAGES, "stream": True}
    assert httpx.post(proxy.url + "/ollama/api/chat", json=ndjson).status_code == 200
    proxy.stop()


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_export_then_import_gives_back_the_same_files_byte_for_byte(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    record_some(make_proxy, fake)
    recorded = files_under(cassettes / "default")
    assert len(recorded) == 6
    har = tmp_path / "default.har"
    cli("export", "har", "default", "--cassettes", str(cassettes), "-o", str(har))

    log = json.loads(har.read_text())["log"]
    assert log["version"] == "1.2" and log["creator"]["name"] == "tapeproxy"
    assert len(log["entries"]) == 6
    for entry in log["entries"]:
        assert {"startedDateTime", "time", "request", "response", "cache", "timings"} <= set(entry)
        assert {"method", "url", "httpVersion", "cookies", "headers", "queryString"} <= set(
            entry["request"]
        )
        assert {"status", "statusText", "content", "redirectURL"} <= set(entry["response"])
    streamed = [e for e in log["entries"] if "frames" in e["_tapeproxy"]]
    assert len(streamed) == 3  # openai and anthropic SSE, ollama NDJSON
    for entry in streamed:  # the joined body, as a HAR viewer shows it
        text = entry["response"]["content"]["text"]
        assert text == "".join(f["text"] for f in entry["_tapeproxy"]["frames"])

    library = tmp_path / "imported"
    output = cli("import", "har", str(har), "--cassettes", str(library))
    assert "-> default: 6 exchange(s)" in output
    assert files_under(library / "default") == recorded


def test_a_har_without_tapeproxy_fields_imports_and_replays(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    """The entries as any HAR writer gives them (no `_tapeproxy`): the stream is split into
    its frames again, and the SDK replays it from the cassette with the upstream gone."""
    record_some(make_proxy, fake)
    har = tmp_path / "plain.har"
    cli("export", "har", "default", "--cassettes", str(cassettes), "-o", str(har))
    data = json.loads(har.read_text())
    for entry in data["log"]["entries"]:
        del entry["_tapeproxy"]
    har.write_text(json.dumps(data))
    library = tmp_path / "plain"
    cli("import", "har", str(har), "--cassettes", str(library))
    fake.stop()
    proxy = make_proxy(mode="replay", cassettes=library, cassette="plain")
    chat = openai.OpenAI(base_url=proxy.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    stream = chat.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "echo: What is the capital of France?"
    for expected in (1, 2):
        answer = httpx.post(
            proxy.url + "/openai/v1/embeddings", json={"model": "e", "input": "again"}
        )
        assert answer.json() == {"n": expected}


NODE_DIR = Path(__file__).resolve().parents[1] / "node"


@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "@pollyjs").is_dir(),
    reason="needs node and `npm ci --prefix tests/node` (.ci/run does it)",
)
def test_a_har_polly_js_wrote_imports_and_replays_the_same_answers(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path
) -> None:
    """Polly.JS (a real HAR writer: mitmproxy would downgrade this environment's
    cryptography and h11) records Node's http requests to the fake, a JSON answer and a
    stream; the imported cassette replays both byte for byte, credentials left out."""
    recordings = tmp_path / "polly"
    ran = subprocess.run(
        ["node", str(NODE_DIR / "polly.mjs"), fake.url, str(recordings), SECRET_OPENAI],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    answers = json.loads(ran.stdout)
    (har,) = recordings.rglob("*.har")
    assert json.loads(har.read_text())["log"]["creator"]["name"] == "Polly.JS"
    assert SECRET_OPENAI in har.read_text()
    library = tmp_path / "lib"
    output = cli(
        "import", "har", str(har), "--cassettes", str(library), "--cassette", "polly",
        "--upstream", f"openai={fake.url}",
    )  # fmt: skip
    assert "-> polly: 2 exchange(s)" in output
    written = files_under(library).values()
    assert not any(SECRET_OPENAI.encode() in data for data in written)
    assert sum(b'"frames"' in data for data in written) == 1  # the stream, as its frames
    fake.stop()
    proxy = make_proxy(mode="replay", cassettes=library, cassette="polly")
    body = {"model": "gpt-4o-mini", "messages": MESSAGES}
    replayed = [
        httpx.post(proxy.url + "/openai/v1/chat/completions", json=body).text,
        httpx.post(proxy.url + "/openai/v1/chat/completions", json={**body, "stream": True}).text,
    ]
    assert replayed == answers
    assert replayed[1].startswith("data: ") and replayed[1].rstrip().endswith("data: [DONE]")


def test_import_and_export_go_through_the_store_to_an_s3_library(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path, s3_library: str
) -> None:
    record_some(make_proxy, fake)
    har = tmp_path / "default.har"
    cli("export", "har", "default", "--cassettes", str(cassettes), "-o", str(har))
    cli("import", "har", str(har), "--cassettes", s3_library)
    again = tmp_path / "again.har"
    cli("export", "har", "default", "--cassettes", s3_library, "-o", str(again))
    assert again.read_bytes() == har.read_bytes()
    listed = json.loads(cli("ls", "--cassettes", s3_library, "--json"))
    assert [(c["name"], c["exchanges"]) for c in listed] == [("default", 6)]


def test_frame_times_and_a_cut_answer_come_back_from_a_har(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    proxy = make_proxy(mode="record", record_failures=True)
    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True}
    fake.frame_delay = 0.02
    httpx.post(proxy.url + "/openai/v1/chat/completions", json=body)
    fake.cut_after = 2
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(proxy.url + "/openai/v1/chat/completions", json={**body, "n": 2})
    proxy.stop()
    recorded = files_under(cassettes / "default")
    exchanges = [json.loads(data) for data in recorded.values()]
    assert sorted(e["outcome"] for e in exchanges) == ["complete", "upstream_cut"]
    assert any(f["ms"] > 0 for e in exchanges for f in e["response"]["frames"])
    har = tmp_path / "timed.har"
    cli("export", "har", "default", "--cassettes", str(cassettes), "-o", str(har))
    cli("import", "har", str(har), "--cassettes", str(tmp_path / "lib"), "--cassette", "default")
    assert files_under(tmp_path / "lib" / "default") == recorded


# mitmproxy lives in a venv of its own (.ci/run makes it): its 11.x, the last for Python
# 3.11, pins cryptography and h11 below what this project's stack uses.
MITMDUMP = REPOSITORY / ".ci" / "mitmproxy" / "bin" / "mitmdump"


def mitmdump() -> str | None:
    return str(MITMDUMP) if MITMDUMP.is_file() else shutil.which("mitmdump")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_har_mitmproxy_wrote_imports_and_replays_the_same_answers(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path
) -> None:
    """mitmdump as a reverse proxy on loopback in front of the fake, dumping HAR: a gzip
    JSON answer and a stream, imported and replayed byte for byte with the fake gone."""
    found = mitmdump()
    if found is None:
        why = "needs mitmdump (.ci/run installs it in .ci/mitmproxy/)"
        if os.environ.get("CI"):  # as the browser tests: skipped in CI, it would never run
            pytest.fail(f"the mitmproxy test must run in CI: {why}")
        pytest.skip(why)
    port, har = free_port(), tmp_path / "mitm.har"
    fake.gzip = True
    command = [found, "--mode", f"reverse:{fake.url}", "--listen-host", "127.0.0.1"]
    command += ["--listen-port", str(port), "--set", f"hardump={har}", "-q"]
    dump = subprocess.Popen(command)
    try:
        wait_for_port(port, dump)
        body = {"model": "gpt-4o-mini", "messages": MESSAGES}
        base = f"http://127.0.0.1:{port}/v1/chat/completions"
        key = {"authorization": f"Bearer {SECRET_OPENAI}"}
        answers = [
            httpx.post(base, json=body, headers=key).text,
            httpx.post(base, json={**body, "stream": True}, headers=key).text,
        ]
    finally:
        dump.send_signal(signal.SIGINT)  # the HAR is written as mitmdump ends
        dump.wait(timeout=60)
    assert json.loads(har.read_text())["log"]["creator"]["name"] == "mitmproxy"
    library = tmp_path / "lib"
    upstream = f"openai={fake.url}"
    output = cli("import", "har", str(har), "--cassettes", str(library), "--upstream", upstream)
    assert "-> mitm: 2 exchange(s)" in output
    assert not any(SECRET_OPENAI.encode() in data for data in files_under(library).values())
    fake.stop()
    proxy = make_proxy(mode="replay", cassettes=library, cassette="mitm")
    replayed = [
        httpx.post(proxy.url + "/openai/v1/chat/completions", json=body).text,
        httpx.post(proxy.url + "/openai/v1/chat/completions", json={**body, "stream": True}).text,
    ]
    assert replayed == answers
    assert json.loads(answers[0])["object"] == "chat.completion"


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "mitmdump stopped"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"mitmdump did not listen on {port} within 60 s")


def test_export_names_the_upstreams_tapeproxy_toml_gives(tmp_path: Path) -> None:
    """An upstream set in tapeproxy.toml (not on the command line) gives the exported URLs,
    as it gives serve's and the import's; a password in its URL is left out."""
    config = tmp_path / "tapeproxy.toml"
    library = tmp_path / "lib"
    upstream = f"search=http://user:{SECRET_OPENAI}@127.0.0.1:9000/base"
    config.write_text(f'cassettes = "{library}"\nupstream = ["{upstream}"]\n')
    entry = {
        "request": {"method": "GET", "url": "http://127.0.0.1:9000/base/q?x=1", "headers": []},
        "response": {
            "status": 200,
            "headers": [{"name": "content-type", "value": "application/json"}],
            "content": {"size": 7, "mimeType": "application/json", "text": '{"a":1}'},
        },
    }
    har = tmp_path / "in.har"
    har.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    cli("import", "har", str(har), "--config", str(config), "--cassette", "s")
    text = cli("export", "har", "s", "--config", str(config))
    assert SECRET_OPENAI not in text
    exported = json.loads(text)
    (one,) = exported["log"]["entries"]
    assert one["request"]["url"] == "http://127.0.0.1:9000/base/q?x=1"
    assert one["_tapeproxy"]["upstream"] == "search"


def test_bad_tapeproxy_fields_are_skipped_not_written(tmp_path: Path) -> None:
    """A `_tapeproxy` field no export writes (an edited or foreign HAR): an upstream that is
    no name serve takes (a recording under it could never be found), times that are no
    whole milliseconds. Each entry skipped with why; nothing is
    written that `verify` (or a replay) could not read back."""

    def entry(n: int, ours: dict[str, Any]) -> dict[str, Any]:
        stream = "data: {}\n\n"
        return {
            "request": {"method": "POST", "url": f"https://api.openai.com/v1/e{n}", "headers": []},
            "response": {
                "status": 200,
                "headers": [{"name": "content-type", "value": "text/event-stream"}],
                "content": {"size": len(stream), "mimeType": "text/event-stream", "text": stream},
            },
            "_tapeproxy": ours,
        }

    bad: list[dict[str, Any]] = [
        {"upstream": {"name": "openai"}},
        {"upstream": "ok\n"},
        {"end_ms": -5},
        {"end_ms": 1.5},
        {"frames": [{"ms": 10**30, "text": "data: {}\n\n"}]},
    ]
    har = tmp_path / "edited.har"
    entries = [entry(n, ours) for n, ours in enumerate([*bad, {"end_ms": 7}])]
    har.write_text(json.dumps({"log": {"version": "1.2", "entries": entries}}))
    library = str(tmp_path / "lib")
    result = CliRunner().invoke(app, ["import", "har", str(har), "--cassettes", library])
    assert result.exit_code == 1, result.output
    assert "skipped #1: not a HAR entry (ValueError: its _tapeproxy upstream is {" in result.output
    assert "upstream is 'ok\\n', not a name serve takes" in result.output
    for number, value in ((3, -5), (4, 1.5), (5, 10**30)):
        assert (
            f"skipped #{number}: not a HAR entry (ValueError: {value} is not a time"
            in result.output
        )
    assert "cassette 'edited': 1 written" in result.output
    cli("verify", "edited", "--cassettes", library)


def test_export_to_a_closed_pipe_says_stdout(tmp_path: Path) -> None:
    """`tapeproxy export har NAME | head`: the reader goes away; the error names stdout."""
    text = json.dumps({"data": "x" * 300_000})
    entry = {
        "request": {"method": "POST", "url": "https://api.openai.com/v1/e", "headers": []},
        "response": {
            "status": 200,
            "headers": [{"name": "content-type", "value": "application/json"}],
            "content": {"size": len(text), "mimeType": "application/json", "text": text},
        },
    }
    har, library = tmp_path / "long.har", str(tmp_path / "lib")
    har.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    cli("import", "har", str(har), "--cassettes", library)
    export = [sys.executable, "-m", "tapeproxy", "export", "har", "long", "--cassettes", library]
    process = subprocess.Popen(export, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    said = process.stderr.read().decode()
    assert process.wait(timeout=60) != 0
    assert "cannot write stdout: Broken pipe" in said, said
