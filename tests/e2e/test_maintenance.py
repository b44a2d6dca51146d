"""Cassette upkeep through the real server and the real CLI: prune after a replay run,
redact (by command and at record time), --fail-on-unused on a cassette never touched, a
re-record in another order, and schema upgrades."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.engine import ledger
from tapeproxy.exchange import model as models
from tapeproxy.providers import Rulebook, provider_table
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.store.files import FileStore
from tapeproxy.store.state import note_path
from tapeproxy.tools.redact import redact
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EMAIL = re.compile(r"[a-z]+@example\.com")
runner = CliRunner()


def ask(url: str, text: str, stream: bool = False, cassette: str | None = None) -> str:
    headers = {"x-tapeproxy-cassette": cassette} if cassette else {}
    client = openai.OpenAI(
        base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0, default_headers=headers
    )
    messages: Any = [{"role": "user", "content": text}]
    if not stream:
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def exchange_files(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.json") if not p.name.startswith(".")}


def record(make_proxy: MakeProxy, cassette: str, questions: list[str], **extra: Any) -> None:
    recorder = make_proxy(mode="record", cassette=cassette, **extra)
    for question in questions:
        ask(recorder.url, question)
    recorder.stop()


# ------------------------------------------------------------------------------ prune


@pytest.mark.parametrize("ended_by", ["put", "shutdown"])
def test_prune_deletes_exactly_what_the_last_replay_run_did_not_use(
    make_proxy: MakeProxy, cassettes: Path, ended_by: str
) -> None:
    record(make_proxy, "trip", ["one", "two", "three"])
    folder = cassettes / "trip"
    before = exchange_files(folder)
    replayer = make_proxy(mode="replay", cassette="trip")
    ask(replayer.url, "one")
    ask(replayer.url, "three")
    served = exchange_files(folder)  # nothing changes on disk while replaying
    if ended_by == "put":
        assert replayer.put_cassette(cassette="elsewhere").status_code == 200
    else:
        replayer.stop()
    note = json.loads(note_path(cassettes, "trip").read_text())
    assert len(note["used"]) == 2 and len(note["unused"]) == 1
    assert "ms" not in json.dumps(note)
    [unused] = note["unused"]

    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run", "--json")
    assert code == 0, out
    assert json.loads(out)["pruned"] == [unused]
    assert exchange_files(folder) == served == before, "a dry run deletes nothing"

    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 0, out
    assert "deleted 1 recording(s)" in out and unused in out
    assert exchange_files(folder) == before - {unused}
    assert cli("verify", "trip", "--cassettes", str(cassettes))[0] == 0
    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 0 and "deleted 0 recording(s)" in out
    replayer.stop()
    assert ask(make_proxy(mode="replay", cassette="trip").url, "one") == "echo: one"


def test_prune_piped_writes_its_summary_on_one_line_however_long(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """In a pipe (a script, a CI log) there is no terminal width to fit: no line is broken."""
    name = "a-cassette-named-after-a-long-pytest-node-id"
    record(make_proxy, name, ["one", "two"])
    replay_some(make_proxy, name, ["one"])
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS" and k != "LINES"}
    result = subprocess.run(
        [sys.executable, "-m", "tapeproxy", "prune", name, "--cassettes", str(cassettes)],
        capture_output=True,
        text=True,
        env={**environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [summary] = [line for line in result.stdout.splitlines() if line.startswith("cassette ")]
    assert len(summary) > 80 and summary.endswith(", 1 kept"), result.stdout


def test_prune_after_an_auto_run_names_it_and_deletes_only_with_yes(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """An auto run serves what the cassette holds and records what it lacks: prune says so
    (mode, start, what it served and recorded), and a run that recorded may not have asked
    for everything the cassette's tests need, so it deletes only with --yes."""
    record(make_proxy, "trip", ["one", "two", "three"])
    folder = cassettes / "trip"
    before = exchange_files(folder)
    ahead = datetime.now(UTC).replace(microsecond=0)
    auto = make_proxy(mode="auto", cassette="trip")
    ask(auto.url, "one")  # served
    ask(auto.url, "four")  # recorded
    auto.stop()
    behind = datetime.now(UTC)
    with_new = exchange_files(folder)
    assert len(with_new) == 4

    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 2, out
    [line] = out.strip().splitlines()
    assert line.startswith("tapeproxy: relying on the last finished run, in auto mode, started ")
    assert "which passed: it served 1 recording(s), recorded 1 and left 2 unused" in line
    assert "deleted only with --yes; nothing deleted" in line
    started = datetime.strptime(line.split("started ")[1][:23], "%Y-%m-%d %H:%M:%S UTC")
    assert ahead <= started.replace(tzinfo=UTC) <= behind
    assert exchange_files(folder) == with_new

    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert (report["mode"], report["served"], report["recorded"]) == ("auto", 1, 1)
    assert len(report["pruned"]) == 2 and exchange_files(folder) == with_new

    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--yes")
    assert code == 0, out
    assert "in auto mode" in out and "deleted 2 recording(s) that run did not use, 2 kept" in out
    assert exchange_files(folder) == with_new - set(report["pruned"])
    assert len(before & exchange_files(folder)) == 1


