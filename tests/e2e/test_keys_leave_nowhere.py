"""A well-known key (each format of tapeproxy.redaction.formats) in a request's path, query,
headers or body, or in an answer's header, through a real `tapeproxy serve` and a real fake
upstream: it reaches no cassette file, no log line, no error body (404, 422), not the misses
journal and not the viewer; `verify` flags a file an older tapeproxy wrote with one (issue 38)."""

from __future__ import annotations

import json
import logging
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.background import BackgroundServer
from tapeproxy.cli.main import app
from tapeproxy.engine.spool import SPOOL_AFTER
from tapeproxy.modes import Mode
from tapeproxy.redaction.formats import FORMATS
from tapeproxy.redaction.secrets import MARKER
from tapeproxy.settings import Settings
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import library_files
from tests.support.serve import Serve, record_in_serve

# Built here, not written whole: a secret scanner looking at the repository finds no key.
PIECE = "Fake0Key" * 5
FAKE_KEYS = {
    "openai": "sk-" + "proj-" + PIECE,
    "anthropic": "sk-" + "ant-" + "api03-" + PIECE,
    "google": "AIza" + PIECE[:35],
    "github": "ghp" + "_" + PIECE[:36],
    "openai-ephemeral": "ek" + "_" + PIECE[:32],
    "aws": "AKIA" + "FAKEKEY234567ABC",
    "aws-session": "x-amz-security-" + "token:" + PIECE,
    "slack": "xox" + "b-" + "123456789012-" + PIECE[:12],
    "jwt": "eyJ" + "hbGciOiJub25lIn0" + "." + "eyJ" + "zdWIiOiJmYWtlIn0" + "." + "fakesig0",
}
GITHUB = FAKE_KEYS["github"]


def leaks(text: str) -> list[str]:
    """The formats whose fake key, or its last 12 characters (a key cut short), is in `text`."""
    return [name for name, key in FAKE_KEYS.items() if key in text or key[-12:] in text]


def stop(server: Serve) -> str:
    """Stop the server; everything it printed, stdout and stderr."""
    server.process.send_signal(signal.SIGTERM)
    out, err = server.process.communicate(timeout=30)
    assert server.process.returncode == 0, err
    return server.ready + out + err


def serve(mode: str, cassettes: Path, fake: FakeUpstream, cwd: Path, *extra: str) -> Serve:
    args = ["--mode", mode, "--cassettes", str(cassettes), "--upstream", f"tools={fake.url}"]
    return Serve([*args, *extra], cwd)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def on_disk(cassettes: Path) -> str:
    return "\n".join(path.read_text() for path in library_files(cassettes))


KEY_HEADER = ["--ignore", "tools:key-header:x-echo-key"]  # so a request header is stored too


def send(url: str, method: str, path: str, body: dict[str, str] | None, key: str) -> httpx.Response:
    return httpx.request(method, url + path, headers={"x-echo-key": key}, json=body, timeout=30)


def test_every_key_format_has_a_fake_key_of_its_shape() -> None:
    assert set(FAKE_KEYS) == set(FORMATS)
    for name, key in FAKE_KEYS.items():
        assert re.fullmatch(FORMATS[name][0], key), name


