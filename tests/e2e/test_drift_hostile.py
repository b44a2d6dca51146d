"""`tapeproxy drift` against a hostile, absent or refusing provider: an endless answer stops
at --max-record (not at the end of a stream that never ends), an upstream that is down is one
line per exchange, a refused key or a rate limit is no drift (and --update writes nothing),
an exchange that keys otherwise today is not re-recorded, --concurrency bounds what is
under way, a quoted key is scrubbed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.settings import Settings
from tests.fakes.drifting import DriftingUpstream
from tests.fakes.raw import LoopbackServer
from tests.fakes.socket_upstream import SocketUpstream
from tests.support import ProxyServer, files_under

KEY = "sk-test-drift-hostile-0123456789"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A library with one OpenAI streamed chat, recorded from the drifting fake."""
    fake = DriftingUpstream()
    fake.start()
    library = tmp_path_factory.mktemp("hostile") / "cassettes"
    given = {"port": 0, "cassettes": library, "upstream": {"openai": fake.url}}
    try:
        with ProxyServer(Settings.model_validate({**given, "mode": "record"})) as proxy:
            client = openai.OpenAI(
                base_url=proxy.url + "/openai/v1",
                api_key=KEY,
                default_headers={"x-tapeproxy-cassette": "stream"},
                max_retries=0,
            )
            hello: Any = [{"role": "user", "content": "hello there"}]
            for _ in client.chat.completions.create(
                model="gpt-4o-mini", messages=hello, stream=True
            ):
                pass
    finally:
        fake.stop()
    yield library


