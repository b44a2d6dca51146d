"""Blobs of an exchange whose answer is spooled (past SPOOL_AFTER, written piece by piece),
through the real server and raw HTTP: its request's large strings are blobs too, and its
request's own objects that look like blob references are kept as they were sent; a key
split across two of the spool's read pieces is scrubbed all the same."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tapeproxy.engine.spool import READ_PIECE, SPOOL_AFTER
from tapeproxy.store.files import FileStore
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, files_under

IMAGE = "QUJD" * 40_000  # 160 KB of base64: a blob
PATH = "/openai/v1/chat/completions"


ANSWER = '{"data": "' + "z" * (2 * SPOOL_AFTER) + '"}'
ASKED = {
    "model": "gpt-4o",
    "image": IMAGE,
    "meta": {"$blob-join": ["a"]},  # objects of the request's own: escaped
    "ref": {"$blob": "sha256:" + "0" * 64, "size": 3},
}


def test_a_spooled_answers_request_stores_its_image_once_and_keeps_its_own_objects(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    answer, asked = ANSWER, ASKED
    fake.script("/v1/chat/completions", Reply(body=answer, headers={"content-type": "text/plain"}))
    recorder = make_proxy(mode="record", cassette="c")
    assert httpx.post(recorder.url + PATH, json=asked, timeout=60).text == answer
    recorder.stop()
    [file] = (cassettes / "c").glob("*.json")
    assert file.stat().st_size < 8 * 1024, "the request's image is a blob, not inline"
    assert json.loads(file.read_text())["schema_version"] == 2
    key, ordinal = file.stem.split(".")[0], 1
    exchange = FileStore(cassettes).read("c", key, ordinal)
    assert exchange.request.body == {"json": asked}, "read back as it was sent"
    fake.stop()
    player = make_proxy(mode="replay", cassette="c")
    assert httpx.post(player.url + PATH, json=asked, timeout=60).text == answer


def test_the_s3_store_keeps_a_spooled_answers_request_as_it_was_sent(
    make_proxy: MakeProxy, fake: FakeUpstream, s3_library: str
) -> None:
    fake.script("/v1/chat/completions", Reply(body=ANSWER, headers={"content-type": "text/plain"}))
    recorder = make_proxy(mode="record", cassette="c", cassettes=s3_library)
    assert httpx.post(recorder.url + PATH, json=ASKED, timeout=60).text == ANSWER
    recorder.stop()
    fake.stop()
    player = make_proxy(mode="replay", cassette="c", cassettes=s3_library)
    assert httpx.post(player.url + PATH, json=ASKED, timeout=60).text == ANSWER


def test_a_key_across_two_read_pieces_of_a_spooled_text_answer_is_scrubbed(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    line = "x" * 999 + "\n"
    head = line * (READ_PIECE // 1000 - 1)
    head += "x" * (READ_PIECE - len(head) - len(SECRET_OPENAI) // 2 - 7) + " key: "
    answer = head + SECRET_OPENAI + "\n" + line * (2 * SPOOL_AFTER // 1000)  # across 1 MiB
    fake.script("/v1/files/f/content", Reply(body=answer, headers={"content-type": "text/plain"}))
    recorder = make_proxy(mode="record", cassette="c")
    assert httpx.get(recorder.url + "/openai/v1/files/f/content", timeout=60).text == answer
    recorder.stop()
    kept = b"".join(files_under(cassettes).values())
    assert SECRET_OPENAI[-12:].encode() not in kept and b"[redacted]" in kept
