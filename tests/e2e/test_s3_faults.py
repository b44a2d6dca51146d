"""An `s3://` library that is wrong or goes away: a bad endpoint, credentials or bucket stop
every command at start in one line (exit 2); a store lost while recording loses recordings,
counted, the clients answered, exit 4; a replay that loses the store serves what this machine
read before, and misses what it never read with a message saying the store is unreachable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import obstore
import pytest

from tapeproxy.errors import ConfigError
from tapeproxy.store import open_store
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI
from tests.support.cutoff import Cutoff
from tests.support.seaweed import SeaweedFS, free_port
from tests.support.serve import ROOT, TAPEPROXY, Serve

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}


def ask(url: str, text: str, cassette: str | None = None) -> httpx.Response:
    body = {**BODY, "messages": [{"role": "user", "content": text}]}
    headers = {"authorization": f"Bearer {SECRET_OPENAI}"}
    if cassette is not None:
        headers["x-tapeproxy-cassette"] = cassette
    return httpx.post(url + "/openai/v1/chat/completions", json=body, headers=headers, timeout=60)


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    return subprocess.run(
        [*TAPEPROXY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "PYTHONPATH": str(ROOT), **env},
    )


def wrong(seaweed: SeaweedFS, what: str, library: str) -> tuple[dict[str, str], str, str]:
    """(the AWS variables, the library, what the one line says) for a wrong `what`."""
    env = seaweed.env()
    if what == "endpoint":
        return (
            {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"},
            library,
            "unreachable",
        )
    if what == "credentials":
        return {**env, "AWS_SECRET_ACCESS_KEY": "wrong"}, library, "refused the credentials"
    return env, "s3://no-such-bucket/x", "no such bucket"


@pytest.mark.parametrize("what", ["endpoint", "credentials", "bucket"])
@pytest.mark.parametrize(
    "command", [["serve", "--port", "0"], ["serve", "--port", "0", "--mode", "record"], ["ls"]]
)
def test_a_wrong_store_stops_every_command_at_start_in_one_line(
    seaweed: SeaweedFS, s3_library: str, what: str, command: list[str]
) -> None:
    env, library, says = wrong(seaweed, what, s3_library)
    done = run(*command, "--cassettes", library, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and library.split("/")[2] in lines[0], lines
    assert "Traceback" not in done.stderr and "ready on" not in done.stdout


def test_an_s3_library_without_obstore_installed_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tapeproxy.store import open_store

    monkeypatch.setitem(sys.modules, "obstore", None)
    monkeypatch.delitem(sys.modules, "tapeproxy.store.s3", raising=False)
    monkeypatch.delitem(sys.modules, "tapeproxy.store.s3client", raising=False)
    with pytest.raises(ConfigError) as caught:
        open_store("s3://bucket/prefix")
    assert "pip install 'tapeproxy[s3]'" in caught.value.message
    assert "\n" not in caught.value.message


def via(seaweed: SeaweedFS) -> Cutoff:
    endpoint = urlsplit(seaweed.endpoint)
    return Cutoff((endpoint.hostname or "127.0.0.1", endpoint.port or 80))


def test_a_store_lost_while_recording_answers_the_client_and_exits_4(
    seaweed: SeaweedFS, s3_library: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    cutoff = via(seaweed)
    args = ["--mode", "record", "--cassettes", s3_library, "--upstream", f"openai={fake.url}"]
    server = Serve(args, tmp_path, env={"AWS_ENDPOINT_URL": cutoff.url})
    assert ask(server.url, "kept").status_code == 200
    cutoff.cut()
    lost = ask(server.url, "lost")
    assert lost.status_code == 200 and lost.json()["choices"], "the client has its answer"
    stats = httpx.get(server.url + "/__tapeproxy/stats").json()
    assert stats["recorded"] == 1 and stats["errors"] == 1
    code, err = server.stop()
    assert code == 4, err
    assert "could not write to cassette 'default'" in err and "Traceback" not in err
    assert "1 recording(s) could not be written" in err


def test_a_replay_that_loses_the_store_serves_what_it_read_and_says_so_for_the_rest(
    seaweed: SeaweedFS, s3_library: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    cutoff = via(seaweed)  # one endpoint for both servers: one local cache
    endpoint = {"AWS_ENDPOINT_URL": cutoff.url}
    recorder = Serve(
        ["--mode", "record", "--cassettes", s3_library, "--upstream", f"openai={fake.url}"],
        tmp_path,
        env=endpoint,
    )
    answers = {text: ask(recorder.url, text).json() for text in ("first", "second")}
    assert recorder.stop()[0] == 0
    elsewhere = Serve(  # another machine: a cache of its own
        ["--mode", "record", "--cassettes", s3_library, "--upstream", f"openai={fake.url}"],
        tmp_path,
        env={**endpoint, "XDG_CACHE_HOME": str(tmp_path / "elsewhere")},
    )
    assert ask(elsewhere.url, "elsewhere", cassette="other").status_code == 200
    assert elsewhere.stop()[0] == 0
    replay = Serve(
        ["--cassettes", s3_library, "--upstream", "openai=http://127.0.0.1:9"],
        tmp_path,
        env=endpoint,
    )
    assert ask(replay.url, "first").json() == answers["first"]  # `default` listed, and cached
    cutoff.cut()
    control = replay.url + "/__tapeproxy/cassette"
    assert httpx.put(control, json={"cassette": "default"}).status_code == 200  # a new run
    for text, answer in answers.items():  # `second`: never read here, cached as it was put
        assert ask(replay.url, text).json() == answer, "served from the local cache"
    missed = ask(replay.url, "elsewhere", cassette="other")
    assert missed.status_code == 422
    assert missed.json()["error"]["type"] == "cassette_miss"
    assert "unreachable" in missed.json()["error"]["message"]
    code, err = replay.stop()
    assert "replaying from the local cache" in err and "Traceback" not in err
    assert code == 0, err


def test_a_store_that_refuses_conditional_puts_fails_the_write_check(
    s3_library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every new recording is put with If-None-Match: *. A store that answers it 501 (some
    S3-compatible stores) must stop a recording server at start, not lose each recording."""
    store = open_store(s3_library)
    plain_put = obstore.put

    def no_conditional_put(client: object, path: str, data: object, **options: object) -> object:
        if options.get("mode") == "create":
            raise OSError("the store answered 501 (NotImplemented)")
        return plain_put(client, path, data, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(obstore, "put", no_conditional_put)
    problem = store.unwritable("default")
    assert problem is not None and "501" in problem


def test_a_replay_that_loses_the_store_serves_what_this_machine_recorded_anew(
    seaweed: SeaweedFS, s3_library: str, fake: FakeUpstream, tmp_path: Path
) -> None:
    """A record run here puts a new version of an object under the same name: the cached
    listing follows it, so a replay cut from the store asks for the version the cache holds
    (it keeps one a name)."""
    cutoff = via(seaweed)
    endpoint = {"AWS_ENDPOINT_URL": cutoff.url}
    record = ["--mode", "record", "--cassettes", s3_library, "--upstream", f"openai={fake.url}"]
    for word in ("old", "new"):
        fake.script("/v1/chat/completions", Reply(body={"answer": word}))
        recorder = Serve(record, tmp_path, env=endpoint)
        assert ask(recorder.url, "which?").json() == {"answer": word}
        assert recorder.stop()[0] == 0
    replay = Serve(
        ["--cassettes", s3_library, "--upstream", "openai=http://127.0.0.1:9"],
        tmp_path,
        env=endpoint,
    )
    cutoff.cut()  # before the replay's first request lists the cassette
    assert ask(replay.url, "which?").json() == {"answer": "new"}
    code, err = replay.stop()
    assert code == 0 and "replaying from the local cache" in err, err
