"""Large bodies stored once (blobs) through the real server, the openai SDK and the real
CLI: a conversation that re-sends one image, replayed and re-recorded; verify, prune and
redact keeping the blobs consistent; the S3 backend holding them as objects."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.exchange.model import Exchange, StoredRequest, StoredResponse, dump_exchange
from tapeproxy.store import open_store
from tapeproxy.store.blobs import KEEP_UNUSED
from tapeproxy.store.files import FileStore
from tapeproxy.store.protocol import CassetteStore
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under
from tests.support.exchanges import KEY_A, KEY_B

runner = CliRunner()
# A 1 MB picture, base64 in a data URL, as the openai SDK sends one.
PICTURE = base64.b64encode(hashlib.sha256(b"seed").digest() * (750 * 1024 // 32)).decode()
IMAGE_URL = f"data:image/png;base64,{PICTURE}"
TURNS = 20


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def converse(url: str, turns: int = TURNS) -> list[str]:
    """A conversation that re-sends the image with every turn, as an agent that sees does."""
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)
    messages: list[Any] = []
    said = []
    for turn in range(turns):
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": IMAGE_URL}},
                    {"type": "text", "text": f"turn {turn}: what changed?"},
                ],
            }
        )
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        text = answer.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        said.append(text)
    return said


def size_on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_conversation_re_sending_an_image_stores_it_once_and_replays_and_re_records(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, tmp_path: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="vision")
    said = converse(recorder.url)
    recorder.stop()
    folder = cassettes / "vision"
    blobs = sorted((folder / "blobs").iterdir())
    assert [p.name for p in blobs] == [hashlib.sha256(IMAGE_URL.encode()).hexdigest()]
    assert len(list(folder.glob("*.json"))) == TURNS
    assert size_on_disk(folder) <= 1.3 * 2**20, "the image once, not 20 times"
    file = json.loads(next(folder.glob("*.json")).read_text())
    assert file["schema_version"] == 2
    assert '"$blob": "sha256:' in next(folder.glob("*.json")).read_text()

    replayer = make_proxy(mode="replay", cassette="vision")
    assert converse(replayer.url) == said, "the same answers, from the files and the blob"
    replayer.stop()
    assert cli("verify", "vision", "--cassettes", str(cassettes))[0] == 0

    before = files_under(cassettes)
    shutil.copytree(folder, tmp_path / "before")
    recorder = make_proxy(mode="record", cassette="vision")
    assert converse(recorder.url) == said
    recorder.stop()
    assert files_under(cassettes) == before, "a re-record leaves every file as it was"
    code, out = cli("diff", str(tmp_path / "before"), "vision", "--cassettes", str(cassettes))
    assert code == 0, out


def test_verify_catches_an_edited_blob_and_prune_removes_an_unused_one(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="vision")
    converse(recorder.url, turns=2)
    recorder.stop()
    [blob] = (cassettes / "vision" / "blobs").iterdir()
    (blob.parent / f".{blob.name}.99999999-1.tmp").write_bytes(b"killed")  # a killed write's
    code, out = cli("ls", "--cassettes", str(cassettes), "--json")
    assert code == 0 and [c["cassette"] for c in json.loads(out)] == ["vision"], out
    (blob.parent / f".{blob.name}.99999999-1.tmp").unlink()
    stray_text = "x" * 70_000
    stray = cassettes / "vision" / "blobs" / hashlib.sha256(stray_text.encode()).hexdigest()
    stray.write_text(stray_text)
    code, out = cli("verify", "vision", "--cassettes", str(cassettes))
    assert code == 0 and "used by no recording" in out, out
    # Just put, it may be a blob a server recording now has put and not yet referred to.
    code, out = cli("prune", "vision", "--cassettes", str(cassettes))
    assert stray.exists(), out
    an_hour_ago = time.time() - KEEP_UNUSED
    os.utime(stray, (an_hour_ago, an_hour_ago))

    code, out = cli("prune", "vision", "--cassettes", str(cassettes), "--dry-run")
    assert code == 0 and "would delete 1 blob(s)" in out, out
    assert stray.exists()
    code, out = cli("prune", "vision", "--cassettes", str(cassettes))
    assert code == 0 and "deleted 1 blob(s)" in out, out
    assert not stray.exists() and blob.exists(), "the blob in use stays"

    blob.write_bytes(blob.read_bytes().replace(b"A", b"B", 1))
    os.utime(blob, (an_hour_ago, an_hour_ago))
    code, out = cli("verify", "vision", "--cassettes", str(cassettes))
    assert code == 1, out
    assert f"blobs/{blob.name}" in out and "does not hold what its name" in out
    code, out = cli("prune", "vision", "--cassettes", str(cassettes))
    assert blob.exists(), "a recording that cannot be read: no blob is known unused"


def test_redact_inside_a_blob_writes_a_new_blob_and_removes_the_old(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="vision")
    client = openai.OpenAI(
        base_url=recorder.url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0
    )
    document = "mail ann@example.com about it. " + "lorem ipsum " * 8000
    client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": document}]
    )
    recorder.stop()
    folder = cassettes / "vision"
    old = {p.name: p.read_bytes() for p in (folder / "blobs").iterdir()}
    assert len(old) == 2, "the document asked, and the answer that echoes it"
    redacting = ["redact", "vision", "--pattern", r"[a-z]+@example\.com"]
    code, out = cli(*redacting, "--cassettes", str(cassettes))
    assert code == 0, out
    new = {p.name for p in (folder / "blobs").iterdir()}
    assert len(new) == 2 and not new & set(old), "new blobs for the scrubbed strings, the old gone"
    assert not any(b"ann@example.com" in data for data in files_under(cassettes).values())
    assert cli("verify", "vision", "--cassettes", str(cassettes))[0] == 0
    for name, data in old.items():  # as a redact killed before it deleted them left them
        (folder / "blobs" / name).write_bytes(data)
    code, out = cli(*redacting, "--cassettes", str(cassettes))
    assert code == 0, out
    assert not any(b"ann@example.com" in data for data in files_under(cassettes).values())


def test_the_s3_store_holds_a_blob_as_an_object(
    make_proxy: MakeProxy, fake: FakeUpstream, s3_library: str
) -> None:
    recorder = make_proxy(mode="record", cassette="vision", cassettes=s3_library)
    said = converse(recorder.url, turns=3)
    recorder.stop()
    code, out = cli("verify", "vision", "--cassettes", s3_library, "--json")
    assert code == 0 and json.loads(out)[0]["checked"] == 3, out
    fake.stop()
    replayer = make_proxy(mode="replay", cassette="vision", cassettes=s3_library)
    assert converse(replayer.url, turns=3) == said


def test_verify_upgrade_rewrites_a_version_1_file_with_a_large_string_with_its_blob(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="vision")
    said = converse(recorder.url, turns=1)
    recorder.stop()
    folder = cassettes / "vision"
    [path] = folder.glob("*.json")
    key = path.name.removesuffix(".json")
    whole = dump_exchange(FileStore(cassettes).read("vision", key, 1))  # as version 1 held it
    path.write_bytes(whole)
    shutil.rmtree(folder / "blobs")
    assert json.loads(whole)["schema_version"] == 1
    code, out = cli("verify", "vision", "--cassettes", str(cassettes))
    assert code == 0 and "1 file(s) in an older schema_version" in out, out
    assert path.read_bytes() == whole, "verify alone changes nothing"
    code, out = cli("verify", "vision", "--cassettes", str(cassettes), "--upgrade", "--json")
    assert code == 0 and json.loads(out)[0]["upgraded"] == [path.name], out
    assert json.loads(path.read_text())["schema_version"] == 2
    assert len(list((folder / "blobs").iterdir())) == 1
    assert converse(make_proxy(mode="replay", cassette="vision").url, turns=1) == said


def test_verify_upgrade_of_a_cassette_it_cannot_write_says_so_per_file(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """A cassette verify cannot write into (a read-only mount; here its `blobs` is a file):
    --upgrade flags the file it could not rewrite (no traceback) and checks the rest."""
    recorder = make_proxy(mode="record", cassette="vision")
    converse(recorder.url, turns=1)
    recorder.stop()
    folder = cassettes / "vision"
    [path] = folder.glob("*.json")
    key = path.name.removesuffix(".json")
    whole = dump_exchange(FileStore(cassettes).read("vision", key, 1))  # as version 1 held it
    path.write_bytes(whole)
    shutil.rmtree(folder / "blobs")
    (folder / "blobs").write_bytes(b"")
    code, out = cli("verify", "vision", "--cassettes", str(cassettes), "--upgrade", "--json")
    assert code == 1, out
    [verdict] = json.loads(out)
    assert verdict["outdated"] == [path.name] and verdict["upgraded"] == []
    [problem] = verdict["problems"]
    assert problem["file"] == path.name and "cannot be rewritten" in problem["problem"]
    assert path.read_bytes() == whole


def test_an_s3_blob_another_machine_deleted_is_put_again_not_taken_from_the_cache(
    s3_library: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Machine A read a blob (so its local cache holds it); machine B's prune deleted it; A
    then records a request re-sending that image: the blob must be put again, not judged
    there from A's cache, or A's new file refers to a blob that is gone."""

    def recorded(key: str) -> Exchange:
        request = StoredRequest(
            method="POST", upstream="openai", path="/v1/x", body={"json": {"url": IMAGE_URL}}
        )
        answer = StoredResponse(status=200, headers={}, body={"json": {"ok": 1}})
        return Exchange(key=key, ordinal=1, seq=0, rules="r", request=request, response=answer)

    def machine(name: str) -> CassetteStore:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / name))
        return open_store(s3_library)

    here = machine("here")
    here.write("vision", recorded(KEY_A))
    assert here.read("vision", KEY_A, 1).request.body == {"json": {"url": IMAGE_URL}}
    there = machine("there")
    there.delete("vision", KEY_A, 1)
    [digest] = there.blobs("vision")
    there.delete_blob("vision", digest)  # as its prune does: no recording uses it now
    here.write("vision", recorded(KEY_B))
    fresh = machine("fresh")
    assert fresh.read("vision", KEY_B, 1).request.body == {"json": {"url": IMAGE_URL}}


