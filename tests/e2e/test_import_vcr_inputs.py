"""`tapeproxy import vcr` on what else VCR.py cassettes hold: the JSON serializer and
decode_compressed_response (recorded by vcrpy itself), older layouts, `!!binary` and br
bodies, secrets; and on bad input: each skipped with why, the rest imported."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import brotli  # type: ignore[import-untyped]
import httpx
import pytest
import vcr  # type: ignore[import-untyped]
import yaml
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.store.files import FileStore
from tapeproxy.store.protocol import parse_exchange_file
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, files_under

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["import", "vcr", *args])
    return result.exit_code, result.output


def exchanges(folder: Path) -> list[dict[str, Any]]:
    """A cassette's recordings as their files hold them, large strings joined from blobs."""
    store = FileStore(folder.parent)
    names = [parse_exchange_file(path.name) for path in sorted(folder.glob("*.json"))]
    return [store.read(folder.name, *name).record() for name in names if name]


def interaction(uri: str, body: object, answer: object, **headers: list[str]) -> dict[str, Any]:
    return {
        "request": {
            "method": "POST",
            "uri": uri,
            "body": body,
            "headers": {"Content-Type": ["application/json"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"], **headers},
            "body": {"string": answer},
        },
    }


def test_json_serializer_with_decoded_answers_imports_as_the_yaml_one(tmp_path: Path) -> None:
    """vcrpy itself, recording httpx against the fake (gzip answers): once as YAML with the
    answer kept compressed, once as JSON with decode_compressed_response on."""
    with FakeUpstream(gzip=True) as fake:
        for name, options in (
            ("as_yaml.yaml", {}),
            ("as_json.json", {"serializer": "json", "decode_compressed_response": True}),
        ):
            with vcr.VCR(**options).use_cassette(str(tmp_path / "vcr" / name)):
                answer = httpx.post(fake.url + "/v1/chat/completions", json=CHAT)
                assert answer.json()["object"] == "chat.completion"
    saved = json.loads((tmp_path / "vcr" / "as_json.json").read_text())
    assert isinstance(saved["interactions"][0]["response"]["body"]["string"], str)
    code, output = run(
        str(tmp_path / "vcr"),
        "--cassettes",
        str(tmp_path / "lib"),
        "--upstream",
        f"openai={fake.url}",
    )
    assert code == 0, output
    from_json, from_yaml = (
        exchanges(tmp_path / "lib" / "as_json"),
        exchanges(tmp_path / "lib" / "as_yaml"),
    )
    assert from_json == from_yaml and len(from_json) == 1
    assert from_json[0]["response"]["body"]["json"]["object"] == "chat.completion"


def test_older_layouts_binary_and_brotli_bodies_import(tmp_path: Path) -> None:
    """The bare list of vcrpy before 1.0 (protocol, host, port, path), a request body as
    `!!binary`, answers br- and gzip-encoded and kept compressed."""
    answer = json.dumps({"ok": True}).encode()
    old = [
        {
            "request": {
                "method": "POST",
                "protocol": "https",
                "host": "api.openai.com",
                "port": 443,
                "path": "/v1/embeddings",
                "body": json.dumps(CHAT).encode(),  # dumped by yaml as !!binary
                "headers": {"content-type": "application/json"},
            },
            "response": {
                "status": {"code": 200, "message": "OK"},
                "headers": {"content-type": ["application/json"], "content-encoding": ["br"]},
                "body": {"string": brotli.compress(answer)},
            },
        }
    ]
    text = yaml.safe_dump(old)
    assert "!!binary" in text
    (tmp_path / "old.yaml").write_text(text)
    packed = interaction(
        "https://api.anthropic.com/v1/messages",
        json.dumps(CHAT),
        gzip.compress(answer),
        **{"Content-Encoding": ["gzip"]},
    )
    (tmp_path / "packed.yaml").write_text(yaml.safe_dump({"interactions": [packed], "version": 1}))
    code, output = run(
        str(tmp_path / "old.yaml"),
        str(tmp_path / "packed.yaml"),
        "--cassettes",
        str(tmp_path / "lib"),
    )
    assert code == 0, output
    (old_one,) = exchanges(tmp_path / "lib" / "old")
    (packed_one,) = exchanges(tmp_path / "lib" / "packed")
    assert old_one["request"]["upstream"] == "openai"
    assert old_one["request"]["body"] == {"json": CHAT}
    assert packed_one["request"]["upstream"] == "anthropic"
    for one in (old_one, packed_one):
        assert one["response"]["body"]["json"] == {"ok": True}
        assert "content-encoding" not in one["response"]["headers"]


def test_credentials_and_keys_in_bodies_are_not_written(tmp_path: Path) -> None:
    key = "sk-proj-" + "Ab3" * 16  # a well-known key format, built here
    item = interaction(
        "https://api.openai.com/v1/chat/completions",
        json.dumps({**CHAT, "messages": [{"role": "user", "content": f"my key is {key}"}]}),
        json.dumps({"echo": key}),
    )
    item["request"]["headers"]["Authorization"] = [f"Bearer {SECRET_OPENAI}"]
    (tmp_path / "secret.yaml").write_text(yaml.safe_dump({"interactions": [item], "version": 1}))
    code, output = run(str(tmp_path / "secret.yaml"), "--cassettes", str(tmp_path / "lib"))
    assert code == 0, output
    written = files_under(tmp_path / "lib")
    assert len(written) == 1
    for data in written.values():
        assert SECRET_OPENAI.encode() not in data and key.encode() not in data
        assert b"[redacted]" in data


def test_bad_input_is_skipped_with_why_and_the_rest_imported(tmp_path: Path) -> None:
    good = interaction("https://api.openai.com/v1/embeddings", json.dumps(CHAT), "{}")
    stranger = interaction("https://unknown.example:8443/v1/x", "{}", "{}")
    large = interaction("https://api.openai.com/v1/files", "{}", "x" * 5000)
    packed = gzip.compress(b"x" * 5000)  # small, but over --max-record unpacked
    bomb = interaction(
        "https://api.openai.com/v1/f", "{}", packed, **{"Content-Encoding": ["gzip"]}
    )
    folder = tmp_path / "vcr"
    folder.mkdir()
    (folder / "mixed.yaml").write_text(
        yaml.safe_dump({"interactions": [good, stranger, large, bomb]})
    )
    (folder / "broken.yaml").write_text("interactions: [\n  - {request: ")
    library = str(tmp_path / "lib")
    code, output = run(str(folder), "--cassettes", library, "--max-record", "1000")
    assert code == 1, output
    assert "broken.yaml: skipped: not readable YAML or JSON" in output
    assert "skipped #2: no upstream at https://unknown.example:8443" in output
    assert "skipped #3: its answer is over --max-record (1,000 bytes)" in output
    assert "skipped #4: its answer is gzip-encoded and does not decode within" in output
    assert "cassette 'mixed': 1 written" in output
    assert len(files_under(tmp_path / "lib" / "mixed")) == 1

    # A cassette that holds recordings is refused; --merge adds, keeping every recording.
    before = files_under(tmp_path / "lib")
    again = interaction("https://api.openai.com/v1/embeddings", json.dumps(CHAT), '{"new": 1}')
    (folder / "mixed.yaml").write_text(yaml.safe_dump({"interactions": [good, again]}))
    (folder / "broken.yaml").unlink()
    code, output = run(str(folder), "--cassettes", library)
    assert code == 1 and "already holds 1 recording(s): nothing written" in output, output
    assert files_under(tmp_path / "lib") == before
    code, output = run(str(folder), "--cassettes", library, "--merge")
    assert code == 0 and "1 written, 1 already there" in output, output
    after = files_under(tmp_path / "lib")
    assert set(before) < set(after) and all(after[name] == data for name, data in before.items())


def test_json_output_says_per_file_what_was_imported_and_skipped(tmp_path: Path) -> None:
    good = interaction("https://api.openai.com/v1/embeddings", json.dumps(CHAT), "{}")
    stranger = interaction("https://unknown.example/v1/x", "{}", "{}")
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({"interactions": [good, stranger]}))
    code, output = run(str(tmp_path / "one.yaml"), "--cassettes", str(tmp_path / "lib"), "--json")
    assert code == 1
    report = json.loads(output)
    (one,) = report["files"]
    assert (one["cassette"], one["exchanges"], one["error"]) == ("one", 1, None)
    assert one["skipped"] == [
        "#2: no upstream at https://unknown.example: give --upstream "
        "NAME=https://unknown.example (NAME as the client's base URL names it: "
        "http://HOST:PORT/NAME/...)"
    ]
    (cassette,) = report["cassettes"]
    assert cassette["cassette"] == "one" and len(cassette["written"]) == 1


def test_a_stream_imports_as_frames_the_same_every_time(tmp_path: Path) -> None:
    """An SSE answer becomes its frames, each at 0 ms (no clock ran), so importing the same
    file again gives the same bytes: no diff in git."""
    events = [{"choices": [{"delta": {"content": word}}]} for word in ("Par", "is")]
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    item = interaction(
        "https://api.openai.com/v1/chat/completions",
        json.dumps({**CHAT, "stream": True}),
        sse,
        **{"Content-Type": ["text/event-stream"]},
    )
    (tmp_path / "stream.yaml").write_text(yaml.safe_dump({"interactions": [item]}))
    for library in ("one", "two"):
        code, output = run(str(tmp_path / "stream.yaml"), "--cassettes", str(tmp_path / library))
        assert code == 0, output
    assert files_under(tmp_path / "one") == files_under(tmp_path / "two")
    (stream,) = exchanges(tmp_path / "one" / "stream")
    frames = stream["response"]["frames"]
    assert [f["text"] for f in frames] == sse.replace("\n\n", "\n\n\0").split("\0")[:-1]
    assert {f["ms"] for f in frames} == {0} and stream["outcome"] == "complete"


def test_an_answer_past_the_spool_is_written_in_pieces_whole(tmp_path: Path) -> None:
    """An answer over 1 MiB goes through the recording's spool and is written piece by
    piece, as a live one is: a long stream and a long JSON body come out whole."""
    words = [f"word{n} " for n in range(60_000)]
    events = [{"choices": [{"delta": {"content": word}}]} for word in words]
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    long_json = json.dumps({"data": words})
    assert len(sse) > 2**21 and len(long_json) > 2**19
    stream = interaction(
        "https://api.openai.com/v1/chat/completions",
        json.dumps({**CHAT, "stream": True}),
        sse,
        **{"Content-Type": ["text/event-stream"]},
    )
    body = interaction("https://api.openai.com/v1/embeddings", "{}", long_json * 3)
    (tmp_path / "long.yaml").write_text(yaml.safe_dump({"interactions": [stream, body]}))
    code, output = run(str(tmp_path / "long.yaml"), "--cassettes", str(tmp_path / "lib"))
    assert code == 0, output
    by_path = {e["request"]["path"]: e for e in exchanges(tmp_path / "lib" / "long")}
    frames = by_path["/v1/chat/completions"]["response"]["frames"]
    assert "".join(f["text"] for f in frames) == sse and len(frames) == len(words) + 1
    assert by_path["/v1/embeddings"]["response"]["body"] == {"text": long_json * 3}


def test_a_file_that_explodes_or_nests_without_end_is_skipped(tmp_path: Path) -> None:
    """A billion laughs (a few lines of anchors naming one list 9**8 times: some 200 MB once
    written out), an alias to the list it is in, and JSON nested past Python's recursion:
    each file skipped with why, at once, and the good one beside them imported."""
    levels = ['l0: &l0 ["lolol", "lolol", "lolol", "lolol", "lolol", "lolol", "lolol", "lolol"]']
    levels += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 9)]
    item = interaction("https://api.openai.com/v1/embeddings", "{}", "{}")
    laughs = yaml.safe_dump({"interactions": [item]}).replace(
        "Content-Type:", "X-Laughs: *l8\n      Content-Type:", 1
    )
    assert "X-Laughs: *l8" in laughs
    (tmp_path / "laughs.yaml").write_text("\n".join(levels) + "\n" + laughs)
    (tmp_path / "itself.yaml").write_text("interactions: &all [*all]\n")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "good.yaml").write_text(yaml.safe_dump({"interactions": [item]}))
    code, output = run(str(tmp_path), "--cassettes", str(tmp_path / "lib"))
    assert code == 1, output
    assert "laughs.yaml: skipped: its aliases, written out, make it over 134,217,728" in output
    assert "itself.yaml: skipped: it holds itself" in output
    assert "deep.json: skipped: not readable JSON: it nests too deeply" in output
    assert "cassette 'good': 1 written" in output
    written = files_under(tmp_path / "lib")
    assert written and all(name.startswith("good/") for name in written), written


