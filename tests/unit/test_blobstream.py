"""Blobs put out while a file is written piece by piece (exchange/blobstream.py) give the
very bytes and blobs that packing the whole record gives (exchange/blobs.py): a long text
(an answer spooled to disk) in two passes, and a stream's frames one at a time."""

from __future__ import annotations

import hashlib
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapeproxy.exchange.blobs import BLOB_MIN, held, pack, pack_value, unpack
from tapeproxy.exchange.blobstream import (
    Blobber,
    frames_middle,
    large_runs,
    mapped,
    text_json,
)
from tapeproxy.exchange.layout import STREAMED, Record, render, render_around

BIG = "QUJD" * (BLOB_MIN // 4)  # a run of exactly BLOB_MIN bytes
# Pieces a long text is made of: runs of every size about BLOB_MIN, quotes, escapes, text
# that is not ASCII (a spooled text or a frame is decoded UTF-8: no lone surrogate).
PARTS = st.sampled_from(
    ['"', '\\"', "\n", "é" * 20_000, "ab", BIG, BIG[:-1], BIG + "é", "x" * 70_000]
)


def exchange(**response: object) -> Record:
    return {
        "schema_version": 1, "key": "k", "ordinal": 1, "seq": 0, "rules": "r",
        "outcome": "complete",
        "request": {"method": "POST", "upstream": "o", "path": "/", "query": [], "headers": {}},
        "response": {"status": 200, "headers": {}, **response},
    }  # fmt: skip


def stored(blobs: dict[str, bytes]) -> Blobber:
    return Blobber(lambda digest, size, pieces: blobs.__setitem__(digest, b"".join(pieces)))


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    parts=st.lists(PARTS, max_size=8),
    cut=st.integers(1, 100_000),
    kind=st.sampled_from(["text", "base64"]),
)
def test_a_long_text_written_in_pieces_is_its_whole_record_packed(
    parts: list[str], cut: int, kind: str
) -> None:
    text = "".join(parts)
    whole = pack(exchange(body={kind: text}))
    blobs: dict[str, bytes] = {}
    blobber = stored(blobs)

    def source() -> list[str]:
        return [text[at : at + cut] for at in range(0, len(text), cut)]

    skeleton = exchange(body={kind: STREAMED})
    written = b"".join(
        render_around(
            skeleton, lambda ascii: text_json(source, ascii, blobber), lambda: blobber.marked
        )
    )
    assert written == render(whole.record)
    assert blobs == whole.blobs and blobber.marked == whole.marked
    assert held([text])[0] == set(blobs)
    back = unpack(json.loads(written), blobs.__getitem__)
    assert back["response"]["body"][kind] == text


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(texts=st.lists(st.lists(PARTS, max_size=4).map("".join), max_size=4))
def test_a_streams_frames_written_one_at_a_time_are_its_whole_record_packed(
    texts: list[str],
) -> None:
    frames: list[Record] = [{"ms": n, "text": text} for n, text in enumerate(texts)]
    frames.append({"ms": 9, "base64": BIG})
    whole = pack(exchange(dialect="sse", frames=frames))
    blobs: dict[str, bytes] = {}
    blobber = stored(blobs)
    skeleton = exchange(dialect="sse", frames=[{"ms": 0, "text": STREAMED}])
    written = b"".join(
        render_around(
            skeleton, lambda ascii: frames_middle(frames, ascii, blobber), lambda: blobber.marked
        )
    )
    assert written == render(whole.record)
    assert blobs == whole.blobs
    assert unpack(json.loads(written), blobs.__getitem__)["response"]["frames"] == frames


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    parts=st.lists(st.one_of(PARTS, st.sampled_from(['"ab"', ",", '"' * 5])), max_size=12),
    cut=st.integers(1, 70_000),
)
def test_the_large_runs_of_a_text_in_pieces_are_those_its_split_at_quotes_gives(
    parts: list[str], cut: int
) -> None:
    """Short runs are skipped BLOB_MIN bytes at a time, across pieces too."""
    data = "".join(parts).encode()
    want, at = [], 0
    for run in data.split(b'"'):
        if len(run) >= BLOB_MIN:
            want.append((at, len(run), hashlib.sha256(run).hexdigest()))
        at += len(run) + 1
    text = data.decode()
    found, total = large_runs(lambda: [text[i : i + cut] for i in range(0, len(text), cut)])
    assert [(run.start, run.size, run.digest) for run in found] == want and total == len(data)


EMOJI = "\U0001f600" * (BLOB_MIN // 4)  # BLOB_MIN bytes in as few characters as can be


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(parts=st.lists(st.sampled_from(['"', "a", EMOJI, EMOJI[1:], BIG, BIG[1:]]), max_size=7))
def test_a_strings_blobs_are_the_runs_its_split_at_quotes_gives(parts: list[str]) -> None:
    """Short runs are skipped BLOB_MIN // 4 characters at a time: a run of BLOB_MIN bytes
    in that many characters is found all the same."""
    text = "".join(parts)
    runs = [run.encode() for run in text.split('"')]
    want = {hashlib.sha256(run).hexdigest() for run in runs if len(run) >= BLOB_MIN}
    packed = pack_value(text)
    assert set(packed.blobs) == want == held([text])[0] and packed.marked == bool(want)
    record = {"request": {"body": {"text": packed.record["value"]}}}
    assert unpack(record, packed.blobs.__getitem__)["request"]["body"]["text"] == text


def test_only_a_runs_first_bytes_are_held_while_it_is_hashed() -> None:
    text = '{"b64_json": "' + BIG * 30 + '", "n": 1}'
    found, total = large_runs(lambda: [text[at : at + 4096] for at in range(0, len(text), 4096)])
    assert total == len(text) and [(run.start, run.size) for run in found] == [(14, 30 * BLOB_MIN)]


def test_a_scrubbed_text_read_twice_is_scrubbed_alike_and_each_piece_once_unless_changed() -> None:
    pieces = ["key sk-1 " + BIG, "plain " * 10, BIG + " sk-2"]
    calls: list[str] = []

    def scrub(piece: str) -> str:
        calls.append(piece)
        return piece.replace("sk-", "[redacted]-")

    source = mapped(scrub, lambda: pieces)
    blobs: dict[str, bytes] = {}
    written = b"".join(text_json(source, False, stored(blobs)))
    text = "".join(scrub(piece) for piece in pieces)
    assert json.loads(written.replace(b"\n", b"")) == pack_value(text).record["value"]
    assert len(calls) == 3 + 2 + 3, "pass 1: each piece; pass 2: the two it changed"