def test_a_key_in_a_header_is_stored_scrubbed(fake: FakeUpstream, tmp_path: Path) -> None:
    """Item 2: an answer header that is no credential by name (`x-echo-key`) carrying a key
    was stored as it came, and `verify` said ok; so was a request header a match rule keys
    on. Both are stored as the marker, and the answer's is replayed so."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path, *KEY_HEADER)
    live = send(server.url, "GET", "/tools/echo", None, GITHUB)
    stop(server)
    assert live.headers["x-echo-key"] == GITHUB  # a live answer reaches its client as it came
    assert leaks(on_disk(cassettes)) == []
    [path] = library_files(cassettes)
    stored = json.loads(path.read_text())
    assert stored["request"]["headers"]["x-echo-key"] == MARKER
    assert stored["response"]["headers"]["x-echo-key"] == MARKER
    server = serve("replay", cassettes, fake, tmp_path, *KEY_HEADER)
    replayed = send(server.url, "GET", "/tools/echo", None, GITHUB)
    stop(server)
    assert replayed.status_code == 200
    assert replayed.headers["x-echo-key"] == MARKER
    rules = ["--upstream", f"tools={fake.url}", *KEY_HEADER]
    assert cli("verify", "--cassettes", str(cassettes), *rules)[0] == 0


def test_a_key_in_the_header_of_an_answer_too_large_to_hold_is_stored_scrubbed(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """Past SPOOL_AFTER an answer is written a piece at a time under its head, which holds
    its headers: their values are scrubbed too."""
    reply = Reply(body="x" * (SPOOL_AFTER + 1024), headers={"x-echo-key": GITHUB}, chunked=True)
    received, _ = record_in_serve(fake, tmp_path, "/big", reply)
    assert received == SPOOL_AFTER + 1024
    stored = on_disk(tmp_path / "cassettes")
    assert f'"x-echo-key": "{MARKER}"' in stored
    assert leaks(stored) == []


def test_a_key_in_a_request_path_is_in_no_log_line_and_no_404(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """Item 1: the path was stored scrubbed, but the INFO line of the exchange printed it
    whole, in record and in replay, and so did the 404 of an unknown upstream and its
    WARNING."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path)
    assert httpx.get(f"{server.url}/tools/keys/{GITHUB}", timeout=30).status_code == 200
    printed = stop(server)
    assert "record tools GET /keys/[redacted]" in printed
    server = serve("replay", cassettes, fake, tmp_path)
    assert httpx.get(f"{server.url}/tools/keys/{GITHUB}", timeout=30).status_code == 200
    unknown = httpx.get(f"{server.url}/nope/{GITHUB}", timeout=30)
    printed += stop(server)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "unknown_upstream"
    assert "/nope/[redacted]" in unknown.json()["error"]["message"]
    assert "replay tools GET /keys/[redacted]" in printed
    assert leaks(printed) == []
    assert leaks(unknown.text) == []
    assert leaks(on_disk(cassettes)) == []