def endless(stop: threading.Event) -> Any:
    """An SSE answer of chat chunks without end (about 2 MB a second), never idle."""
    chunk = {"id": "x", "object": "chat.completion.chunk", "choices": []}
    frame = b"data: %s\n\n" % json.dumps(chunk).encode()
    batch = frame * 2_000

    def answer(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        while not stop.is_set():
            conn.sendall(b"%x\r\n%s\r\n" % (len(batch), batch))
            time.sleep(0.05)

    return answer


def test_an_endless_answer_stops_at_max_record(library: Path) -> None:
    stop = threading.Event()
    with SocketUpstream(endless(stop)) as upstream:
        env = {
            **os.environ,
            "OPENAI_API_KEY": KEY,
            "TAPEPROXY_MAX_RECORD": "1MiB",
            "TAPEPROXY_READ_TIMEOUT": "60",
        }
        command = [sys.executable, "-m", "tapeproxy.cli.main", "drift", "--json"]
        command += ["--cassettes", str(library), f"--upstream=openai={upstream.url}"]
        try:
            ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
        finally:
            stop.set()
    assert ran.returncode == 2, ran.stdout + ran.stderr
    report = json.loads(ran.stdout)
    assert len(report["failed"]) == 1 and "--max-record" in report["failed"][0]["why"]


def test_an_upstream_that_is_down_is_one_line_per_exchange(library: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = CliRunner().invoke(
        app,
        ["drift", "--cassettes", str(library), f"--upstream=openai=http://127.0.0.1:{port}"],
        env={"OPENAI_API_KEY": KEY},
    )
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2 and lines[0].startswith("not sent: stream "), result.output
    assert "unreachable" in lines[0] and "Traceback" not in result.output
    assert KEY not in result.output


def refused(status: int, reason: str) -> Any:
    """OpenAI's answer to a key it does not take, or to too many requests."""
    body = json.dumps({"error": {"message": reason, "type": "invalid_request_error"}}).encode()
    wait = "retry-after: 0\r\n" if status == 429 else ""  # (retried at once, then said)

    def answer(conn: socket.socket) -> None:
        conn.sendall(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{wait}".encode()
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )

    return answer


@pytest.mark.parametrize(
    ("status", "reason", "why"),
    [
        (401, "Unauthorized", "refused the key (401)"),
        (429, "Too Many Requests", "answered 429 (rate limited or failing), retried 2 times"),
    ],
)
def test_update_never_writes_a_refused_key_over_a_recording(
    status: int, reason: str, why: str, library: Path, tmp_path: Path
) -> None:
    """A revoked key or a rate limit in a weekly job is no drift: not every exchange's status
    changed (an error each), and --update must not write 401 answers over the library."""
    copy = tmp_path / "cassettes"
    shutil.copytree(library, copy)
    before = files_under(copy)
    with SocketUpstream(refused(status, reason)) as upstream:
        result = CliRunner().invoke(
            app,
            [
                "drift",
                "--update",
                "--json",
                "--cassettes",
                str(copy),
                f"--upstream=openai={upstream.url}",
            ],
            env={"OPENAI_API_KEY": KEY},
        )
    report = json.loads(result.output)
    assert result.exit_code == 2 and report["findings"] == [], report  # not a status change
    assert report["updated"] == [] and why in report["failed"][0]["why"], report
    assert files_under(copy) == before


def test_update_leaves_an_exchange_that_keys_otherwise_today(library: Path, tmp_path: Path) -> None:
    """A match rule added since the recording keys the request as another: --update would
    write a second recording beside the first, so it writes nothing and says why."""
    copy = tmp_path / "cassettes"
    shutil.copytree(library, copy)
    before = files_under(copy)
    fake = DriftingUpstream()
    fake.start()
    fake.mutation = "stream-field-removed"
    try:
        result = CliRunner().invoke(
            app,
            [
                *("drift", "--update", "--json", "--cassettes", str(copy)),
                *("--ignore=openai:body:model", f"--upstream=openai={fake.url}"),
            ],
            env={"OPENAI_API_KEY": KEY},
        )
    finally:
        fake.stop()
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["updated"] == [], report
    assert "another request" in report["not_updated"][0]["why"]
    assert files_under(copy) == before


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A library with six OpenAI chats, recorded from the drifting fake."""
    fake = DriftingUpstream()
    fake.start()
    library = tmp_path_factory.mktemp("six") / "cassettes"
    given = {"port": 0, "cassettes": library, "upstream": {"openai": fake.url}}
    try:
        with ProxyServer(Settings.model_validate({**given, "mode": "record"})) as proxy:
            client = openai.OpenAI(
                base_url=proxy.url + "/openai/v1",
                api_key=KEY,
                default_headers={"x-tapeproxy-cassette": "six"},
                max_retries=0,
            )
            for n in range(6):
                said: Any = [{"role": "user", "content": f"hello {n}"}]
                client.chat.completions.create(model="gpt-4o-mini", messages=said)
    finally:
        fake.stop()
    yield library


class Gauge:
    """A slow chat upstream that counts the requests it holds at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def answer(self, conn: socket.socket) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(0.3)  # held, so that the requests drift lets go at once overlap
        with self.lock:
            self.now -= 1
        body = json.dumps(
            {"id": "x", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini"}
        ).encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )


@pytest.mark.parametrize("concurrency", [1, 2])
def test_concurrency_bounds_the_requests_under_way(six: Path, concurrency: int) -> None:
    gauge = Gauge()
    with SocketUpstream(gauge.answer) as upstream:
        result = CliRunner().invoke(
            app,
            [
                *("drift", "--json", "--cassettes", str(six), f"--upstream=openai={upstream.url}"),
                *("--concurrency", str(concurrency)),
            ],
            env={"OPENAI_API_KEY": KEY},
        )
    assert json.loads(result.output)["checked"] == 6, result.output
    assert 1 <= gauge.peak <= concurrency


class Echoing(LoopbackServer):
    """A chat upstream that says back the key it was sent, in a text and in an enum-like
    field (a key of no well-known format: only drift knows it is one)."""

    def handle(self, conn: socket.socket) -> None:
        threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and (chunk := conn.recv(65536)):
                head += chunk
            lines = head.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            named = dict(n.lower().partition(": ")[::2] for n in lines[1:])
            key = named["authorization"].removeprefix("bearer ")
            message = {"role": "assistant", "content": f"you are {key}"}
            answer = {"id": "x", "object": key, "created": 1, "model": "gpt-4o-mini"}
            body = json.dumps({**answer, "choices": [{"index": 0, "message": message}]}).encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )


def test_the_key_drift_sends_is_in_no_report_and_no_cassette(six: Path, tmp_path: Path) -> None:
    plain = "plainkey0123456789abcdefxyz"  # (lowercase: the fake reads headers lowercased)
    copy = tmp_path / "cassettes"
    shutil.copytree(six, copy)
    reports = [tmp_path / "drift.md", tmp_path / "drift.xml"]
    with Echoing() as upstream:
        result = CliRunner().invoke(
            app,
            [
                *(
                    "drift",
                    "--update",
                    "--cassettes",
                    str(copy),
                    f"--upstream=openai={upstream.url}",
                ),
                *("--markdown", str(reports[0]), "--junit", str(reports[1])),
            ],
            env={"OPENAI_API_KEY": plain},
        )
    assert result.exit_code == 1 and "updated: six" in result.output, result.output
    assert plain not in result.output
    written = [*reports, *(p for p in copy.rglob("*") if p.is_file())]
    assert (copy / ".tapeproxy" / "drift.json") in written
    assert [p for p in written if plain.encode() in p.read_bytes()] == []


def test_a_report_that_cannot_be_written_is_said_before_anything_is_sent(
    six: Path, tmp_path: Path
) -> None:
    gauge = Gauge()
    for report in ("--markdown", "--junit"):
        with SocketUpstream(gauge.answer) as upstream:
            result = CliRunner().invoke(
                app,
                [
                    *("drift", "--cassettes", str(six), f"--upstream=openai={upstream.url}"),
                    *(report, str(tmp_path / "no-such-folder" / "drift.out")),
                ],
                env={"OPENAI_API_KEY": KEY},
            )
        assert result.exit_code == 2 and "cannot write" in result.output, result.output
        assert len(result.output.splitlines()) == 1 and gauge.peak == 0  # nothing spent


@pytest.mark.parametrize("pasted", [f"{KEY}\n", f" {KEY}", f"{KEY}\u2026"])
def test_a_key_no_header_can_carry_is_one_line_naming_its_variable(six: Path, pasted: str) -> None:
    gauge = Gauge()
    with SocketUpstream(gauge.answer) as upstream:
        result = CliRunner().invoke(
            app,
            ["drift", "--cassettes", str(six), f"--upstream=openai={upstream.url}"],
            env={"OPENAI_API_KEY": pasted},
        )
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert "OPENAI_API_KEY holds a character" in result.output and KEY not in result.output
    assert gauge.peak == 0


def failing_mid_stream(conn: socket.socket) -> None:
    """A chat stream that begins, then fails in-band (an `error` frame), as an overloaded
    provider does: a passing state, not a new shape."""
    chunk = {"id": "x", "object": "chat.completion.chunk", "choices": []}
    error = {"error": {"message": "overloaded", "type": "server_error"}}
    body = b"data: %s\n\ndata: %s\n\n" % (json.dumps(chunk).encode(), json.dumps(error).encode())
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )


def test_a_stream_that_fails_mid_way_is_not_sent_not_drift(library: Path, tmp_path: Path) -> None:
    copy = tmp_path / "cassettes"
    shutil.copytree(library, copy)
    before = files_under(copy)
    with SocketUpstream(failing_mid_stream) as upstream:
        result = CliRunner().invoke(
            app,
            [
                *("drift", "--update", "--json", "--cassettes", str(copy)),
                f"--upstream=openai={upstream.url}",
            ],
            env={"OPENAI_API_KEY": KEY},
        )
    report = json.loads(result.output)
    assert result.exit_code == 2 and report["findings"] == [], report
    assert "stream_error" in report["failed"][0]["why"] and files_under(copy) == before
