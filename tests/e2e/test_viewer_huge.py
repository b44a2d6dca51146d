"""A huge exchange in the viewer, as a user runs `tapeproxy view`: its page stays small (its
texts cut, with their size and a link to the whole; its frames 500 a page), the whole of
each text is a plain download equal to it (scrubbed), and a bad `part` or `start` is a
one-line 400, never a 500."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx

from tapeproxy.cli.library import library_scrubber
from tapeproxy.exchange.model import (
    Exchange,
    Frame,
    Session,
    SessionEnd,
    SocketFrame,
    StoredRequest,
    StoredResponse,
)
from tapeproxy.store.files import FileStore
from tapeproxy.viewer.parts import CUT, MARGIN
from tests.support.viewer import View

KEY = "sk-proj-HugeExchange0123456789abcdefghijklmnopqrstuv"
STREAM, SOCKET = "d" * 64 + ".json", "e" * 64 + ".json"
LIMIT = 400_000  # bytes: a page of a huge exchange stays under it


def huge_stream() -> Exchange:
    """A 400,000-character message with a key across the page's cut, and a stream of 3,000
    small frames and one of 50,000 characters."""
    message = "x" * (CUT - 11) + " " + KEY + " and more " * 39_000
    body = {
        "json": {
            "model": "gpt-4o-mini",
            "stream": True,
            "messages": [{"role": "user", "content": message}],
        }
    }
    piece = {"choices": [{"index": 0, "delta": {"content": "word "}}]}
    frames = [Frame(ms=n, text=f"data: {json.dumps(piece)}\n\n") for n in range(3_000)]
    frames.insert(7, Frame(ms=7, text="data: " + json.dumps({"note": "y" * 50_000}) + "\n\n"))
    request = StoredRequest(method="POST", upstream="openai", path="/v1/chat/completions")
    return Exchange(
        key="d" * 64,
        ordinal=1,
        seq=0,
        rules="r",
        request=request.model_copy(update={"body": body}),
        response=StoredResponse(status=200, dialect="sse", frames=frames),
    )


def huge_session() -> Exchange:
    heard = {"type": "response.audio_transcript.delta", "delta": "word "}
    frames = [SocketFrame(direction="server", type="text", ms=n, json=heard) for n in range(1_200)]
    frames[3] = SocketFrame(direction="server", type="text", ms=3, json={"audio": "z" * 10_000})
    return Exchange(
        key="e" * 64,
        ordinal=1,
        seq=1,
        rules="r",
        request=StoredRequest(method="GET", upstream="openai", path="/v1/realtime"),
        response=StoredResponse(status=101),
        kind="websocket",
        session=Session(frames=frames, end=SessionEnd(ms=1_200, by="client", code=1000)),
    )


def started(tmp_path: Path) -> tuple[View, Exchange]:
    store = FileStore(tmp_path / "cassettes")
    stream = huge_stream()
    store.write("huge", stream, fresh=True)
    store.write("huge", huge_session(), fresh=True)
    return View(tmp_path / "cassettes", tmp_path), stream


def test_a_huge_exchange_is_shown_in_parts_and_each_whole_text_downloads(tmp_path: Path) -> None:
    view, stream = started(tmp_path)
    scrub = library_scrubber(None).text
    page_url = f"{view.url}exchange?cassette=huge&file={STREAM}"
    try:
        page = httpx.get(page_url, timeout=60)
        assert page.status_code == 200 and len(page.content) < LIMIT, len(page.content)
        html = page.text
        assert KEY not in html and KEY[:10] not in html, "the key across the cut is masked"
        assert "3001 frames" in html and "frames 1 to 500 of 3001" in html
        assert f'rel="next" href="exchange?cassette=huge&amp;file={STREAM}&amp;start=500' in html
        assert "Shown: the first 20,000 of 410,042 characters." in html
        assert html.count("<li>") == 500
        links = re.findall(r'href="(text\?[^"]+)"', html)
        assert {link.rsplit("part=", 1)[1] for link in links} >= {"message.0.0", "frame.7"}
        message = stream.request.body["json"]["messages"][0]["content"]  # type: ignore[index]
        whole = httpx.get(f"{view.url}text?cassette=huge&file={STREAM}&part=message.0.0")
        assert whole.status_code == 200 and whole.headers["content-type"].startswith("text/plain")
        assert "attachment" in whole.headers["content-disposition"]
        assert whole.content == scrub(message).encode() and KEY not in whole.text
        frame = httpx.get(f"{view.url}text?cassette=huge&file={STREAM}&part=frame.7").text
        assert frame == stream.response.frames[7].text  # type: ignore[index]
        body = httpx.get(f"{view.url}text?cassette=huge&file={STREAM}&part=request").content
        stored = FileStore(tmp_path / "cassettes").read("huge", "d" * 64, 1)  # as read back
        asked = json.dumps(stored.request.body["json"], indent=2, ensure_ascii=False)  # type: ignore[index]
        assert body == scrub(asked).encode() and KEY not in body.decode()
        last = httpx.get(page_url + "&start=3000", timeout=60).text
        assert "frames 3001 to 3001 of 3001" in last and 'rel="next"' not in last
        assert f'rel="prev" href="exchange?cassette=huge&amp;file={STREAM}&amp;start=2500' in last
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_a_websocket_session_pages_its_frames(tmp_path: Path) -> None:
    view, _ = started(tmp_path)
    try:
        first = httpx.get(f"{view.url}exchange?cassette=huge&file={SOCKET}", timeout=60).text
        assert "WebSocket session: 1200 frames" in first and "frames 1 to 500 of 1200" in first
        assert first.count("<li>") == 500 and "z" * 401 not in first
        assert "Shown: the first 400 of 10,021 characters." in first
        frame = httpx.get(f"{view.url}text?cassette=huge&file={SOCKET}&part=frame.3").text
        assert frame == 'server: {"audio": "' + "z" * 10_000 + '"}'
        last = httpx.get(f"{view.url}exchange?cassette=huge&file={SOCKET}&start=1000").text
        assert "frames 1001 to 1200 of 1200" in last and last.count("<li>") == 200
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_a_bad_part_or_start_is_a_one_line_400(tmp_path: Path) -> None:
    view, _ = started(tmp_path)
    page = f"{view.url}exchange?cassette=huge&file={STREAM}&start="
    text = f"{view.url}text?cassette=huge&file={STREAM}&part="
    try:
        for start in ("x", "-1", "\u00b2", "3001", "9" * 4_300):
            answer = httpx.get(page + start, timeout=60)
            assert answer.status_code == 400, (start[:10], answer.status_code)
            said = re.search(r'<p class="error">(.*?)</p>', answer.text)
            assert said is not None and "start" in said[1] and "\n" not in said[1]
        for part in ("", "nope", "message.0", "frame.x", "frame." + "9" * 4_300, "answer.-1.0"):
            answer = httpx.get(text + part, timeout=60)
            assert answer.status_code == 400, (part[:10], answer.status_code)
            assert "part must be request, response, message.I.J" in answer.text
        for part in ("frame.999999", "message.5.0", "response"):  # well formed, not there
            answer = httpx.get(text + part, timeout=60)
            assert answer.status_code == 404 and "has no part" in answer.text, part
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_keys_masked_before_the_cut_never_bring_half_a_key_into_view(tmp_path: Path) -> None:
    # 200 keys masked shorten the text's head by 8,000 characters: what lay past the scrubbed
    # margin (a second key, cut in half there) would be shown, and half a key matches no format
    other = "sk-proj-SecondSecretKey0123456789abcdefghijklmnopqr"
    head = (KEY + " ") * 200
    end = CUT + MARGIN
    message = head + "x" * (end - len(head) - 20) + " " + other + " tail" * 10_000
    before = len('{\n  "note": "')  # the pretty answer's characters before its note
    answer = {"note": head + "y" * (end - len(head) - 20 - before) + " " + other + " z" * 9_000}
    exchange = huge_stream().model_copy(update={"key": "f" * 64, "ordinal": 1, "seq": 2})
    exchange.request.body["json"]["messages"][0]["content"] = message  # type: ignore[index]
    response = StoredResponse(status=200, body={"json": answer})
    FileStore(tmp_path / "cassettes").write(
        "keys", exchange.model_copy(update={"response": response}), fresh=True
    )
    view = View(tmp_path / "cassettes", tmp_path)
    try:
        url = f"{view.url}exchange?cassette=keys&file={'f' * 64}.json"
        html = httpx.get(url, timeout=60).text
        assert html.count("Shown: the first 20,000 of") == 3, "the message, its body, the answer"
        assert other[:12] not in html and KEY[:12] not in html
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_clicks_queued_on_a_huge_exchange_hold_no_other_page(tmp_path: Path) -> None:
    """48 pages of a slow exchange asked at once: two are built, the others wait for their
    turn without a thread (starlette has 40 for every sync page), so the library answers."""
    store = FileStore(tmp_path / "cassettes")
    slow = huge_stream()
    piece = "data: " + json.dumps({"choices": [{"delta": {"content": "word "}}]}) + "\n\n"
    frames = [Frame(ms=n, text=piece) for n in range(60_000)]
    store.write(
        "huge",
        slow.model_copy(update={"response": slow.response.model_copy(update={"frames": frames})}),
        fresh=True,
    )
    view = View(tmp_path / "cassettes", tmp_path)
    done: list[int] = []

    async def clicks() -> None:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=100)) as c:

            async def page(n: int) -> None:
                await c.get(f"{view.url}exchange?cassette=huge&file={STREAM}&start={n}")
                done.append(n)

            pages = [asyncio.create_task(page(n)) for n in range(48)]
            await asyncio.sleep(0.5)  # for the 48 to reach the server: no answer is awaited
            library = await c.get(view.url)
            assert library.status_code == 200 and len(done) < 5, f"{len(done)} pages first"
            for task in pages:
                task.cancel()

    try:
        asyncio.run(clicks())
    finally:
        code, err = view.stop()
    assert code == 0, err


def test_a_key_given_as_part_or_start_is_not_quoted_in_half(tmp_path: Path) -> None:
    # quoted cut to 40 characters, 27 of an Anthropic key's were shown: too few for its format
    key = "sk-ant-api03-" + "Ab1_" * 23 + "AA"
    view, _ = started(tmp_path)
    try:
        for asked in (f"exchange?cassette=huge&file={STREAM}&start={key}", f"text?part={key}"):
            answer = httpx.get(f"{view.url}{asked}&cassette=huge&file={STREAM}", timeout=60)
            assert answer.status_code == 400 and key[:16] not in answer.text, asked[:8]
            said = re.search(r'<p class="error">(.*?)</p>', answer.text)
            assert said is not None and "characters" in said[1], said
    finally:
        code, err = view.stop()
    assert code == 0, err