def test_a_miss_shows_no_key_an_older_tapeproxy_stored_in_its_closest_recording(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """A recording whose keyed request header an older tapeproxy stored with a key in it: a
    miss that comes closest to it names that header among the differences, and its 422, the
    misses journal, the viewer's misses page and the WARNING line show the marker instead."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path, *KEY_HEADER)
    send(server.url, "POST", "/tools/body/a", {"note": "a"}, GITHUB)
    stop(server)
    [path] = library_files(cassettes)
    stored = json.loads(path.read_text())
    assert stored["request"]["headers"]["x-echo-key"] == MARKER
    stored["request"]["headers"]["x-echo-key"] = GITHUB
    path.write_text(json.dumps(stored, indent=2, sort_keys=True))
    server = serve("replay", cassettes, fake, tmp_path, *KEY_HEADER)
    missed = send(server.url, "POST", "/tools/body/a", {"note": "b"}, GITHUB)
    journal = httpx.get(f"{server.url}/__tapeproxy/misses", timeout=30).text
    page = httpx.get(f"{server.url}/__tapeproxy/ui/misses", timeout=30).text
    printed = stop(server)
    assert missed.status_code == 422
    assert "x-echo-key" in missed.json()["error"]["message"]
    assert "x-echo-key" in journal
    assert "x-echo-key" in page
    assert leaks(missed.text + journal + page + printed) == []


def test_verify_flags_a_key_an_older_tapeproxy_stored_and_redact_mends_it(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """A file written before answer headers were scrubbed (or with a key put back by hand, in
    its answer's header and body) holds the key: `verify` fails with one line naming the file
    and the field, the viewer shows the body without it, and `redact` (the key formats only)
    scrubs it, after which `verify` passes."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path)
    headers = {"x-echo-key": GITHUB}
    httpx.get(f"{server.url}/tools/keys/{GITHUB}", headers=headers, timeout=30)
    stop(server)
    [path] = library_files(cassettes)
    stored = json.loads(path.read_text())
    answer = stored["response"]
    assert answer["headers"]["x-echo-key"] == MARKER
    assert answer["body"]["json"]["path"] == f"/keys/{MARKER}"
    answer["headers"]["x-echo-key"] = GITHUB
    answer["body"]["json"]["path"] = f"/keys/{GITHUB}"
    path.write_text(json.dumps(stored, indent=2, sort_keys=True))
    code, out = cli("verify", "--cassettes", str(cassettes))
    assert code == 1
    [line] = [line for line in out.splitlines() if "key format" in line]
    assert path.name in line
    assert "(github) in response.headers.x-echo-key" in line
    assert "--keep github" in line
    assert "tapeproxy redact default" in line
    assert leaks(out) == []
    server = serve("replay", cassettes, fake, tmp_path)
    where = {"cassette": "default", "file": path.name}
    page = httpx.get(f"{server.url}/__tapeproxy/ui/exchange", params=where, timeout=30)
    stop(server)
    assert page.status_code == 200
    assert "response body" in page.text
    assert leaks(page.text) == []
    assert cli("verify", "--cassettes", str(cassettes), "--keep", "github")[0] == 0
    assert cli("redact", "default", "--cassettes", str(cassettes))[0] == 0
    assert leaks(on_disk(cassettes)) == []
    assert cli("verify", "--cassettes", str(cassettes))[0] == 0


def requests_for(name: str, key: str) -> list[tuple[str, str, dict[str, str] | None]]:
    """Every way a request may carry `key`: its path, its query, a JSON body; and each sends
    it in a (keyed) header, which the fake upstream echoes back as an answer header."""
    return [
        ("GET", f"/tools/keys/{key}/tail", None),
        ("GET", f"/tools/query/{name}?q={key}", None),
        ("POST", f"/tools/body/{name}", {"note": key}),
    ]


def test_no_key_format_leaves_by_any_way_out(fake: FakeUpstream, tmp_path: Path) -> None:
    """The scan: every key format, sent every way, through record, replay, a miss (422) and an
    unknown upstream (404); then the cassettes, everything the server printed at its default
    log level, every error body, the misses journal and the viewer's pages hold none."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path, *KEY_HEADER)
    errors: list[str] = []
    for name, key in FAKE_KEYS.items():
        for method, path, body in requests_for(name, key):
            assert send(server.url, method, path, body, key).status_code == 200, (name, path)
        unknown = httpx.get(f"{server.url}/nope/{key}?q={key}", timeout=30)
        assert unknown.status_code == 404
        errors.append(unknown.text)
    printed = stop(server)
    server = serve("replay", cassettes, fake, tmp_path, *KEY_HEADER)
    pages: list[str] = []
    for name, key in FAKE_KEYS.items():
        for method, path, body in requests_for(name, key):
            replayed = send(server.url, method, path, body, key)
            assert replayed.status_code == 200, (name, path, replayed.text)
            assert replayed.headers["x-echo-key"] == MARKER
            assert leaks(replayed.text) == [], (name, path)
        again = {"note": f"{key} again"}  # no recording: a miss, its body differs
        missed = send(server.url, "POST", f"/tools/body/{name}?q={key}", again, key)
        assert missed.status_code == 422
        errors.append(missed.text)
        errors.append(httpx.get(f"{server.url}/nope/{key}?q={key}", timeout=30).text)
    journal = httpx.get(f"{server.url}/__tapeproxy/misses", timeout=30)
    assert len(journal.json()["misses"]) == len(FAKE_KEYS)
    ui = f"{server.url}/__tapeproxy/ui"
    pages += [httpx.get(f"{ui}/misses", timeout=30).text, httpx.get(f"{ui}/", timeout=30).text]
    pages.append(httpx.get(f"{ui}/cassette", params={"name": "default"}, timeout=30).text)
    for file in library_files(cassettes):
        where = {"cassette": "default", "file": file.name}
        pages.append(httpx.get(f"{ui}/exchange", params=where, timeout=30).text)
    printed += stop(server)
    assert len(library_files(cassettes)) == 3 * len(FAKE_KEYS)
    assert "[redacted]" in journal.text
    assert leaks(on_disk(cassettes)) == []
    assert leaks(printed) == []
    assert leaks("\n".join(errors)) == []
    assert leaks(journal.text) == []
    assert leaks("\n".join(pages)) == []
    upstream = ["--upstream", f"tools={fake.url}", *KEY_HEADER]
    assert cli("verify", "--cassettes", str(cassettes), *upstream)[0] == 0


def test_the_control_api_s_errors_quote_no_key(fake: FakeUpstream, tmp_path: Path) -> None:
    """An error of the control API quotes what its request sent: an unknown endpoint's path,
    a cassette name it refuses (in the body or the x-tapeproxy-cassette header), a fault
    spec it cannot read. Each is scrubbed as the proxy's own errors are."""
    server = serve("replay", tmp_path / "cassettes", fake, tmp_path)
    control = f"{server.url}/__tapeproxy"
    answers = [
        httpx.get(f"{control}/{GITHUB}", timeout=30),
        httpx.put(f"{control}/cassette", json={"cassette": f"{GITHUB} x"}, timeout=30),
        httpx.put(f"{control}/faults", json={"faults": [f"{GITHUB}:x=1"]}, timeout=30),
        httpx.get(f"{server.url}/tools/x", headers={"x-tapeproxy-cassette": f"{GITHUB} x"}),
    ]
    printed = stop(server)
    assert [a.status_code for a in answers] == [404, 400, 400, 400]
    assert all(f"{MARKER}" in a.json()["error"]["message"] for a in answers), answers
    assert leaks("\n".join(a.text for a in answers) + printed) == []


def test_a_percent_encoded_key_in_a_path_is_scrubbed_as_its_decoded_text(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """A client may percent-encode a path's characters (`ghp%5F...`, `%67hp_...`), and an
    escape before a key hides its start (`%3Dghp_...`: `D` is a word character): the
    upstream decodes it to the key all the same. The key was stored, logged and quoted in
    a 404 and a 400 as it came, and so was a form body's (`note=token%3Aghp_...`); each now
    scrubs the decoded text's key out of the raw text."""
    tail = GITHUB[4:]
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path)
    for path in (f"/ghp%5F{tail}", f"/%67hp_{tail}", f"/x%3D{GITHUB}", f"/ghp%255F{tail}"):
        assert httpx.get(f"{server.url}/tools/keys{path}", timeout=30).status_code == 200
    # A form body is stored as its text: `token:` before a key is sent as `token%3A`.
    form = httpx.post(f"{server.url}/tools/form", data={"note": f"token:{GITHUB}"}, timeout=30)
    assert form.status_code == 200
    answers = [
        httpx.get(f"{server.url}/nope/ghp%5F{tail}", timeout=30),
        httpx.get(f"{server.url}/tools/%5c{GITHUB}", timeout=30),
    ]
    printed = stop(server)
    assert [a.status_code for a in answers] == [404, 400]
    stored = on_disk(cassettes)
    assert f'"path": "/keys/x%3D{MARKER}"' in stored
    assert leaks(stored) == []
    assert leaks(printed) == []
    assert leaks("\n".join(a.text for a in answers)) == []


def test_a_cassette_name_holding_a_key_is_refused(fake: FakeUpstream, tmp_path: Path) -> None:
    """A cassette is a folder on disk, and its name shows in `/__tapeproxy/stats`, the
    cassette endpoint, the log and the viewer: one named by a key (`x-tapeproxy-cassette:
    ghp_...`) was made, its folder named by the key, and `/stats` listed it. It is refused
    as a name that breaks the naming rules is (400), by header, by PUT and at start-up."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path)
    named = {"x-tapeproxy-cassette": f"team/{GITHUB}"}
    answers = [
        httpx.get(f"{server.url}/tools/x", headers=named, timeout=30),
        httpx.put(f"{server.url}/__tapeproxy/cassette", json={"cassette": GITHUB}, timeout=30),
    ]
    stats = httpx.get(f"{server.url}/__tapeproxy/stats", timeout=30).text
    printed = stop(server)
    assert [a.status_code for a in answers] == [400, 400]
    assert all("well-known key format" in a.json()["error"]["message"] for a in answers)
    assert leaks("\n".join(a.text for a in answers) + stats + printed) == []
    assert leaks(on_disk(cassettes)) == []
    assert not any(GITHUB in str(path) for path in tmp_path.rglob("*"))
    code, out = cli("serve", "--cassette", GITHUB, "--cassettes", str(cassettes))
    assert code != 0 and "well-known key format" in out
    assert leaks(out) == []


def test_two_servers_in_one_process_each_log_no_key_of_their_rules(
    fake: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pytest plugin runs its server in the test process, beside any other: the log
    filter was the latest server's alone, so a server that keeps every format (`--redact-keep
    all`) started second let the first one's keys into the log. Every live server's rules
    scrub the lines now (the stricter wins)."""
    caplog.set_level(logging.INFO, logger="tapeproxy")
    first = background(tmp_path / "a", fake)
    second = background(tmp_path / "b", fake, redact_keep=("all",))
    try:
        assert httpx.get(f"{first.url}/tools/keys/{GITHUB}", timeout=30).status_code == 200
        kept = httpx.get(f"{second.url}/tools/keys/{GITHUB}", timeout=30)
        assert kept.status_code == 200
    finally:
        first.stop()
        second.stop()
    assert "/keys/[redacted]" in on_disk(tmp_path / "a")
    assert GITHUB in on_disk(tmp_path / "b"), "kept, as asked"
    assert "record tools GET /keys/[redacted]" in caplog.text
    assert leaks(caplog.text) == []


def background(cassettes: Path, fake: FakeUpstream, **more: Any) -> BackgroundServer:
    given = {"mode": Mode.RECORD, "port": 0, "cassettes": cassettes}
    settings = Settings.model_validate(given | {"upstream": {"tools": fake.url}} | more)
    return BackgroundServer(settings).start()


def test_a_command_s_error_quotes_no_key_it_was_given(tmp_path: Path) -> None:
    """A setting the CLI refuses is quoted in its error (`--upstream` with a `?key=`), on a
    terminal or a CI log: the key formats are scrubbed from it as from a server's lines."""
    upstream = f"tools=http://127.0.0.1:1/?key={GITHUB}"
    code, out = cli("serve", "--upstream", upstream, "--cassettes", str(tmp_path))
    assert code == 2 and "no ?query in an upstream URL" in out
    assert f"key={MARKER}" in out
    assert leaks(out) == []


def test_verify_flags_a_key_as_a_member_s_name_and_names_where_without_it(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """A JSON member's name is not scrubbed (an answer `{"query": {"ghp_...": "1"}}`, the fake
    upstream's echo of `?ghp_...=1`): verify said the file was fine; and a key under such a
    member was named by a field path that spelled the name out."""
    cassettes = tmp_path / "cassettes"
    server = serve("record", cassettes, fake, tmp_path)
    assert httpx.get(f"{server.url}/tools/q?{GITHUB}=x", timeout=30).status_code == 200
    stop(server)
    [path] = library_files(cassettes)
    assert GITHUB in path.read_text(), "a member's name is kept: see security.md"
    code, out = cli("verify", "--cassettes", str(cassettes))
    assert code == 1
    assert "(github) in response.body.json.query (a member's name): edit the file" in out
    assert leaks(out) == []
    stored = json.loads(path.read_text())
    stored["response"]["body"]["json"]["query"] = {GITHUB: {"k": GITHUB}}
    path.write_text(json.dumps(stored, indent=2, sort_keys=True))
    code, out = cli("verify", "--cassettes", str(cassettes))
    assert code == 1 and leaks(out) == []
