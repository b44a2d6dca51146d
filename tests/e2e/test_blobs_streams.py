"""Blobs in answers too large to hold and in stream frames, through the real server, the
openai SDK and raw HTTP: a streamed image generation's partial images and a >1 MiB
`b64_json` answer (spooled, written piece by piece) stored once each, replayed byte-equal
with the fake stopped and re-recorded with no diff; verify catching an edited frame blob,
prune keeping the blobs frames use; the S3 backend."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.exchange.layout import render
from tapeproxy.exchange.model import Exchange, StoredRequest, StoredResponse
from tapeproxy.store.blobs import KEEP_UNUSED
from tapeproxy.store.files import FileStore
from tests.conftest import MakeProxy
from tests.e2e.test_realtime_sdk import proxy as realtime_proxy
from tests.fakes.images_wire import image
from tests.fakes.realtime import FakeRealtime
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under
from tests.support.exchanges import KEY_A

runner = CliRunner()
PROMPT = "a lighthouse at dusk"
SMALL = "256x256"  # 87 KB of base64 an image: the stream (three) is held in memory
LARGE = "1024x1024"  # 1.4 MB an image: the answer is spooled and written piece by piece
PATH = "/openai/v1/images/generations"


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def request(stream: bool, size: str) -> dict[str, object]:
    asked: dict[str, object] = {"model": "gpt-image-1", "prompt": PROMPT, "size": size}
    if stream:
        return {**asked, "stream": True, "partial_images": 2}
    return {**asked, "response_format": "b64_json"}


def generate(url: str, stream: bool, size: str) -> list[str]:
    """The images the openai SDK gets: each partial and the final one, or the one."""
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    if not stream:
        answer = client.images.generate(**request(False, size))  # type: ignore[call-overload]
        return [one.b64_json for one in answer.data or []]
    events = client.images.generate(**request(True, size))  # type: ignore[call-overload]
    return [event.b64_json for event in events]


def raw(url: str, stream: bool, size: str) -> bytes:
    headers = {"authorization": f"Bearer {SECRET_OPENAI}"}
    answer = httpx.post(url, json=request(stream, size), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    return answer.content


def images(stream: bool, size: str) -> list[str]:
    return [image(PROMPT, index, size) for index in range(3 if stream else 1)]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    ("stream", "size"), [(True, SMALL), (True, LARGE), (False, LARGE)], ids=str
)
def test_an_image_answer_stores_each_image_once_replays_byte_equal_and_re_records(
    make_proxy: MakeProxy,
    fake: FakeUpstream,
    cassettes: Path,
    tmp_path: Path,
    stream: bool,
    size: str,
) -> None:
    sent = raw(fake.url + "/v1/images/generations", stream, size)
    recorder = make_proxy(mode="record", cassette="images")
    assert generate(recorder.url, stream, size) == images(stream, size)
    recorder.stop()
    folder = cassettes / "images"
    blobs = sorted(p.name for p in (folder / "blobs").iterdir())
    assert blobs == sorted(digest(one) for one in images(stream, size)), "one blob an image"
    [file] = folder.glob("*.json")
    assert file.stat().st_size < 8 * 1024, "the exchange file is small"
    text = file.read_text()
    assert json.loads(text)["schema_version"] == 2
    said = "image_generation.partial_image" if stream else "created"
    assert said in text and '"$blob-join"' in text, "readable: the JSON around each image"

    fake.stop()
    replayer = make_proxy(mode="replay", cassette="images")
    assert raw(replayer.url + PATH, stream, size) == sent, "the very bytes recorded"
    replayer.stop()
    replayer = make_proxy(mode="replay", cassette="images")
    assert generate(replayer.url, stream, size) == images(stream, size)
    replayer.stop()
    code, out = cli("verify", "images", "--cassettes", str(cassettes))
    assert code == 0 and "used by no recording" not in out, out

    before = files_under(cassettes)
    shutil.copytree(folder, tmp_path / "before")
    with FakeUpstream() as again:
        recorder = make_proxy(mode="record", cassette="images", upstream={"openai": again.url})
        assert generate(recorder.url, stream, size) == images(stream, size)
        recorder.stop()
    if size == SMALL or not stream:  # (a spooled stream's file keeps its new frame times)
        assert files_under(cassettes) == before, "a re-record leaves every file as it was"
    assert sorted(p.name for p in (folder / "blobs").iterdir()) == blobs
    code, out = cli("diff", str(tmp_path / "before"), "images", "--cassettes", str(cassettes))
    assert code == 0, out


@pytest.mark.parametrize("size", [SMALL, LARGE])
def test_verify_catches_an_edited_frame_blob_and_prune_keeps_the_blobs_frames_use(
    make_proxy: MakeProxy, cassettes: Path, size: str
) -> None:
    recorder = make_proxy(mode="record", cassette="images")
    generate(recorder.url, True, size)
    recorder.stop()
    folder = cassettes / "images" / "blobs"
    used = sorted(folder.iterdir())
    an_hour_ago = time.time() - KEEP_UNUSED
    stray_text = "x" * 70_000
    stray = folder / digest(stray_text)
    stray.write_text(stray_text)
    for path in [*used, stray]:
        os.utime(path, (an_hour_ago, an_hour_ago))
    code, out = cli("prune", "images", "--cassettes", str(cassettes))
    assert code == 0 and "deleted 1 blob(s)" in out, out
    assert sorted(folder.iterdir()) == used, "the frames' blobs stay, the stray goes"

    edited = used[1]
    edited.write_bytes(edited.read_bytes().replace(b"A", b"B", 1))
    code, out = cli("verify", "images", "--cassettes", str(cassettes))
    assert code == 1, out
    assert f"blobs/{edited.name}" in out and "does not hold what its name" in out, out
    replayer = make_proxy(mode="replay", cassette="images")
    with pytest.raises(openai.APIStatusError):
        generate(replayer.url, True, size)


def test_the_s3_store_holds_frame_and_spooled_answer_blobs_as_objects(
    make_proxy: MakeProxy, fake: FakeUpstream, s3_library: str
) -> None:
    recorder = make_proxy(mode="record", cassette="images", cassettes=s3_library)
    for stream in (True, False):
        assert generate(recorder.url, stream, LARGE) == images(stream, LARGE)
    recorder.stop()
    code, out = cli("verify", "images", "--cassettes", s3_library, "--json")
    assert code == 0 and json.loads(out)[0]["checked"] == 2, out
    assert not json.loads(out)[0]["warnings"], out
    fake.stop()
    replayer = make_proxy(mode="replay", cassette="images", cassettes=s3_library)
    for stream in (True, False):
        assert generate(replayer.url, stream, LARGE) == images(stream, LARGE)


async def long_audio(url: str) -> list[dict[str, object]]:
    """A Realtime audio turn whose three audio deltas are ~270 KB of base64 each."""
    client = openai.AsyncOpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI)
    got: list[dict[str, object]] = []
    async with client.realtime.connect(model="gpt-realtime") as connection:
        await connection.response.create(
            response={"output_modalities": ["audio"], "instructions": "long"}
        )
        async for event in connection:
            got.append(event.to_dict())
            if event.type == "response.done":
                break
    return got


def test_a_realtime_session_stores_each_large_audio_frame_once_and_replays(
    cassettes: Path,
) -> None:
    with FakeRealtime() as realtime:
        recorder = realtime_proxy(cassettes, realtime.url, "record")
        recorded = asyncio.run(long_audio(recorder.url))
        recorder.stop()
    deltas = [e["delta"] for e in recorded if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == 3 and all(len(str(one)) > 200_000 for one in deltas)
    [folder] = {p.parent for p in cassettes.rglob("*.json")}
    blobs = sorted(p.name for p in (folder / "blobs").iterdir())
    assert blobs == sorted(digest(str(one)) for one in deltas), "one blob an audio delta"
    [file] = folder.glob("*.json")
    assert file.stat().st_size < 8 * 1024 and json.loads(file.read_text())["schema_version"] == 2
    replayer = realtime_proxy(cassettes, "http://127.0.0.1:9", "replay")
    try:
        assert asyncio.run(long_audio(replayer.url)) == recorded, "the upstream is gone"
    finally:
        replayer.stop()
    code, out = cli("verify", "--cassettes", str(cassettes))
    assert code == 0 and "used by no recording" not in out, out


def test_redact_inside_a_frames_blob_writes_a_new_blob_and_removes_the_old(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="images")
    generate(recorder.url, True, SMALL)
    recorder.stop()
    first, *others = images(True, SMALL)
    code, out = cli(
        "redact", "images", "--pattern", re.escape(first[:24]), "--cassettes", str(cassettes)
    )
    assert code == 0, out
    folder = cassettes / "images" / "blobs"
    held = {p.name for p in folder.iterdir()}
    assert len(held) == 3 and digest(first) not in held, "a new blob, the old one gone"
    assert {digest(one) for one in others} <= held, "the untouched frames' blobs stay"
    assert not any(first[:24].encode() in data for data in files_under(cassettes).values())
    code, out = cli("verify", "images", "--cassettes", str(cassettes))
    assert code == 0 and "used by no recording" not in out, out


def test_a_file_an_earlier_build_cut_otherwise_keeps_its_blob(cassettes: Path) -> None:
    """A version-2 file that refers to a whole string holding double quotes (as the first
    blobs were cut) is read as it is: verify finds its blob used, prune keeps it."""
    text = 'say "hi" ' + "a" * 70_000
    request = StoredRequest(method="POST", upstream="openai", path="/v1/x")
    answer = StoredResponse(status=200, headers={}, body={"text": "-"})
    exchange = Exchange(key=KEY_A, ordinal=1, seq=0, rules="r", request=request, response=answer)
    record = exchange.record()
    record["response"]["body"] = {"text": {"$blob": f"sha256:{digest(text)}", "size": len(text)}}
    record["schema_version"] = 2
    folder = cassettes / "old"
    (folder / "blobs").mkdir(parents=True)
    (folder / f"{KEY_A}.json").write_bytes(render(record))
    (folder / "blobs" / digest(text)).write_text(text)
    an_hour_ago = time.time() - KEEP_UNUSED
    os.utime(folder / "blobs" / digest(text), (an_hour_ago, an_hour_ago))
    _, out = cli("verify", "old", "--cassettes", str(cassettes))  # (its made-up key aside)
    assert "blobs/" not in out and "1 file(s) checked" in out, out
    _, out = cli("prune", "old", "--cassettes", str(cassettes))
    assert "blob" not in out and (folder / "blobs" / digest(text)).exists(), out
    assert FileStore(cassettes).read("old", KEY_A, 1).response.body == {"text": text}