def test_prune_after_a_replay_run_needs_no_yes_and_names_the_run(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, "trip", ["one", "two"])
    replay_some(make_proxy, "trip", ["one"])
    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 0, out
    assert "relying on the last finished run, in replay mode, started " in out
    assert "it served 1 recording(s) and left 1 unused" in out and "deleted 1 recording(s)" in out


def test_prune_dry_run_after_an_auto_run_says_deleting_needs_yes(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """--dry-run is how a user checks what prune will do: after a run that recorded it says
    that the real prune will wait for --yes (and --json says so in `needs_yes`), rather than
    promise a deletion the next command refuses."""
    record(make_proxy, "trip", ["one", "two"])
    auto = make_proxy(mode="auto", cassette="trip")
    ask(auto.url, "one")  # served
    ask(auto.url, "three")  # recorded
    auto.stop()
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run")
    assert code == 0, out
    assert "would delete 1 recording(s) that run did not use, 2 kept" in out
    assert "that run also recorded: prune deletes them only with --yes" in out
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run", "--yes")
    assert code == 0 and "--yes" not in out, out
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run", "--json")
    assert code == 0 and json.loads(out)["needs_yes"] is True, out
    replay_some(make_proxy, "trip", ["one"])
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run", "--json")
    assert code == 0 and json.loads(out)["needs_yes"] is False, out


def test_prune_by_the_note_of_an_older_tapeproxy_claims_no_mode_or_counts(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """A version-3 note (before runs noted their mode) may be an auto run's: prune does not
    call it a replay run, and --json gives its mode, start, served and recorded as unknown
    (null), not as 0."""
    record(make_proxy, "trip", ["one", "two"])
    replay_some(make_proxy, "trip", ["one"])
    path = note_path(cassettes, "trip")
    note = json.loads(path.read_text())
    for newer in ("mode", "started", "served", "recorded"):
        del note[newer]
    path.write_text(json.dumps({**note, "version": 3}))
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run")
    assert code == 0, out
    assert "replay run" not in out and "an older tapeproxy noted" in out, out
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run", "--json")
    report = json.loads(out)
    assert [report[k] for k in ("mode", "started", "served", "recorded")] == [None] * 4
    assert len(report["pruned"]) == 1 and report["needs_yes"] is False


def test_a_run_that_left_many_recordings_unused_notes_a_bounded_number_for_prune(
    make_proxy: MakeProxy, cassettes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unused recording in the note is read and digested when the run ends: a cap keeps
    a huge cassette's shutdown short; prune takes the rest after the next run."""
    monkeypatch.setattr(ledger, "MAX_NOTED", 2)
    record(make_proxy, "many", ["one", "two", "three", "four", "five"])
    folder = cassettes / "many"
    replayer = make_proxy(mode="replay", cassette="many")
    ask(replayer.url, "one")
    replayer.stop()
    note = json.loads(note_path(cassettes, "many").read_text())
    assert len(note["used"]) == 1 and len(note["unused"]) == 2 == len(note["digests"])
    code, out = cli("prune", "many", "--cassettes", str(cassettes))
    assert code == 0 and "deleted 2 recording(s)" in out
    assert len(exchange_files(folder)) == 3
    replayer = make_proxy(mode="replay", cassette="many")
    ask(replayer.url, "one")
    replayer.stop()
    assert cli("prune", "many", "--cassettes", str(cassettes))[1].count("deleted 2") == 1
    assert len(exchange_files(folder)) == 1


def test_prune_refuses_with_exit_2_without_a_finished_replay_run(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, "trip", ["one", "two"])
    before = files_under(cassettes)
    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 2
    assert "no finished replay run" in out and "nothing deleted" in out
    assert files_under(cassettes) == before

    replayer = make_proxy(mode="replay", cassette="trip")
    ask(replayer.url, "one")
    replayer.stop()
    assert note_path(cassettes, "trip").exists()
    record(make_proxy, "trip", ["one", "two"])  # a record run: the note no longer holds
    assert not note_path(cassettes, "trip").exists()
    assert cli("prune", "trip", "--cassettes", str(cassettes))[0] == 2


def test_prune_deletes_nothing_after_a_replay_run_that_missed(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    """A run with misses left unused what the request that missed may still need (it only
    changed): its note says so, and prune, even a dry run, deletes nothing and says why."""
    record(make_proxy, "trip", ["one", "two"])
    before = files_under(cassettes / "trip")
    replayer = make_proxy(mode="replay", cassette="trip")
    ask(replayer.url, "one")
    with pytest.raises(openai.UnprocessableEntityError):
        ask(replayer.url, "two, changed")
    replayer.stop()
    note = json.loads(note_path(cassettes, "trip").read_text())
    assert note["misses"] == 1 and note["failed"] is False
    assert len(note["used"]) == 1 and note["unused"] == [] and note["digests"] == {}
    for extra in ([], ["--dry-run"]):
        code, out = cli("prune", "trip", "--cassettes", str(cassettes), *extra)
        assert code == 2, out
        assert "did not pass (1 request(s) missed the cassette" in out and "nothing deleted" in out
    assert files_under(cassettes / "trip") == before

    replayer = make_proxy(mode="replay", cassette="trip")
    ask(replayer.url, "one")
    replayer.stop()  # a run that passed: prune goes by it
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--dry-run")
    assert code == 0 and "relying on the last finished run, in replay mode, started " in out
    assert "which passed: it served 1 recording(s) and left 1 unused" in out
    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 0 and "deleted 1 recording(s)" in out
    assert len(files_under(cassettes / "trip")) == 1


def test_recordings_of_an_upstream_that_ran_live_are_not_pruned(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    tool = {"search": fake.url}
    recorder = make_proxy(mode="record", cassette="trip", upstream=tool)
    ask(recorder.url, "one")
    ask(recorder.url, "two")
    assert httpx.get(recorder.url + "/search/v1/find", params={"q": "a"}).status_code == 200
    assert httpx.get(recorder.url + "/search/v1/find", params={"q": "b"}).status_code == 200
    recorder.stop()
    replayer = make_proxy(mode="replay", cassette="trip", live=("openai",), upstream=tool)
    ask(replayer.url, "one")
    assert httpx.get(replayer.url + "/search/v1/find", params={"q": "a"}).status_code == 200
    replayer.stop()
    note = json.loads(note_path(cassettes, "trip").read_text())
    assert len(note["used"]) == 1 and len(note["unused"]) == 1, "only the tool's count"
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--json")
    assert code == 0 and json.loads(out)["pruned"] == note["unused"]
    assert len(exchange_files(cassettes / "trip")) == 3, "both model recordings are kept"


def replay_some(make_proxy: MakeProxy, cassette: str, questions: list[str]) -> None:
    replayer = make_proxy(mode="replay", cassette=cassette)
    for question in questions:
        ask(replayer.url, question)
    replayer.stop()


def seqs(folder: Path) -> list[int]:
    return sorted(json.loads((folder / name).read_text())["seq"] for name in exchange_files(folder))


# Recorded in this order, B redacts (or rekeys) to A: A.1 (seq 0), B.1 (seq 1), A.2 (seq 2);
# after, A.1, A.2 (B, seq 1), A.3 (seq 2): the name the note gave the unused A.2 is B's now.
MERGING = ["call [redacted]", "call 555-1234", "call [redacted]"]
PHONE = r"\d{3}-\d{4}"


def test_prune_after_redact_renumbered_the_cassette_deletes_nothing(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, "trip", MERGING)
    replay_some(make_proxy, "trip", MERGING[:2])  # uses A.1 and B.1, leaves A.2
    folder = cassettes / "trip"
    assert len(json.loads(note_path(cassettes, "trip").read_text())["unused"]) == 1
    code, out = cli("redact", "trip", "--pattern", PHONE, "--cassettes", str(cassettes))
    assert code == 0, out
    assert not note_path(cassettes, "trip").exists(), "a rewrite drops the note"
    code, out = cli("prune", "trip", "--cassettes", str(cassettes))
    assert code == 2 and "nothing deleted" in out
    assert seqs(folder) == [0, 1, 2]


def post_chat(url: str, body: dict[str, Any]) -> None:
    headers = {"authorization": f"Bearer {SECRET_OPENAI}"}
    answer = httpx.post(url + "/openai/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text


def test_prune_after_rekey_renumbered_the_cassette_deletes_nothing(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    plain: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
    }
    warm = {**plain, "temperature": 0.5}  # rekeys to `plain` when temperature is ignored
    recorder = make_proxy(mode="record", cassette="trip")
    for body in [plain, warm, plain]:
        post_chat(recorder.url, body)
    recorder.stop()
    replayer = make_proxy(mode="replay", cassette="trip")
    post_chat(replayer.url, plain)
    post_chat(replayer.url, warm)
    replayer.stop()
    folder = cassettes / "trip"
    code, out = cli(
        "rekey", "trip", "--ignore", "openai:body:temperature", "--cassettes", str(cassettes)
    )
    assert code == 0, out
    assert not note_path(cassettes, "trip").exists(), "a rewrite drops the note"
    assert cli("prune", "trip", "--cassettes", str(cassettes))[0] == 2
    assert seqs(folder) == [0, 1, 2]


def test_prune_keeps_a_file_that_holds_another_recording_than_the_note_saw(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, "trip", MERGING)
    replay_some(make_proxy, "trip", MERGING[:2])
    folder = cassettes / "trip"
    note = note_path(cassettes, "trip").read_bytes()
    assert cli("redact", "trip", "--pattern", PHONE, "--cassettes", str(cassettes))[0] == 0
    note_path(cassettes, "trip").write_bytes(note)  # a note that outlived the rewrite
    code, out = cli("prune", "trip", "--cassettes", str(cassettes), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["pruned"] == [] and len(report["changed"]) == 1
    assert seqs(folder) == [0, 1, 2]


def test_prune_while_a_record_run_is_under_way_deletes_nothing(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, "trip", ["one", "two"])
    replay_some(make_proxy, "trip", ["one"])  # leaves two unused
    folder = cassettes / "trip"
    assert note_path(cassettes, "trip").exists()
    recorder = make_proxy(mode="record", cassette="trip")
    ask(recorder.url, "one")
    ask(recorder.url, "two")  # recorded again by a run that has not ended (or crashed)
    assert not note_path(cassettes, "trip").exists(), "the first write drops the note"
    before = exchange_files(folder)
    assert cli("prune", "trip", "--cassettes", str(cassettes))[0] == 2
    assert exchange_files(folder) == before and len(before) == 2
    recorder.stop()


def test_another_clients_mode_change_does_not_split_a_replay_run_for_prune(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    record(make_proxy, "x", ["one", "two"])
    replayer = make_proxy(mode="replay", cassette="other")
    ask(replayer.url, "one", cassette="x")
    assert replayer.put_cassette(cassette="y", mode="auto").status_code == 200
    assert replayer.put_cassette(cassette="z", mode="replay").status_code == 200
    ask(replayer.url, "two", cassette="x")
    replayer.stop()
    note = json.loads(note_path(cassettes, "x").read_text())
    assert len(note["used"]) == 2 and note["unused"] == []
    code, out = cli("prune", "x", "--cassettes", str(cassettes), "--json")
    assert code == 0 and json.loads(out)["pruned"] == []
    assert len(exchange_files(cassettes / "x")) == 2


# ----------------------------------------------------------------------- fail-on-unused


def serve(args: list[str], cwd: Path) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "tapeproxy", "serve", "--port", "0", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().split("ready on ")[-1].strip()


@pytest.mark.parametrize("recorded", [True, False])
@pytest.mark.parametrize(("flag", "code"), [("--fail-on-unused", 3), ("--allow-unused", 0)])
def test_fail_on_unused_fails_when_the_cassette_was_never_touched(
    make_proxy: MakeProxy, cassettes: Path, flag: str, code: int, recorded: bool
) -> None:
    if recorded:
        record(make_proxy, "ci", ["one", "two"])
    cassettes.mkdir(exist_ok=True)
    process, url = serve(["--cassettes", str(cassettes), "--cassette", "ci", flag], cassettes)
    assert url.startswith("http://127.0.0.1:")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == code, err
    if code:
        assert "cassette 'ci' was never touched" in err
        assert "1 cassette(s) never touched" in err
        assert ("2 recording(s) went unused" in err) is recorded


def test_a_cassette_set_by_put_and_never_touched_is_reported(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(mode="replay", cassette="first")
    with pytest.raises(openai.UnprocessableEntityError):  # a miss, but it touched the cassette
        ask(proxy.url, "hi", cassette="first")
    assert proxy.put_cassette(cassette="second").status_code == 200
    assert proxy.stats["untouched"] == ["second"]


def test_the_start_up_cassette_is_not_untouched_when_clients_pick_theirs_by_header(
    make_proxy: MakeProxy,
) -> None:
    proxy = make_proxy(mode="replay", cassette="default")
    assert proxy.stats["untouched"] == ["default"]
    with pytest.raises(openai.UnprocessableEntityError):
        ask(proxy.url, "hi", cassette="mine")
    assert proxy.stats["untouched"] == []


# ---------------------------------------------------------------------------- redact


def test_redact_scrubs_every_match_then_verify_passes_and_it_replays_redacted(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="pii")
    assert ask(recorder.url, "mail ann@example.com") == "echo: mail ann@example.com"
    assert "bob@example.com" in ask(recorder.url, "write bob@example.com", stream=True)
    ask(recorder.url, "nothing personal")
    recorder.stop()
    folder = cassettes / "pii"
    assert any(EMAIL.search(text.decode()) for text in files_under(folder).values())

    code, out = cli("redact", "pii", "--pattern", EMAIL.pattern, "--cassettes", str(cassettes))
    assert code == 0, out
    assert "2 re-keyed, 1 unchanged" in out
    assert not any(EMAIL.search(text.decode()) for text in files_under(folder).values())
    assert len(exchange_files(folder)) == 3
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    code, out = cli("verify", "pii", "--cassettes", str(cassettes))
    assert code == 0, out

    fake.stop()  # replay only: the answers come from the redacted files
    replayer = make_proxy(mode="replay", cassette="pii", redact_pattern=(EMAIL.pattern,))
    assert ask(replayer.url, "mail ann@example.com") == "echo: mail [redacted]"
    assert ask(replayer.url, "write bob@example.com", stream=True) == "echo: write [redacted]"
    assert ask(replayer.url, "nothing personal") == "echo: nothing personal"


class Killed(Exception):
    """Stands for a SIGKILL between two file operations."""


class DiesAfter(FileStore):
    """The real store, killed after `steps` writes or deletes."""

    def __init__(self, root: Path, steps: int) -> None:
        super().__init__(root)
        self.steps = steps

    def _step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise Killed

    def write(self, cassette: str, exchange: models.Exchange, fresh: bool = False) -> bool:
        self._step()
        return super().write(cassette, exchange, fresh)

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        self._step()
        super().delete(cassette, key, ordinal)


def test_redact_killed_at_any_step_then_run_again_keeps_each_recording_once(
    make_proxy: MakeProxy, cassettes: Path, tmp_path: Path
) -> None:
    # Odd ones become one request (repeats of it), even ones stay apart: moves, chains, merges.
    questions = [f"ticket {1000 + n}" if n % 2 else f"user{n} ticket {1000 + n}" for n in range(8)]
    record(make_proxy, "c", questions)
    scrubber = Scrubber.build((), [r"\d{4}"])
    rules = Rulebook.build(provider_table({}), ()).for_upstream
    clean = tmp_path / "clean"
    shutil.copytree(cassettes, clean)
    total = 8 * 2  # more file operations than one redact makes
    for steps in range(total):
        library = tmp_path / f"killed-{steps}"
        shutil.copytree(clean, library)
        with contextlib.suppress(Killed):
            redact(DiesAfter(library, steps), "c", scrubber, rules)
        code, out = cli("redact", "c", "--pattern", r"\d{4}", "--cassettes", str(library))
        assert code == 0, out
        assert seqs(library / "c") == list(range(8)), f"killed after {steps} step(s)"
        assert cli("verify", "c", "--cassettes", str(library))[0] == 0


def test_redact_scrubs_a_match_split_across_stream_frames(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="pii")
    assert ask(recorder.url, "call John Smith", stream=True) == "echo: call John Smith"
    recorder.stop()  # the answer streams " John" and " Smith" in two frames
    code, out = cli("redact", "pii", "--pattern", "John Smith", "--cassettes", str(cassettes))
    assert code == 0, out
    [name] = exchange_files(cassettes / "pii")  # re-keyed: the request was scrubbed
    text = (cassettes / "pii" / name).read_text()
    assert "John" not in text and "Smith" not in text
    assert cli("verify", "pii", "--cassettes", str(cassettes))[0] == 0
    replayer = make_proxy(mode="replay", cassette="pii", redact_pattern=("John Smith",))
    assert ask(replayer.url, "call John Smith", stream=True) == "echo: call [redacted]"


def test_record_time_redaction_scrubs_the_path_and_query_values_and_keys_by_them(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    tool = {"search": fake.url}
    rules = {"redact_pattern": (EMAIL.pattern,), "upstream": tool}
    recorder = make_proxy(mode="record", cassette="pii", **rules)
    for url in ("/search/v1/users/ann@example.com", "/search/v1/find?q=bob@example.com"):
        answer = httpx.get(recorder.url + url)
        assert answer.status_code == 200 and "@example.com" in answer.text, "upstream got it"
    recorder.stop()
    stored = files_under(cassettes / "pii")
    assert len(stored) == 2
    assert not any(EMAIL.search(text.decode()) for text in stored.values())
    fake.stop()
    replayer = make_proxy(mode="replay", cassette="pii", **rules)
    assert httpx.get(replayer.url + "/search/v1/users/cy@example.com").status_code == 200
    assert httpx.get(replayer.url + "/search/v1/find?q=dee@example.com").status_code == 200


def test_redact_a_field_keeps_a_json_answer_valid(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    record(make_proxy, "pii", ["my secret plan"])
    code, out = cli(
        "redact",
        "pii",
        "--field",
        "choices[*].message.content",
        "--field",
        "messages[*].content",
        "--cassettes",
        str(cassettes),
    )
    assert code == 0, out
    [stored] = [json.loads(text) for text in files_under(cassettes / "pii").values()]
    assert stored["request"]["body"]["json"]["messages"][0]["content"] == "[redacted]"
    assert stored["response"]["body"]["json"]["choices"][0]["message"]["content"] == "[redacted]"
    assert "secret plan" not in json.dumps(stored)
    fake.stop()
    replayer = make_proxy(mode="replay", cassette="pii", redact_field=("messages[*].content",))
    assert ask(replayer.url, "another plan altogether") == "[redacted]"


def test_redact_refuses_bad_rules_and_nothing_to_do(make_proxy: MakeProxy, cassettes: Path) -> None:
    record(make_proxy, "pii", ["hi"])
    before = files_under(cassettes)
    where = ["--cassettes", str(cassettes)]
    code, out = cli("redact", "pii", "--pattern", "([a-z", *where)
    assert code == 2 and "not a valid regular expression" in out
    code, out = cli("redact", "pii", "--field", "a..b", *where)
    assert code == 2 and "empty segment" in out
    code, out = cli("redact", "pii", "--keep", "all", *where)
    assert code == 2 and "nothing to redact" in out
    code, out = cli("redact", "pii", "--keep", "stripe", *where)
    assert code == 2 and "no key format named 'stripe'" in out
    assert files_under(cassettes) == before


def test_redact_rules_in_the_config_apply_at_record_time(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="pii", redact_pattern=(EMAIL.pattern,))
    live = ask(recorder.url, "mail ann@example.com")
    streamed = ask(recorder.url, "write bob@example.com", stream=True)
    recorder.stop()
    assert live == "echo: mail ann@example.com", "the live answer reaches the client as it came"
    assert "bob@example.com" in streamed
    assert not any(EMAIL.search(text.decode()) for text in files_under(cassettes).values())
    assert cli("verify", "pii", "--cassettes", str(cassettes))[0] == 0
    fake.stop()
    replayer = make_proxy(mode="replay", cassette="pii", redact_pattern=(EMAIL.pattern,))
    assert ask(replayer.url, "mail ann@example.com") == "echo: mail [redacted]"


# ------------------------------------------------------------------------- re-record


def test_a_re_record_in_another_order_leaves_every_file_byte_identical(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    questions = [f"question {n}" for n in range(6)]
    record(make_proxy, "order", questions)
    before = files_under(cassettes)
    record(make_proxy, "order", questions[::-1])
    assert files_under(cassettes) == before
    record(make_proxy, "order", questions[3:] + questions[:3])
    assert files_under(cassettes) == before


# ---------------------------------------------------------------------------- schema


def test_the_version_1_fixture_loads_and_verify_passes(tmp_path: Path) -> None:
    root = tmp_path / "cassettes"
    (root / "v1").mkdir(parents=True)
    [fixture] = (FIXTURES / "schema_v1").glob("*.json")
    (root / "v1" / fixture.name).write_bytes(fixture.read_bytes())
    assert json.loads(fixture.read_text())["schema_version"] == 1
    code, out = cli("verify", "v1", "--cassettes", str(root))
    assert code == 0 and "ok" in out and "older schema_version" not in out


# `verify --upgrade` (a version-1 file holding a large string, rewritten with its blob):
# tests/e2e/test_blobs.py.


def test_a_file_of_a_newer_tapeproxy_is_refused_with_a_line_saying_to_upgrade(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cassettes"
    (root / "v9").mkdir(parents=True)
    [fixture] = (FIXTURES / "schema_v1").glob("*.json")
    data = {**json.loads(fixture.read_text()), "schema_version": 9}
    (root / "v9" / fixture.name).write_text(json.dumps(data))
    code, out = cli("verify", "v9", "--cassettes", str(root))
    assert code == 1
    assert "written by a newer tapeproxy" in out and "upgrade tapeproxy" in out
