"""`tapeproxy drift` against a rate-limited provider: a live 429 (or 503, 529) the recording did
not have is waited out and sent again (Retry-After honoured, by the fake's own clock; else a
backoff), then compared; one that never ends is said after the attempts; --concurrency
workers hold off together; a 429 costs nothing; an answer whose cost is unknown (an OpenAI
stream without a usage block) is unpriced, never free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.settings import Settings
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import ProxyServer
from tests.support.serve import ROOT, TAPEPROXY
from tests.support.viewer import View

KEY = "sk-test-drift-retry-0123456789"
CHAT = "/v1/chat/completions"
HELLO: Any = [{"role": "user", "content": "hello there"}]
ERROR = {"message": "no such model", "type": "invalid_request_error", "code": "model_not_found"}
NOT_FOUND = Reply(404, {"error": ERROR})


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Six OpenAI chats (with usage), one stream without a usage block, one error answer."""
    library = tmp_path_factory.mktemp("retry") / "cassettes"
    with FakeUpstream() as fake:
        given = {"port": 0, "cassettes": library, "upstream": {"openai": fake.url}}
        with ProxyServer(Settings.model_validate({**given, "mode": "record"})) as proxy:

            def client(cassette: str) -> openai.OpenAI:
                return openai.OpenAI(
                    base_url=proxy.url + "/openai/v1",
                    api_key=KEY,
                    default_headers={"x-tapeproxy-cassette": cassette},
                    max_retries=0,
                )

            for n in range(6):
                said: Any = [{"role": "user", "content": f"hello {n}"}]
                client("six").chat.completions.create(model="gpt-4o-mini", messages=said)
            stream = client("stream").chat.completions.create(
                model="gpt-4o-mini", messages=HELLO, stream=True
            )
            for _ in stream:
                pass
            fake.script(CHAT, NOT_FOUND)
            with pytest.raises(openai.NotFoundError):
                client("errors").chat.completions.create(model="gpt-bad", messages=HELLO)
    yield library


def drift(library: Path, fake: FakeUpstream, *args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(
        app,
        ["drift", *args, "--json", "--cassettes", str(library), f"--upstream=openai={fake.url}"],
        env={"OPENAI_API_KEY": KEY},
    )
    try:
        return result.exit_code, json.loads(result.output)
    except ValueError:
        raise AssertionError(result.output) from None


def limited(
    retry_after: str | None = "1", status: int = 429, headers: dict[str, str] | None = None
) -> Reply:
    """OpenAI's rate-limit answer; its body carries a usage block that, were it counted,
    would cost dollars (a 429 costs nothing)."""
    error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
    usage = {"prompt_tokens": 10_000_000, "completion_tokens": 10_000_000, "total_tokens": 2}
    given = {} if retry_after is None else {"retry-after": retry_after}
    return Reply(status, {"error": error, "usage": usage}, {**given, **(headers or {})})


# OpenAI's own hint, without Retry-After: the requests' limit used up, reset in 3 s.
RESET = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "3s"}


def spent_once(library: Path) -> float:
    """What one chat costs, checked against an upstream that is not rate limited."""
    with FakeUpstream() as fake:
        code, report = drift(library, fake, "six", "--max-requests", "1")
    assert code == 0 and report["checked"] == 1, report
    spent: float = report["spent_usd"]
    return spent


@pytest.mark.parametrize("asked", [limited("3"), limited(None, headers=RESET)])
def test_a_rate_limit_then_an_answer_is_retried_after_the_wait_asked_and_compared(
    asked: Reply, library: Path
) -> None:
    once = spent_once(library)
    with FakeUpstream() as fake:
        fake.script(CHAT, asked)  # 3 s: longer than the first backoff could be (2 s)
        code, report = drift(library, fake, "six", "--max-requests", "1")
    assert code == 0 and report["findings"] == [] and report["failed"] == [], report
    assert report["checked"] == 1
    first, second = fake.hits
    assert second.at - first.at >= 3.0  # not before the wait asked, by the fake's clock
    assert 0 < report["spent_usd"] == once and report["unpriced"] == 0  # the 429: nothing


def test_an_overload_without_a_hint_is_retried_after_a_backoff(library: Path) -> None:
    with FakeUpstream() as fake:
        fake.script(CHAT, limited(None, 529), limited(None, 503))
        code, report = drift(library, fake, "six", "--max-requests", "1")
    assert code == 0 and report["checked"] == 1 and report["failed"] == [], report
    times = [hit.at for hit in fake.hits]
    assert len(times) == 3
    assert times[1] - times[0] >= 1.0 and times[2] - times[1] >= 2.0  # base 2 s, doubled


def test_a_rate_limit_that_never_ends_is_said_after_the_attempts(library: Path) -> None:
    for retries, sent, said in (("2", 3, ", retried 2 times: "), ("0", 1, ": try again")):
        with FakeUpstream() as fake:
            fake.script(CHAT, *(limited("0") for _ in range(5)))
            code, report = drift(library, fake, "six", "--max-requests", "1", "--retries", retries)
        assert code == 2 and report["checked"] == 0 and report["findings"] == [], report
        why = report["failed"][0]["why"]
        assert "answered 429 (rate limited or failing)" + said in why, why
        assert fake.count() == sent
        assert report["spent_usd"] == 0 and report["unpriced"] == 0


