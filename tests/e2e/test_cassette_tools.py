"""`tapeproxy ls`, `show` and `verify` on a real recorded library."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import copy_committed, files_under

runner = CliRunner()


def library(tmp_path: Path) -> Path:
    root = tmp_path / "cassettes"
    copy_committed("example", root)
    copy_committed("example", root, "suite/copy")
    return root


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_ls_lists_every_cassette_with_exchanges_and_tokens(tmp_path: Path) -> None:
    root = library(tmp_path)
    code, out = run("ls", "--cassettes", str(root), "--json")
    assert code == 0
    listed = {c["cassette"]: c for c in json.loads(out)}
    assert set(listed) == {"example", "suite/copy"}
    assert listed["example"]["exchanges"] == 3 and listed["example"]["streams"] == 2
    assert listed["example"]["output_tokens"] > 0


def test_show_lists_exchanges_in_recorded_order(tmp_path: Path) -> None:
    code, out = run("show", "example", "--cassettes", str(library(tmp_path)), "--json")
    assert code == 0
    rows = json.loads(out)["exchanges"]
    assert [r["seq"] for r in rows] == [0, 1, 2]
    assert rows[2]["request"] == "POST anthropic /v1/messages"
    assert rows[2]["kind"].startswith("sse: ")
    code, out = run("show", "nope", "--cassettes", str(tmp_path))
    assert code == 2 and "no recordings" in out


def test_verify_passes_a_sound_library_and_names_each_problem(tmp_path: Path) -> None:
    root = library(tmp_path)
    assert run("verify", "--cassettes", str(root))[0] == 0
    folder = root / "example"
    first, second, third = sorted(folder.glob("*.json"))
    first.write_text(first.read_text()[:50])
    edited = json.loads(second.read_text())
    edited["request"]["body"]["json"]["model"] = "gpt-edited"
    second.write_text(json.dumps(edited))
    third.rename(folder / ("0" * 64 + ".json"))
    (folder / ".x.json.abc.tmp").write_text("{")
    code, out = run("verify", "example", "--cassettes", str(root), "--json")
    assert code == 1
    [verdict] = json.loads(out)
    problems = {p["file"]: p["problem"] for p in verdict["problems"]}
    assert problems[first.name].startswith("unreadable")
    assert "does not hash to its key" in problems[second.name]
    assert "renamed by hand" in problems["0" * 64 + ".json"]
    assert "interrupted write" in verdict["warnings"][0]["problem"], "a warning, not a problem"


def test_verify_after_a_rules_change_points_to_rekey(tmp_path: Path) -> None:
    root = library(tmp_path)
    code, out = run("verify", "example", "--cassettes", str(root), "--ignore", "openai:body:model")
    assert code == 1 and "tapeproxy rekey" in out
    rekeyed = run("rekey", "example", "--cassettes", str(root), "--ignore", "openai:body:model")
    assert rekeyed[0] == 0
    assert (
        run("verify", "example", "--cassettes", str(root), "--ignore", "openai:body:model")[0] == 0
    )


def test_verify_of_an_empty_or_mistyped_library_fails_instead_of_passing(tmp_path: Path) -> None:
    code, out = run("verify", "--cassettes", str(tmp_path / "typo"))
    assert code == 2 and "no cassettes" in out


def test_rekey_without_serves_upstream_option_still_applies_star_rules_to_it(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    served = {"upstream": {"search": fake.url}, "ignore": ("*:query:ts",)}
    recorder = make_proxy(mode="record", **served)
    assert httpx.get(recorder.url + "/search/find?q=a&ts=1").status_code == 200
    recorder.stop()
    before = files_under(cassettes)
    # the cassette tools are run without --upstream search=...
    assert run("verify", "--cassettes", str(cassettes), "--ignore", "*:query:ts")[0] == 0
    code, out = run(
        "rekey", "default", "--cassettes", str(cassettes), "--ignore", "*:query:ts", "--json"
    )
    assert code == 0 and json.loads(out)["moved"] == []
    assert files_under(cassettes) == before
    replayer = make_proxy(mode="replay", **served)
    assert httpx.get(replayer.url + "/search/find?q=a&ts=2").status_code == 200


def test_rekey_names_the_recordings_a_new_key_header_leaves_behind(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(
        recorder.url + "/openai/v1/chat/completions", json=body, headers={"x-tenant": "acme"}
    )
    recorder.stop()
    [name] = files_under(cassettes)
    rule = ["--ignore", "openai:key-header:x-tenant"]
    code, out = run("rekey", "default", "--cassettes", str(cassettes), *rule, "--dry-run")
    assert code == 0 and "x-tenant" in out and "Record them" in out
    code, out = run("rekey", "default", "--cassettes", str(cassettes), *rule, "--json")
    [unstored] = json.loads(out)["unstored"]
    assert unstored == {"file": name.split("/")[-1], "headers": ["x-tenant"]}
    again = json.loads(run("rekey", "default", "--cassettes", str(cassettes), *rule, "--json")[1])
    assert again["unstored"] == [unstored], "still named until it is recorded again"


def test_verify_names_recordings_that_lack_a_header_todays_rules_key_on(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    sent = httpx.post(
        recorder.url + "/openai/v1/embeddings",
        json={"model": "m", "input": "x"},
        headers={"x-tenant": "acme"},
    )
    assert sent.status_code == 200
    recorder.stop()
    assert run("verify", "--cassettes", str(cassettes))[0] == 0
    code, out = run(
        "verify",
        "default",
        "--cassettes",
        str(cassettes),
        "--ignore",
        "openai:key-header:x-tenant",
        "--json",
    )
    assert code == 1
    [problem] = json.loads(out)[0]["problems"]
    assert "x-tenant" in problem["problem"] and "record it again" in problem["problem"]


@pytest.mark.parametrize("odd", [".02.json", ".1.json"])
def test_verify_flags_an_exchange_file_name_tapeproxy_does_not_read(
    tmp_path: Path, odd: str
) -> None:
    root = library(tmp_path)
    first = sorted((root / "example").glob("*.json"))[0]
    shutil.copy(first, first.with_name(first.name.removesuffix(".json") + odd))
    code, out = run("verify", "example", "--cassettes", str(root), "--json")
    assert code == 1
    [problem] = json.loads(out)[0]["problems"]
    assert problem["file"].endswith(odd) and "not a name tapeproxy reads" in problem["problem"]
    assert run("rekey", "example", "--cassettes", str(root), "--dry-run")[0] == 0


@pytest.mark.parametrize(
    "command",
    [("ls",), ("show", "example"), ("verify",), ("verify", "example"), ("rekey", "example")],
)
def test_every_tool_refuses_a_library_folder_that_is_not_there(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    missing = tmp_path / "typo"
    code, out = run(*command, "--cassettes", str(missing))
    assert code == 2, out
    assert f"no cassette library at {missing}" in out
    assert "--cassettes / TAPEPROXY_CASSETTES" in out
    assert not missing.exists(), "looking did not create it"


@pytest.mark.parametrize("command", [("ls",), ("show", "example"), ("diff", "a", "b")])
def test_every_tool_refuses_a_library_no_backend_opens_in_one_line(
    command: tuple[str, ...],
) -> None:
    code, out = run(*command, "--cassettes", "nosuch://bucket/tapes", "--json")
    assert code == 2, out
    message = json.loads(out)["error"]["message"]
    assert "\n" not in message and "nosuch://bucket/tapes" in message and "file://" in message


def test_ls_of_an_empty_library_says_so_and_passes(tmp_path: Path) -> None:
    code, out = run("ls", "--cassettes", str(tmp_path))
    assert code == 0 and "no cassettes yet" in out
    code, out = run("ls", "--cassettes", str(tmp_path), "--json")
    assert code == 0 and json.loads(out) == []


def misnamed_library(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` run on a library holding a folder of recordings copied in by hand under a
    name no cassette may have."""
    root = library(tmp_path)
    shutil.copytree(root / "example", root / "has space")
    return subprocess.run(
        [sys.executable, "-m", "tapeproxy", *command, "--cassettes", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", [("ls", "--json"), ("report", "--json")])
def test_a_folder_no_cassette_may_be_named_is_skipped_with_one_warning(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    done = misnamed_library(tmp_path, *command)
    root = tmp_path / "cassettes"
    assert done.returncode == 0, done.stderr
    [warning] = done.stderr.splitlines()
    assert warning.startswith(f"skipped {root}/has space: cassette name 'has space' is not")
    assert warning.endswith("rename the folder to use it")
    assert "example" in done.stdout and "suite/copy" in done.stdout
    assert "has space" not in done.stdout


def test_verify_flags_a_folder_no_cassette_may_be_named_and_checks_the_rest(
    tmp_path: Path,
) -> None:
    done = misnamed_library(tmp_path, "verify", "--json")
    assert done.returncode == 1, done.stderr
    verdicts = {v["cassette"]: v for v in json.loads(done.stdout)}
    assert verdicts["example"]["problems"] == [] and verdicts["example"]["checked"] == 3
    [problem] = verdicts["has space"]["problems"]
    assert "is not allowed" in problem["problem"] and "rename the folder" in problem["problem"]
    assert done.stderr == ""


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in a forked child


def _as_a_user() -> None:
    """In a child, before it runs: root gives up reading any folder (CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH leave its bounding set), as tapeproxy run as a user has none."""
    if os.geteuid() == 0:
        for cap in (1, 2):
            if _PRCTL(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def as_a_user(*command: str) -> subprocess.CompletedProcess[str]:
    """`python -m COMMAND`, with `_as_a_user`."""
    return subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_as_a_user,  # a syscall only: safe in a child forked from threads
    )


@pytest.mark.parametrize("command", [("verify", "--json"), ("ls", "--json")])
def test_a_cassette_folder_that_cannot_be_listed_is_named_not_passed_over(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    root = library(tmp_path)
    locked = root / "suite" / "copy"
    probe = tmp_path / "probe.json"
    probe.write_text("{}")
    probe.chmod(0o000)
    if "Permission denied" not in as_a_user("json.tool", str(probe)).stderr:
        pytest.skip("this root cannot give up reading any file")
    locked.chmod(0o000)
    try:
        done = as_a_user("tapeproxy", *command, "--cassettes", str(root))
    finally:
        locked.chmod(0o755)
    why = f"cannot list {locked}: Permission denied; its recordings are left out"
    if command[0] == "verify":
        assert done.returncode == 1, done.stdout + done.stderr
        verdicts = {v["cassette"]: v for v in json.loads(done.stdout)}
        assert verdicts["example"]["problems"] == []
        [problem] = verdicts["suite/copy"]["problems"]
        assert problem["problem"] == why
    else:
        assert done.returncode == 0, done.stderr
        assert [c["name"] for c in json.loads(done.stdout)] == ["example"]
        assert done.stderr.splitlines() == [f"skipped {why}"]