def test_a_folder_of_long_answers_imports_within_a_few_open_files(tmp_path: Path) -> None:
    """Each cassette is written as its file is read: an answer over 1 MiB waits in a scratch
    file until it is written, so holding every file's until the end ran out of open files
    (macOS allows 256): here 20 such cassettes in a process allowed 12."""
    long_answer = json.dumps({"data": "x" * (2**20 + 100)})
    for n in range(20):
        item = interaction(
            "https://api.openai.com/v1/embeddings", json.dumps({"n": n}), long_answer
        )
        (tmp_path / "vcr" / f"c{n:02}.yaml").parent.mkdir(exist_ok=True)
        (tmp_path / "vcr" / f"c{n:02}.yaml").write_text(yaml.safe_dump({"interactions": [item]}))

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (12, 12))

    command = [sys.executable, "-m", "tapeproxy", "import", "vcr", str(tmp_path / "vcr")]
    done = subprocess.run(
        [*command, "--cassettes", str(tmp_path / "lib")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=few_files,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": 1 written") == 20
    for n in range(20):
        (one,) = exchanges(tmp_path / "lib" / f"c{n:02}")
        assert one["response"]["body"] == {"text": long_answer}  # as a recording spools it


def test_a_status_no_server_could_send_back_is_skipped(tmp_path: Path) -> None:
    """0, 99, 1000, a 1xx or `true` (a bool is an int to Python) as a status: replay could
    not answer with it (the server hung up), so it is skipped with why, not written."""
    items = []
    for number, code in enumerate([0, 99, 1000, 101, True, 503]):
        item = interaction(f"https://api.openai.com/v1/s{number}", "{}", "{}")
        item["response"]["status"]["code"] = code
        items.append(item)
    (tmp_path / "codes.yaml").write_text(yaml.safe_dump({"interactions": items}))
    code, output = run(str(tmp_path / "codes.yaml"), "--cassettes", str(tmp_path / "lib"))
    assert code == 1, output
    for number, status in enumerate(["0", "99", "1000", "101", "True"], start=1):
        assert f"skipped #{number}: its status {status} is no HTTP answer's" in output
    (kept,) = exchanges(tmp_path / "lib" / "codes")
    assert kept["response"]["status"] == 503


def test_answer_headers_no_server_could_send_are_skipped_or_split(
    make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """An answer header with a line break in it (a header smuggled in, or values joined as
    Firefox joins Set-Cookie) comes back as one value per line; a NUL, a character beyond
    latin-1 or a name with a space in it skips its interaction, saying why. Before, each was
    written, and replay hung up without an answer."""
    cases = [
        ("x-joined", "one\r\nInjected: 1"),
        ("x-euro", "\u20acuro"),
        ("x-nul", "a\x00b"),
        ("bad name", "1"),
    ]
    items = []
    for number, (name, value) in enumerate(cases):
        item = interaction(f"https://api.openai.com/v1/h{number}", "{}", '{"n": 1}')
        item["response"]["headers"][name] = [value]
        items.append(item)
    (tmp_path / "headers.yaml").write_text(yaml.safe_dump({"interactions": items}))
    library = tmp_path / "lib"
    code, output = run(str(tmp_path / "headers.yaml"), "--cassettes", str(library))
    assert code == 1, output
    assert "skipped #2: its answer's x-euro header holds '\u20acuro', which no server" in output
    assert "skipped #3: its answer's x-nul header holds 'a\\x00b', which no server" in output
    assert "skipped #4: its answer has a header named 'bad name', which is no HTTP" in output
    proxy = make_proxy(mode="replay", cassettes=library, cassette="headers")
    answer = httpx.post(proxy.url + "/openai/v1/h0", content=b"{}")
    assert answer.json() == {"n": 1}
    assert answer.headers.get_list("x-joined") == ["one", "Injected: 1"]
    assert "injected" not in answer.headers


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_file_with_no_end_is_read_no_further_than_the_bound(tmp_path: Path) -> None:
    """/dev/zero (a file whose size says 0, as a pipe's does) is read up to the 128 MiB an
    import reads, then skipped: before, it was read until memory ran out."""

    def bounded_memory() -> None:  # what it took before, capped: a MemoryError, not a host
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    command = [sys.executable, "-m", "tapeproxy", "import", "vcr", "/dev/zero"]
    done = subprocess.run(
        [*command, "--cassettes", str(tmp_path / "lib")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=bounded_memory,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "/dev/zero: skipped: the file is over the 134,217,728 bytes" in done.stdout