def test_prune_leaves_a_blob_a_recording_under_way_has_put_or_is_using_again(
    cassettes: Path,
) -> None:
    """A server recording into the cassette puts a blob, then the file that refers to it: a
    prune in between must not delete the blob, nor one an old recording used and a new one,
    being written, uses again (or the new file refers to a blob that is gone)."""

    def recorded(key: str, text: str) -> Exchange:
        request = StoredRequest(method="POST", upstream="openai", path="/v1/x")
        answer = StoredResponse(status=200, headers={}, body={"text": text})
        return Exchange(key=key, ordinal=1, seq=0, rules="r", request=request, response=answer)

    store = FileStore(cassettes)
    store.write("vision", recorded("c" * 64, "kept, small"))
    store.write("vision", recorded(KEY_A, "a" * 70_000))
    [old] = (cassettes / "vision" / "blobs").iterdir()
    an_hour_ago = time.time() - KEEP_UNUSED
    os.utime(old, (an_hour_ago, an_hour_ago))
    store.delete("vision", KEY_A, 1)  # as prune deletes an unused recording
    store._put_blobs("vision", {old.name: old.read_bytes()})  # a new recording's, the same
    store._put_blobs("vision", {"b" * 64: b"b" * 70_000})  # another's, its file not yet written
    _, out = cli("prune", "vision", "--cassettes", str(cassettes))
    assert len(list(old.parent.iterdir())) == 2, out
    store.write("vision", recorded(KEY_B, "a" * 70_000))
    assert store.read("vision", KEY_B, 1).response.body == {"text": "a" * 70_000}


