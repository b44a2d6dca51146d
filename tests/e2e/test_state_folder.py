"""A replay never writes inside a cassette folder (issue 22): replay, `once` and `auto` on a
cassette that holds recordings, and partial replay, each run ended by a PUT or by SIGTERM,
leave every file of the cassette as it was. What a run keeps for `tapeproxy prune` is in
the library's state folder, `.tapeproxy/`; a library that takes no notes still replays."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.store.state import note_path
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI
from tests.support.serve import Serve

WARNING = "takes no notes for `tapeproxy prune`"
runner = CliRunner()


def chat(url: str, text: str) -> str:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    headers = {"authorization": f"Bearer {SECRET_OPENAI}"}
    answer = httpx.post(url + "/openai/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


def search(url: str, query: str) -> None:
    assert httpx.get(url + "/search/v1/find", params={"q": query}).status_code == 200


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file and folder below `folder` (itself included) with its bytes and mtime: a
    file made and removed again still moves its folder's mtime."""
    found: dict[str, tuple[bytes | None, int]] = {}
    for at, _, names in os.walk(folder):
        place = Path(at)
        found[place.relative_to(folder).as_posix() + "/"] = (None, place.stat().st_mtime_ns)
        for name in names:
            path = place / name
            found[path.relative_to(folder).as_posix()] = (
                path.read_bytes(),
                path.stat().st_mtime_ns,
            )
    return found


@pytest.fixture
def library(tmp_path: Path, fake: FakeUpstream) -> Path:
    """A library whose cassette `trip` holds two chat answers and one tool call."""
    library = tmp_path / "cassettes"
    recorder = Serve(["--mode", "record", *upstreams(library, fake)], tmp_path)
    chat(recorder.url, "one")
    chat(recorder.url, "two")
    search(recorder.url, "a")
    code, err = recorder.stop()
    assert code == 0, err
    assert len(os.listdir(library / "trip")) == 3
    return library


def upstreams(library: Path, fake: FakeUpstream) -> list[str]:
    return [
        "--cassettes",
        str(library),
        "--cassette",
        "trip",
        "--upstream",
        f"openai={fake.url}",
        "--upstream",
        f"search={fake.url}",
    ]


# What each way of replaying asks: `one` is served from the cassette (`two` is left unused);
# under partial replay the tool runs live, its answer written to `trip.derived`.
REPLAYS = {
    "replay": ["--mode", "replay"],
    "once": ["--mode", "once"],
    "auto": ["--mode", "auto"],
    "partial": ["--mode", "replay", "--live", "search"],
}


def replay(name: str, library: Path, fake: FakeUpstream, cwd: Path, ended_by: str) -> str:
    """One replay run of `trip`, ended by a PUT (then the server stops) or by SIGTERM; the
    server's log."""
    server = Serve([*REPLAYS[name], *upstreams(library, fake)], cwd)
    assert chat(server.url, "one") == "echo: one"
    if name == "partial":
        search(server.url, "b")
    if ended_by == "put":
        put = httpx.put(server.url + "/__tapeproxy/cassette", json={"cassette": "trip"})
        assert put.status_code == 200, put.text
        assert note_path(library, "trip").is_file(), "the PUT ended the run: its note is kept"
    code, err = server.stop(signal.SIGTERM)
    assert code == 0, err
    return err


def prune(library: Path, *args: str) -> tuple[int, Any]:
    result = runner.invoke(app, ["prune", "trip", "--cassettes", str(library), "--json", *args])
    return result.exit_code, json.loads(result.output)


@pytest.mark.parametrize("ended_by", ["put", "sigterm"])
def test_a_replay_of_any_kind_leaves_the_cassette_folder_as_it_was(
    library: Path, fake: FakeUpstream, tmp_path: Path, ended_by: str
) -> None:
    cassette = library / "trip"
    before = snapshot(cassette)
    for name in REPLAYS:
        note_path(library, "trip").unlink(missing_ok=True)
        replay(name, library, fake, tmp_path, ended_by)
        assert snapshot(cassette) == before, f"{name} ended by {ended_by} changed the cassette"
        note = json.loads(note_path(library, "trip").read_text())
        assert len(note["used"]) == 1, name
        unused = 1 if name == "partial" else 2  # the live tool's recording is not counted
        assert len(note["unused"]) == unused, name
        code, report = prune(library, "--dry-run")
        assert code == 0 and report["pruned"] == note["unused"], name
    assert (library / "trip.derived").is_dir(), "partial replay wrote what ran live aside"
    assert (library / ".tapeproxy" / ".gitignore").read_text().splitlines()[-1] == "*"

    code, report = prune(library)
    assert code == 0 and len(report["pruned"]) == 1 and report["kept"] == 2
    assert len(os.listdir(cassette)) == 2, "prune works from the note in .tapeproxy/"
    assert prune(library)[1]["pruned"] == [], "a second prune deletes nothing more"


def test_a_library_that_takes_no_notes_still_replays_with_one_warning(
    library: Path, fake: FakeUpstream, tmp_path: Path
) -> None:
    """Root writes through a read-only mode, so the state folder is made impossible instead:
    a plain file holds its name."""
    (library / ".tapeproxy").write_text("not a folder\n")
    before = snapshot(library)
    server = Serve(["--mode", "replay", *upstreams(library, fake)], tmp_path)
    for _ in range(3):  # three runs: two ended by a PUT, the last by SIGTERM
        assert chat(server.url, "one") == "echo: one"
        put = httpx.put(server.url + "/__tapeproxy/cassette", json={"cassette": "trip"})
        assert put.status_code == 200, put.text
    assert chat(server.url, "one") == "echo: one"
    code, err = server.stop(signal.SIGTERM)
    assert code == 0, err
    assert err.count(WARNING) == 1, err
    assert snapshot(library) == before
    code, report = prune(library)
    assert code == 2 and report["error"]["type"] == "no_finished_run"