def test_a_wait_asked_past_the_cap_is_not_waited(library: Path) -> None:
    with FakeUpstream() as fake:
        fake.script(CHAT, limited("3600"))
        code, report = drift(library, fake, "six", "--max-requests", "1")
    assert code == 2 and fake.count() == 1, report
    assert "not retried: it asked for a wait of 3600 s, over 60 s" in report["failed"][0]["why"]
    with FakeUpstream() as fake:
        fake.script(CHAT, limited("2"))
        code, report = drift(library, fake, "six", "--max-requests", "1", "--max-wait", "1")
    assert code == 2 and fake.count() == 1, report
    assert "would pass --max-wait (1 s)" in report["failed"][0]["why"]


def test_concurrent_workers_hold_off_together(library: Path) -> None:
    """One worker rate limited for 2 s: the other sends nothing meanwhile (else it would
    send the library's other chats in that time)."""
    with FakeUpstream() as fake:
        fake.script(CHAT, limited("2"))
        code, report = drift(library, fake, "six", "--concurrency", "2")
    assert code == 0 and report["checked"] == 6 and report["failed"] == [], report
    first = fake.hits[0].at
    # hits[1]: the request the other worker had under way when the 429 came; every later
    # one waited for the pause (without it, the other worker's five would come at once)
    after = [round(h.at - first, 3) for h in fake.hits[2:]]
    assert len(after) == 5 and min(after) >= 2.0, after


def test_a_stream_without_a_usage_block_is_unpriced_never_free(
    library: Path, tmp_path: Path
) -> None:
    """Its cost is unknown: counted as unpriced, as an answer of a model with no price is
    (an error answer costs nothing: not unpriced), and said in the summary and Markdown."""
    with FakeUpstream() as fake:
        fake.script(CHAT, NOT_FOUND)  # (the errors cassette comes first)
        code, report = drift(library, fake, "stream", "errors")
        assert code == 0 and report["checked"] == 2 and report["findings"] == [], report
        assert report["unpriced"] == 1 and report["spent_usd"] == 0
        page = tmp_path / "drift.md"
        result = CliRunner().invoke(
            app,
            [
                *("drift", "stream", "--cassettes", str(library), f"--upstream=openai={fake.url}"),
                *("--markdown", str(page)),
            ],
            env={"OPENAI_API_KEY": KEY},
        )
    assert result.exit_code == 0, result.output
    said = "$0.0000 spent and 1 unpriced (cost unknown: no usage, or no price)"
    assert said in result.output and said in page.read_text()


@pytest.mark.parametrize(
    "hostile",
    ["99999999999999999999 Jan 0 00:00", "Nov 0 19:00:30 2026 99999999999999999999 Nov"],
)
def test_a_retry_after_no_date_can_hold_is_a_backoff_never_a_crash(
    hostile: str, library: Path
) -> None:
    """A Retry-After that parses as a date of a year past any integer (the email parser
    overflows on it) says nothing: backed off and sent again, as with no hint."""
    with FakeUpstream() as fake:
        fake.script(CHAT, limited(hostile))
        code, report = drift(library, fake, "six", "--max-requests", "1")
    assert code == 0 and report["checked"] == 1 and report["failed"] == [], report
    assert fake.count() == 2


def limits(fake: FakeUpstream) -> list[str]:
    return [f"--upstream=openai={fake.url}", "--max-requests", "1"]


def test_ctrl_c_during_a_wait_stops_at_once_in_one_line(library: Path) -> None:
    """A Ctrl-C while drift waits out a 30 s Retry-After ends it at once: exit 130, one line
    on stderr saying so, no traceback, nothing more sent."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    with FakeUpstream() as fake:
        fake.script(CHAT, limited("30"))
        process = subprocess.Popen(
            [*TAPEPROXY, "drift", "six", "--cassettes", str(library), *limits(fake)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": KEY},
            start_new_session=True,
        )
        while process.poll() is None and fake.count() == 0:
            time.sleep(0.01)  # polled: the 429 comes once drift has read the library
        time.sleep(0.2)  # (into the wait)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=10)  # not the 30 s asked
        assert fake.count() == 1
    assert process.returncode == 130 and out == "", (out, err)
    assert err.strip() and len(err.strip().splitlines()) == 1, err
    assert "interrupted" in err and "Traceback" not in err


def test_the_last_report_says_what_was_not_sent(library: Path, tmp_path: Path) -> None:
    """A run whose exchange stayed rate limited (exit 2) is not shown by `tapeproxy report`
    and the viewer as a clean one: they say how many were not sent."""
    with FakeUpstream() as fake:
        fake.script(CHAT, *(limited("0") for _ in range(3)))
        code, report = drift(library, fake, "six", "--max-requests", "1")
    assert code == 2 and len(report["failed"]) == 1, report
    shown = CliRunner().invoke(app, ["report", "--cassettes", str(library)])
    assert shown.exit_code == 0 and "## Last drift" in shown.output, shown.output
    assert "; 1 not sent." in shown.output, shown.output
    viewer = View(library, tmp_path)
    try:
        page = httpx.get(viewer.url, timeout=30).text
    finally:
        viewer.stop()
    assert 'id="drift"' in page and "; 1 not sent." in page