def test_verify_flags_a_lost_blob_of_a_file_it_found_sound_before(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """The file is unchanged (its stamp the one verify kept), but its blob is gone: the
    recording cannot be read, and verify must say so, not pass on what it found before."""
    recorder = make_proxy(mode="record", cassette="vision")
    converse(recorder.url, turns=1)
    recorder.stop()
    [path] = (cassettes / "vision").glob("*.json")
    a_minute_ago = time.time() - 60
    os.utime(path, (a_minute_ago, a_minute_ago))  # not changed in the last seconds: trusted
    code, out = cli("verify", "vision", "--cassettes", str(cassettes))
    assert code == 0, out
    [blob] = (cassettes / "vision" / "blobs").iterdir()
    blob.unlink()
    code, out = cli("verify", "vision", "--cassettes", str(cassettes))
    assert code == 1 and f"blobs/{blob.name}" in out and "missing" in out, out


def test_a_cassette_named_like_another_ones_blobs_folder_is_listed(cassettes: Path) -> None:
    """`vision/blobs` is a name a cassette may have: its recordings sit beside vision's blobs,
    and ls (and so verify and report) must list it, while a killed blob write's temp file in
    vision's blobs makes no cassette."""
    store = FileStore(cassettes)
    request = StoredRequest(method="POST", upstream="openai", path="/v1/x")
    answer = StoredResponse(status=200, headers={}, body={"text": "b" * 70_000})
    store.write(
        "vision", Exchange(key=KEY_A, ordinal=1, seq=0, rules="r", request=request, response=answer)
    )
    [blob] = (cassettes / "vision" / "blobs").iterdir()
    (blob.parent / f".{blob.name}.99999999-1.tmp").write_bytes(b"killed")
    assert store.cassettes() == ["vision"]
    store.write(
        "vision/blobs",
        Exchange(key=KEY_B, ordinal=1, seq=0, rules="r", request=request, response=answer),
    )
    assert store.cassettes() == ["vision", "vision/blobs"]
    code, out = cli("ls", "--cassettes", str(cassettes), "--json")
    assert code == 0 and [c["cassette"] for c in json.loads(out)] == ["vision", "vision/blobs"]
