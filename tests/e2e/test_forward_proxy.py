"""`tapeproxy run -- CMD`: clients that take no base URL reach the providers' real host names
through the forward proxy, which decrypts them with the run's CA and sends them, through the
same engine as the reverse routes, to the fake the test points the provider at. Each records,
then replays with the fake stopped, to the same output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

CHAT = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
DEAD = "http://127.0.0.1:9"  # nothing listens: a replay that went upstream would fail


def tapeproxy_run(
    cassettes: Path,
    mode: str,
    upstream: str,
    *cmd: str,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`tapeproxy run` in a subprocess, the providers pointed at `upstream`; `env` added to
    its environment."""
    args = [sys.executable, "-m", "tapeproxy", "run", "--mode", mode, "--cassettes", str(cassettes)]
    for name in ("openai", "anthropic"):
        args += ["--upstream", f"{name}={upstream}"]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | (env or {})
    return subprocess.run(
        [*args, *extra, "--", *cmd],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,  # (`claude -p` reads a piped standard input as more prompt)
    )


def record_then_replay(
    tmp_path: Path,
    fake: FakeUpstream,
    *cmd: str,
    extra: tuple[str, ...] = (),
    recordings: int | None = 1,
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """CMD recorded through `run`, then replayed with the fake stopped: the same output, every
    recording served and nothing missed. `recordings`: how many (None: as many as it made)."""
    cassettes = tmp_path / "cassettes"
    recorded = tapeproxy_run(cassettes, "record", fake.url, *cmd, extra=extra)
    assert recorded.returncode == 0, recorded.stderr
    made = int(recorded.stderr.splitlines()[-1].split("recorded ")[1].split(",")[0])
    assert made == recordings if recordings is not None else made > 0, recorded.stderr
    fake.stop()
    replayed = tapeproxy_run(cassettes, "replay", DEAD, *cmd, extra=extra)
    assert replayed.returncode == 0, replayed.stderr
    summary = f"tapeproxy: replayed {made}, recorded 0, misses 0"
    assert replayed.stderr.splitlines()[-1] == summary, replayed.stderr
    assert replayed.stdout == recorded.stdout
    return recorded, replayed


CURL = (
    "curl", "-sS", "--fail-with-body", "https://api.openai.com/v1/chat/completions",
    "-H", "content-type: application/json", "-H", "authorization: Bearer sk-test-forward",
    "-d", CHAT,
)  # fmt: skip


def test_curl_records_and_replays_through_the_real_host_name(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    recorded, _ = record_then_replay(tmp_path, fake, *CURL)
    assert json.loads(recorded.stdout)["object"] == "chat.completion"
    files = list((tmp_path / "cassettes").rglob("*.json"))
    assert files and not any(b"sk-test-forward" in f.read_bytes() for f in files)


PY_OPENAI = """
import openai
client = openai.OpenAI(api_key="sk-test-forward")  # no base_url: api.openai.com
answer = client.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
)
print(answer.choices[0].message.content)
"""


def test_the_openai_sdk_with_no_base_url(tmp_path: Path, fake: FakeUpstream) -> None:
    recorded, _ = record_then_replay(tmp_path, fake, sys.executable, "-c", PY_OPENAI)
    assert recorded.stdout.strip()


PY_REQUESTS = f"""
import requests
answer = requests.post(
    "https://api.openai.com/v1/chat/completions", data={CHAT!r},
    headers={{"content-type": "application/json", "authorization": "Bearer sk-test-forward"}},
)
answer.raise_for_status()
print(answer.text)
"""


def test_requests(tmp_path: Path, fake: FakeUpstream) -> None:
    record_then_replay(tmp_path, fake, sys.executable, "-c", PY_REQUESTS)


PY_AIOHTTP = f"""
import asyncio, aiohttp
async def main():
    async with aiohttp.ClientSession(trust_env=True) as session:
        async with session.post(
            "https://api.openai.com/v1/chat/completions", data={CHAT!r},
            headers={{"content-type": "application/json", "authorization": "Bearer sk-test-f"}},
        ) as answer:
            answer.raise_for_status()
            print(await answer.text())
asyncio.run(main())
"""


def test_aiohttp_with_trust_env(tmp_path: Path, fake: FakeUpstream) -> None:
    record_then_replay(tmp_path, fake, sys.executable, "-c", PY_AIOHTTP)


def test_run_exits_with_the_commands_status(tmp_path: Path) -> None:
    done = tapeproxy_run(tmp_path / "c", "replay", DEAD, sys.executable, "-c", "exit(3)")
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == "tapeproxy: replayed 0, recorded 0, misses 0"


def test_fail_on_miss(tmp_path: Path) -> None:
    done = tapeproxy_run(tmp_path / "c", "replay", DEAD, *CURL, extra=("--fail-on-miss",))
    assert "misses 1" in done.stderr.splitlines()[-1]
    assert done.returncode == 22  # curl's own failure wins
    quiet = (*CURL[:2], *CURL[3:])  # without --fail-with-body: curl succeeds on the 422
    done = tapeproxy_run(tmp_path / "c", "replay", DEAD, *quiet, extra=("--fail-on-miss",))
    assert done.returncode == 1, done.stderr


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"])
def test_the_child_environment(tmp_path: Path, variable: str) -> None:
    show = "import os; e = os.environ; print(e['HTTPS_PROXY'], e['NO_PROXY'], e[{!r}])"
    show = show.format(variable)
    done = tapeproxy_run(tmp_path / "c", "replay", DEAD, sys.executable, "-c", show)
    proxy, no_proxy, bundle = done.stdout.split()
    assert proxy.startswith("http://127.0.0.1:") and "127.0.0.1" in no_proxy.split(",")
    assert not Path(bundle).exists()  # the temporary bundle is gone with the run


def test_fail_on_unused_as_serve(tmp_path: Path, fake: FakeUpstream) -> None:
    cassettes = tmp_path / "cassettes"
    assert tapeproxy_run(cassettes, "record", fake.url, *CURL).returncode == 0
    done = tapeproxy_run(cassettes, "replay", DEAD, "true", extra=("--fail-on-unused",))
    assert done.returncode == 3, done.stderr
    assert "1 recording(s) went unused" in done.stderr
    assert done.stderr.splitlines()[-1] == "tapeproxy: replayed 0, recorded 0, misses 0"


def test_the_users_no_proxy_never_lets_an_intercepted_host_bypass_the_proxy(
    tmp_path: Path,
) -> None:
    show = "import os; print(os.environ['NO_PROXY'], os.environ['no_proxy'])"
    env = {"NO_PROXY": "*,.openai.com,corp.example,api.anthropic.com"}
    done = tapeproxy_run(tmp_path / "c", "replay", DEAD, sys.executable, "-c", show, env=env)
    upper, lower = done.stdout.split()
    assert upper == lower == "corp.example,localhost,127.0.0.1,::1"
    assert "NO_PROXY: dropped *, .openai.com, api.anthropic.com" in done.stderr
