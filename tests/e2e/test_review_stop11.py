"""Review of stop 11: the scribe's lifecycle (Scribing), its byte cap, its watchdog, its wire
format, and a recorded answer that is all in held back whole until it is written. Seen from
outside through a real server, a fake upstream (or a raw socket one) and real files."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from functools import partial
from pathlib import Path

import httpx
import pytest

from tapeproxy import scribe as scribe_module
from tapeproxy.store import journal
from tapeproxy.store.fs import FileStore
from tests.conftest import MakeProxy
from tests.e2e.test_review_scribe import in_thread, state
from tests.e2e.test_scribe import ask, scribe_at_work, scribes, until
from tests.fakes.raw import RawUpstream
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.skipif(
    not journal.SUPPORTED or not Path("/proc/self/stat").exists(),
    reason="the scribe runs where the journal does; its process is found through /proc",
)

MIB = 2**20


def call(url: str, method: str, path: str) -> tuple[int, bytes]:
    """One request (the answer's body decoded from its transfer coding only: no
    Content-Encoding is undone)."""
    with httpx.Client(timeout=20) as client:
        request = client.build_request(method, url + path, content=b'{"q": 1}')
        response = client.send(request, stream=True)
        try:
            return response.status_code, b"".join(response.iter_raw())
        finally:
            response.close()


def answer(status: str, headers: list[str], body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\n{''.join(h + chr(13) + chr(10) for h in headers)}\r\n".encode()
        + (body)
    )


# status line, headers, body, method; what the client must get: the body as sent (but HEAD)
ANSWERS = {
    "json-200": ("200 OK", ["content-type: application/json"], b'{"ok": true}', "POST"),
    "empty-200": ("200 OK", ["content-type: application/json"], b"", "POST"),
    "no-content-204": ("204 No Content", [], b"", "DELETE"),
    "head": ("200 OK", ["content-type: application/json", "content-length: 42"], b"", "HEAD"),
    "not-found-404": ("404 Not Found", ["content-type: application/json"], b'{"e": 1}', "POST"),
    "rate-429": ("429 Too Many", ["content-type: application/json"], b'{"e": "slow"}', "POST"),
    "server-500": ("500 Oops", ["content-type: text/plain"], b"boom", "POST"),
    "not-utf8": ("200 OK", ["content-type: text/plain"], bytes(range(256)) * 4, "POST"),
    "one-mib": ("200 OK", ["content-type: application/octet-stream"], b"\xff" * MIB, "POST"),
    "one-mib-json": (
        "200 OK",
        ["content-type: application/json"],
        b'{"x": "' + b"a" * (MIB - 10) + b'"}',
        "POST",
    ),
}


@pytest.mark.parametrize("failures", [False, True], ids=["plain", "record-failures"])
def test_an_answer_held_until_written_reaches_the_client_byte_for_byte_and_replays_so(
    make_proxy: MakeProxy, cassettes: Path, failures: bool
) -> None:
    """Every kind of answer that is all in at once (so its head waits for the write), with
    the scribe at work: the client gets the status and body the upstream sent, and the
    replay gives the same."""
    with RawUpstream() as raw:
        proxy = make_proxy(mode="record", upstream={"tools": raw.url}, record_failures=failures)
        scribe_at_work(proxy, cassettes)
        lives = {}
        for name, (status, headers, body, method) in ANSWERS.items():
            length = [] if method == "HEAD" else [f"content-length: {len(body)}"]
            raw.answer(answer(status, [*headers, *length], body))
            code, got = call(proxy.url, method, f"/tools/{name}")
            assert code == int(status.split()[0]), name
            assert got == (b"" if method == "HEAD" else body), name
            lives[name] = (code, got)
        proxy.stop()
    replay = make_proxy(mode="replay", record_failures=failures, upstream={"tools": "http://x"})
    for name, (_, _, _, method) in ANSWERS.items():
        failure = name.startswith(("rate", "server"))
        code, got = call(replay.url, method, f"/tools/{name}")
        if failure and not failures:
            assert b"cassette_miss" in got, name
            continue
        assert (code, got) == lives[name], name


def test_a_held_answer_whose_write_fails_still_reaches_the_client_whole(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    proxy = make_proxy(mode="record")
    scribe_at_work(proxy, cassettes)
    (cassettes / "nowhere").symlink_to(tmp_path / "gone" / "nowhere")
    body = {"model": "m", "input": "x"}
    headers = {"x-tapeproxy-cassette": "nowhere"}
    live = httpx.post(proxy.url + "/openai/v1/embeddings", json=body, headers=headers, timeout=30)
    direct = httpx.post(fake.url + "/v1/embeddings", json=body, timeout=30)
    assert live.status_code == 200
    assert live.content == direct.content
    stats = proxy.stats
    assert (stats["recorded"] >= 1, stats["write_failures"]) == (True, 1)


def test_a_client_that_hangs_up_while_its_head_is_held_loses_no_recording(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    before = proxy.stats["recorded"]
    os.kill(pid, signal.SIGSTOP)  # the write waits: so does the head
    try:
        host, port = proxy.url.removeprefix("http://").split(":")
        data = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "gone"}]}'
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                b"POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(data), data)
            )
            conn.settimeout(1.0)
            with pytest.raises(TimeoutError):
                conn.recv(1)  # nothing yet: the head is held until the write
        time.sleep(0.5)  # the hang-up is seen
    finally:
        os.kill(pid, signal.SIGCONT)
    until(lambda: proxy.stats["recorded"] == before + 1, "the recording is written")
    assert ask(proxy, "after the hang-up").status_code == 200
    assert proxy.stats["errors"] == 0
    assert pid in scribes()


def test_a_quick_scribe_is_never_taken_for_a_stuck_one(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recordings one after another for longer than ANSWER_WAIT_S, each answered at once:
    the one timer sees the oldest in flight, never one answered long ago."""
    monkeypatch.setattr(scribe_module, "ANSWER_WAIT_S", 0.5)
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    deadline = time.monotonic() + 2.0
    n = 0
    while time.monotonic() < deadline:
        assert ask(proxy, f"steady {n}", stream=bool(n % 2)).status_code == 200
        n += 1
    assert state(pid) not in (None, "Z"), "a scribe that answered everything was stopped"


