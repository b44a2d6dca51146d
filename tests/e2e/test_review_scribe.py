"""Review of the scribe (scribe.py): ways to lose a recording, a stale write-back, a hung or
dead scribe, seen from outside through a real server, a fake upstream and real files."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
import pytest

from tapeproxy.store import journal
from tapeproxy.store.fs import FileStore
from tests.conftest import MakeProxy
from tests.e2e.test_scribe import CHAT, ask, scribe_at_work, scribes, until
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.skipif(
    not journal.SUPPORTED or not Path("/proc/self/stat").exists(),
    reason="the scribe runs where the journal does; its process is found through /proc",
)


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run `call` in a thread; its result (or the exception it raised) lands in the list."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:  # a client cut by a stopping server
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_an_answer_not_kept_gives_back_its_ordinal_without_losing_a_later_one(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    """Two identical requests recorded at once; the first one's stream carries an error
    frame (not kept), the second is whole. The second's recording must survive the run."""
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGSTOP)  # both answers are numbered before the scribe says a word
    try:
        fake.stream_error_after = 1
        failing, _ = in_thread(lambda: ask(proxy, "asked twice at once", stream=True))
        until(lambda: fake.count() and fake.frames_sent, "the first answer streams")
        time.sleep(0.5)  # its error frame came: it is numbered and sent to the scribe
        fake.stream_error_after = None
        whole, answers = in_thread(lambda: ask(proxy, "asked twice at once", stream=True))
        time.sleep(1.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    failing.join(20)
    whole.join(20)
    answer = answers[0]
    assert isinstance(answer, httpx.Response) and answer.status_code == 200
    key = answer.headers["x-tapeproxy-key"]
    assert FileStore(cassettes).entries("default").get(key), "the whole answer was recorded"
    assert ask(proxy, "asked twice at once", stream=True).status_code == 200  # a third time
    proxy.stop()  # the run ends: what it superseded is dropped
    ordinals = FileStore(cassettes).entries("default").get(key)
    assert ordinals is not None and len(ordinals) == 2, f"two whole answers kept: {ordinals}"


def test_a_scribe_hung_at_shutdown_is_stopped_and_the_server_writes_what_it_held(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scribe that never answers (SIGSTOP) while answers wait on it: the stopping server
    gives up on it after CLOSE_WAIT_S, and then writes those answers itself."""
    from tapeproxy import scribe as scribe_module

    monkeypatch.setattr(scribe_module, "CLOSE_WAIT_S", 2.0)
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGSTOP)
    try:
        prompts = [f"held by a hung scribe {n}" for n in range(3)]
        asking = [in_thread(partial(ask, proxy, text))[0] for text in prompts]
        time.sleep(1.0)  # each is numbered and sent to the scribe, which says nothing
        started = time.monotonic()
        proxy.stop()
        took = time.monotonic() - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for thread in asking:
        thread.join(20)
    assert took < 25, f"the server took {took:.0f} s to stop"
    assert pid not in scribes(), "the hung scribe was stopped"
    store = FileStore(cassettes)
    asked = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert set(prompts) <= asked, "every answer the hung scribe held was written by the server"


def test_a_run_that_ends_does_not_wait_forever_on_a_hung_scribe(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a superseded recording asks the scribe to forget it first: a scribe that
    stopped answering (SIGSTOP) is stopped after ANSWER_WAIT_S, and the run ends."""
    from tapeproxy import scribe as scribe_module

    monkeypatch.setattr(scribe_module, "ANSWER_WAIT_S", 2.0)
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    for _ in range(2):
        first = ask(proxy, "asked twice, then once")
    key = first.headers["x-tapeproxy-key"]
    assert proxy.put_cassette(cassette="default", mode="record").status_code == 200
    assert ask(proxy, "asked twice, then once").status_code == 200  # ordinal 2: superseded
    os.kill(pid, signal.SIGSTOP)
    try:
        ended, answers = in_thread(lambda: proxy.put_cassette(cassette="other", mode="record"))
        ended.join(15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert answers and isinstance(answers[0], httpx.Response), "the run's end did not hang"
    assert answers[0].status_code == 200
    until(lambda: pid not in scribes(), "the hung scribe is stopped")
    assert FileStore(cassettes).entries("default")[key] == [1], "the superseded one is gone"
    assert ask(proxy, "asked once the scribe was stopped").status_code == 200


def test_a_hung_scribe_does_not_hold_its_clients_forever(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers sent to a scribe that stopped answering (SIGSTOP): it is stopped after
    ANSWER_WAIT_S, and the server writes them itself."""
    from tapeproxy import scribe as scribe_module

    monkeypatch.setattr(scribe_module, "ANSWER_WAIT_S", 2.0)
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGSTOP)
    try:
        prompts = [f"asked of a hung scribe {n}" for n in range(3)]
        asking = [in_thread(partial(ask, proxy, text)) for text in prompts]
        for thread, _ in asking:
            thread.join(15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for _, answers in asking:
        assert answers and isinstance(answers[0], httpx.Response), "answered in time"
        assert answers[0].status_code == 200
        key = answers[0].headers["x-tapeproxy-key"]
        assert FileStore(cassettes).entries("default")[key] == [1], "and recorded"


def post(url: str, text: str, stream: bool = False) -> httpx.Response:
    """`ask` of a server found by its URL (one run by the CLI)."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    return httpx.post(url + CHAT, json={**body, "stream": stream}, timeout=20)


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry.name))
    return found


def state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie), None when it is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def record_in_own_group(
    folder: Path, fake: FakeUpstream, session: bool = False
) -> subprocess.Popen[str]:
    """The real CLI recording in `folder`, in a process group of its own, as a shell's job
    (with `session`, in a session of its own: found again through /proc)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    command = [sys.executable, "-m", "tapeproxy", "serve", "--port", "0", "--mode", "record"]
    return subprocess.Popen(
        [*command, "--upstream", f"openai={fake.url}"],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **({"start_new_session": True} if session else {"process_group": 0}),
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_process_group_loses_no_recording_in_flight(
    tmp_path: Path, fake: FakeUpstream, sig: int
) -> None:
    """^C in a terminal (or systemd's SIGTERM to the unit) reaches the server and its scribe
    at once, while streamed answers are still coming: each one the client had whole is
    recorded, the server exits 0, and neither a scribe nor a journal is left."""
    fake.frame_delay = 0.05
    process = record_in_own_group(tmp_path, fake)
    try:
        assert process.stdout is not None
        proxy_url = process.stdout.readline().split("ready on ")[-1].strip()

        until(
            lambda: (
                post(proxy_url, f"warm up {time.monotonic()}").status_code == 200
                and any(state(c) not in (None, "Z") for c in children(process.pid))
            ),
            "the scribe starts",
        )
        [scribe] = children(process.pid)
        prompts = [f"in flight at the signal {n}" for n in range(6)]
        asking = [in_thread(partial(post, proxy_url, text, stream=True)) for text in prompts]
        time.sleep(0.3)  # each answer is under way
        os.killpg(process.pid, sig)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    for thread, _ in asking:
        thread.join(20)
    whole = [
        text
        for text, (_, out) in zip(prompts, asking, strict=True)
        if out and isinstance(out[0], httpx.Response) and out[0].status_code == 200
    ]
    library = tmp_path / "cassettes"
    store = FileStore(library)
    recorded = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert whole and set(whole) <= recorded, err
    assert "scribe stopped" not in err, "the signal does not kill the scribe: the server closes it"
    assert state(scribe) is None, "no scribe left behind"
    assert not (library / journal.JOURNAL_DIR).exists(), "no journal left behind"


def test_a_scribe_that_died_is_waited_for_at_once(make_proxy: MakeProxy, cassettes: Path) -> None:
    """Not left a zombie until the server stops (as pid 1 in a container, nothing else
    would ever wait for it)."""
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGKILL)
    assert ask(proxy, "asked once the scribe died").status_code == 200
    until(lambda: state(pid) is None, "the dead scribe is waited for", limit=5)


def recorded_as(library: Path) -> dict[str, dict[str, object]]:
    """Each recording by its key, without what differs from one run to the next (arrival
    times and chunks, its place in the run)."""
    found: dict[str, dict[str, object]] = {}
    store = FileStore(library)
    for key, ordinals in store.entries("default").items():
        exchange = store.read("default", key, ordinals[-1]).model_dump(mode="json")
        exchange.pop("seq")
        response = exchange["response"]
        response.pop("end_ms", None)
        if response.get("frames"):  # cut where the chunks came (a JSON array's pieces)
            response["frames"] = "".join(f["text"] or f["base64"] for f in response["frames"])
        found[key] = exchange
    return found


def test_the_scribe_writes_every_provider_s_answers_as_the_server_does_redacted_alike(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path, cassettes: Path
) -> None:
    from tapeproxy.providers import BUILTIN
    from tests.e2e.test_conformance import STREAMS, send, wire_of

    calls = [(name, wire_of(name).streams[label]) for name, label in STREAMS]
    calls += [(name, wire_of(name).answer) for name in BUILTIN]
    redact = {"redact_pattern": ["there"], "redact_field": ["model"]}
    alone = make_proxy(mode="record", scribe=False, cassettes=tmp_path / "alone", **redact)
    for name, call in calls:
        assert send(alone.url, name, call)[0] == 200
    alone.stop()

    proxy = make_proxy(mode="record", **redact)
    scribe_at_work(proxy, cassettes)
    for name, call in calls:
        assert send(proxy.url, name, call)[0] == 200
    proxy.stop()
    by_scribe = recorded_as(cassettes)
    by_server = recorded_as(tmp_path / "alone")
    assert len(by_server) == len(calls)
    for where, exchange in by_server.items():
        assert by_scribe.get(where) == exchange, where
    assert b"there" not in b"".join(p.read_bytes() for p in cassettes.rglob("*.json"))


def test_answers_either_side_of_the_spool_threshold_are_recorded_whole(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    """Just under SPOOL_AFTER an answer goes to the scribe in one message; just over, the
    server writes it (the scribe forgetting its path first). Both replay byte for byte."""
    from tapeproxy.spool import SPOOL_AFTER
    from tests.e2e.test_large_answers import chat_stream
    from tests.fakes.upstream import Reply

    def sized(target: int) -> str:
        frames = target // len(chat_stream(1000).encode()) * 1000
        while len(chat_stream(frames).encode()) < target:
            frames += 1
        return chat_stream(frames)

    bodies = [sized(SPOOL_AFTER - 200), sized(SPOOL_AFTER + 200)]
    assert len(bodies[0].encode()) < SPOOL_AFTER < len(bodies[1].encode())
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    lives = []
    for n, body in enumerate(bodies):
        headers = {"content-type": "text/event-stream"}
        fake.script("/v1/chat/completions", Reply(body=body, headers=headers, chunked=True))
        lives.append(ask(proxy, f"large {n}", stream=True).content)
    assert lives == [body.encode() for body in bodies]
    proxy.stop()
    assert pid not in scribes()
    replay = make_proxy(mode="replay")
    assert [ask(replay, f"large {n}", stream=True).content for n in range(2)] == lives


@pytest.mark.parametrize("python", ["/bin/false", "/nonexistent/python"])
def test_a_scribe_that_cannot_start_leaves_the_server_writing_with_its_own_journal(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch, python: str
) -> None:
    """A frozen build, or an interpreter that cannot import tapeproxy: the server records."""
    monkeypatch.setattr(sys, "executable", python)
    proxy = make_proxy(mode="record")
    for n in range(6):
        assert ask(proxy, f"no scribe {n}", stream=bool(n % 2)).status_code == 200
        time.sleep(0.1)
    until(lambda: (cassettes / journal.JOURNAL_DIR).is_dir(), "the server keeps its journal")
    assert ask(proxy, "no scribe, later").status_code == 200
    proxy.stop()
    assert len(FileStore(cassettes).entries("default")) == 7
    assert not (cassettes / journal.JOURNAL_DIR).exists()


def test_a_server_that_only_replays_starts_no_scribe(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", scribe=False)
    assert ask(recorder, "recorded once").status_code == 200
    recorder.stop()
    replay = make_proxy(mode="replay")
    assert ask(replay, "recorded once").status_code == 200
    assert ask(replay, "never recorded").status_code != 200  # a miss: refused, not recorded
    time.sleep(0.3)
    assert scribes() == []
    replay.stop()
    assert not list((cassettes / journal.JOURNAL_DIR).glob("*journal-*")), "no journal made"


def test_the_scribe_s_log_lines_read_as_the_server_s(tmp_path: Path, fake: FakeUpstream) -> None:
    """The scribe writes to the server's stderr: its lines come in tapeproxy's format. Made
    to speak by a journal that cannot be made (its folder's name taken by a file), which
    the server and then its scribe each say once; every recording is still written."""
    library = tmp_path / "cassettes"
    library.mkdir()
    (library / journal.JOURNAL_DIR).write_text("not a folder")
    process = record_in_own_group(tmp_path, fake)
    lines: list[str] = []

    def said() -> list[str]:
        return [line for line in list(lines) if "journal could not be made" in line]

    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().split("ready on ")[-1].strip()
        reading = threading.Thread(target=lambda: lines.extend(process.stderr or []))
        reading.start()
        asked = []

        def both_said() -> bool:  # the scribe says it at its first write, once it is ready
            asked.append(f"asked {time.monotonic()}")
            assert post(url, asked[-1]).status_code == 200
            return len(said()) >= 2

        until(both_said, "the scribe writes")
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        reading.join(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, "".join(lines)
    assert len(said()) == 2, "".join(lines)  # the server's journal, then the scribe's
    for line in said():
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING tapeproxy: ", line), line
    assert len(FileStore(library).entries("default")) == len(asked), "every answer recorded"