def test_only_the_oldest_stuck_recording_counts_and_the_rest_are_written(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recordings sent to a stopped scribe at different times: it is stopped ANSWER_WAIT_S
    after the oldest (not after the newest, nor never), and every one is written."""
    monkeypatch.setattr(scribe_module, "ANSWER_WAIT_S", 2.0)
    proxy = make_proxy(mode="record")
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        asking = []
        for n in range(4):
            asking.append(in_thread(partial(ask, proxy, f"staggered {n}")))
            time.sleep(0.5)
        until(lambda: state(pid) in (None, "Z"), "the stuck scribe is stopped", limit=10)
        took = time.monotonic() - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert took < 3.5, f"stopped {took:.1f} s after the oldest was sent"
    for thread, out in asking:
        thread.join(15)
        assert out and isinstance(out[0], httpx.Response) and out[0].status_code == 200
    store = FileStore(cassettes)
    asked = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert {f"staggered {n}" for n in range(4)} <= asked


def test_a_held_answer_cut_by_shutdown_is_a_dropped_connection_not_a_500(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown that cuts an answer whose head is still held (its write is slow): the
    client sees the connection drop, as for any answer a shutdown cuts, never a 500 that an
    SDK would retry as a server error; and the answer is still recorded."""
    monkeypatch.setattr(scribe_module, "CLOSE_WAIT_S", 3.0)
    proxy = make_proxy(mode="record", shutdown_timeout=1)
    pid = scribe_at_work(proxy, cassettes)
    os.kill(pid, signal.SIGSTOP)
    try:
        thread, out = in_thread(lambda: ask(proxy, "held at shutdown"))
        time.sleep(0.5)
        proxy.stop()
        thread.join(20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert out, "the client got no answer at all"
    got = out[0]
    assert not isinstance(got, httpx.Response), f"status {got.status_code}: {got.text[:80]}"
    store = FileStore(cassettes)
    asked = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert "held at shutdown" in asked


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_amid_held_answers_loses_none_and_makes_up_no_500(
    tmp_path: Path, fake: FakeUpstream, sig: int
) -> None:
    """The real CLI, recording answers that are all in at once (their heads held until each
    is written) from many clients without a pause, when ^C or SIGTERM reaches its process
    group: exit 0, each answer a client had is recorded, no client got a 500."""
    from tests.e2e.test_review_scribe import children, post, record_in_own_group

    process = record_in_own_group(tmp_path, fake)
    got: dict[str, int] = {}
    failed: list[BaseException] = []
    stop = False

    def client(n: int) -> None:
        count = 0
        while not stop:
            text = f"client {n} asks {count}"
            count += 1
            try:
                got[text] = post(url, text).status_code
            except httpx.HTTPError as exc:
                failed.append(exc)
                return

    try:
        assert process.stdout is not None
        url = process.stdout.readline().split("ready on ")[-1].strip()
        until(
            lambda: (
                post(url, f"warm up {time.monotonic()}").status_code == 200
                and any(state(c) not in (None, "Z") for c in children(process.pid))
            ),
            "the scribe starts",
        )
        asking = [in_thread(partial(client, n)) for n in range(12)]
        time.sleep(1.0)
        os.killpg(process.pid, sig)
        _, err = process.communicate(timeout=60)
        stop = True
        for thread, _ in asking:
            thread.join(20)
    finally:
        stop = True
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert set(got.values()) == {200}, err
    store = FileStore(tmp_path / "cassettes")
    recorded = {
        store.read("default", key, ordinal).request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        for key, ordinals in store.entries("default").items()
        for ordinal in ordinals
    }
    assert len(got) > 12
    assert set(got) <= recorded, sorted(set(got) - recorded)[:5]
    assert not (tmp_path / "cassettes" / journal.JOURNAL_DIR).exists()


def test_a_recording_sent_to_a_scribe_whose_socket_just_closed_is_written_by_the_server(
    cassettes: Path,
) -> None:
    """Under uvloop (uvicorn's loop), writing to a transport that closed raises at once: a
    scribe that died a moment ago, before its reader saw it, must read as gone (the server
    writes the answer), not fail the commit (a 500 for an answer the upstream gave whole)."""
    import asyncio

    import uvloop

    from tests.unit.test_review_stop11 import SAMPLES, capture_of

    cassettes.mkdir(parents=True, exist_ok=True)
    init: tuple[object, ...] = (str(cassettes), {}, [], [], False, "WARNING")

    async def main() -> None:
        scribe = scribe_module.Scribe(init, lambda: None)
        await scribe.start()
        assert await scribe.started()
        provider, path, body, content_type, data = SAMPLES[0]
        capture = capture_of(provider, path, body, content_type)
        capture.add(data)
        assert scribe._writer is not None
        scribe._writer.transport.close()  # as when its socket closed, before `_read` ran
        await asyncio.sleep(0)  # the transport is closed; `_read` has not run yet
        assert not scribe.gone
        with pytest.raises(scribe_module.ScribeGone):
            await scribe.keep(capture, "default", False, 1, True)
        await scribe.close()
        assert not scribe._waiting

    uvloop.run(main())


def test_past_the_cap_with_answers_of_mixed_sizes_a_scribe_killed_mid_forget_loses_none(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers small and large (under the spool threshold) past a small cap: the scribe holds
    some, the server's threads write the rest, each after a forget the stopped scribe does
    not answer; it is then killed. Every answer reaches its client whole and is written."""
    from tests.fakes.upstream import Reply

    monkeypatch.setattr(scribe_module, "HELD_BYTES", 300_000)
    proxy = make_proxy(mode="record", upstream={"tools": fake.url})
    pid = scribe_at_work(proxy, cassettes)
    sizes = [10, 400_000, 50, 200_000, 900_000, 5, 250_000, 100]
    for n, size in enumerate(sizes):
        fake.script(f"/sized/{n}", Reply(body={"n": n, "pad": "x" * size}))
    os.kill(pid, signal.SIGSTOP)
    try:
        asking = [
            in_thread(partial(httpx.post, proxy.url + f"/tools/sized/{n}", json={}, timeout=30))
            for n in range(len(sizes))
        ]
        time.sleep(1.5)  # some held by the scribe, the rest in the server's threads, in forget
        os.kill(pid, signal.SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    for n, (thread, out) in enumerate(asking):
        thread.join(20)
        assert out and isinstance(out[0], httpx.Response), n
        assert out[0].status_code == 200 and out[0].json() == {"n": n, "pad": "x" * sizes[n]}
    proxy.stop()
    replay = make_proxy(mode="replay", upstream={"tools": fake.url})
    for n, size in enumerate(sizes):
        again = httpx.post(replay.url + f"/tools/sized/{n}", json={}, timeout=30)
        assert again.status_code == 200 and again.json() == {"n": n, "pad": "x" * size}, n
