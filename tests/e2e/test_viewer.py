"""The cassette viewer over HTTP, without a browser: `tapeproxy view` in its own process (its
pages, headers, escaping, images, bad input), and the page a running server shows at
/__tapeproxy/ui/ (its misses, its refresh stamp, the admin-token rules off loopback).
tests/e2e/test_viewer_browser.py looks at the same pages in Chromium."""

from __future__ import annotations

import html
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from tapeproxy.app import create_app
from tapeproxy.settings import Settings
from tests.conftest import MakeProxy
from tests.support import files_under
from tests.support.serve import ROOT, TAPEPROXY, Serve
from tests.support.viewer import IMAGE_FILE, OPENAI, PNG, SVG, View, make_library

POLICY = "default-src 'self'"
TOKEN = "an-admin-token-0123456789"


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[View]:
    tmp = tmp_path_factory.mktemp("viewer")
    library = make_library(tmp)
    shutil.copytree(library / "example", library / "has space")  # no cassette's name: skipped
    before = files_under(library)
    started = View(library, tmp)
    assert started.url.startswith("http://127.0.0.1:"), started.ready
    yield started
    code, err = started.stop()
    assert code == 0, err
    # Read-only: no cassette is written (the summary cache is kept in the state folder).
    assert files_under(library) == before


def test_every_page_is_html_under_the_content_security_policy(view: View) -> None:
    pages = [
        "",
        "cassette?name=examples/python-agent",
        f"exchange?cassette=example&file={OPENAI}",
        "diff?a=example&b=example-xss",
        "misses",
        "static/viewer.css",
        "cassette?name=nothing-here",
    ]
    for page in pages:
        answer = httpx.get(view.url + page)
        assert answer.headers["content-security-policy"] == POLICY, page
        assert answer.headers["x-content-type-options"] == "nosniff", page
    assert "examples/vercel-agent" in httpx.get(view.url).text
    page = httpx.get(view.url).text
    assert (
        "cassette?name=has" not in page
        and "<code>has space</code>" in page.split('id="skipped"')[1]
    )
    assert "<script" not in httpx.get(view.url).text.replace(
        '<script src="static/viewer.js" defer></script>', ""
    )


def test_a_recorded_answer_is_text_on_the_page_and_in_the_diff(view: View) -> None:
    page = httpx.get(view.url + f"exchange?cassette=example-xss&file={OPENAI}").text
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;" in page
    assert "<img src=x" not in page and "<script>window" not in page
    diff = httpx.get(view.url + "diff?a=example&b=example-xss").text
    assert "response.body.choices[0].message.content" in diff
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in diff and "<script>w" not in diff


def test_a_stream_shows_its_text_and_its_frames_on_a_timeline(view: View) -> None:
    stream = "647e5e97ad35a8315c4878ea4e2f9def8c2a1b7495744b897e9ad8c4a157561b.json"
    page = httpx.get(view.url + f"exchange?cassette=example&file={stream}").text
    assert "Stream: 13 frames over 3 ms" in page
    assert page.count("<progress max=") == 13
    assert "echo: What is the capital of France?" in page.split('id="answer"')[1]


def test_an_inline_image_is_served_from_the_page_and_a_remote_one_is_not_loaded(
    view: View,
) -> None:
    page = httpx.get(view.url + f"exchange?cassette=example-xss&file={IMAGE_FILE}").text
    assert 'src="image?cassette=example-xss&amp;file=' + IMAGE_FILE + '&amp;n=0"' in page
    assert "https://example.com/cat.png" in page and 'src="https://' not in page
    image = httpx.get(view.url + "image", params={"cassette": "example-xss", "file": IMAGE_FILE})
    assert image.status_code == 404  # no index
    image = httpx.get(
        view.url + "image", params={"cassette": "example-xss", "file": IMAGE_FILE, "n": "0"}
    )
    assert (image.status_code, image.headers["content-type"], image.content) == (
        200,
        "image/png",
        PNG,
    )


def test_an_svg_image_is_served_under_a_policy_that_runs_no_script(view: View) -> None:
    page = httpx.get(view.url + f"exchange?cassette=example-xss&file={IMAGE_FILE}").text
    assert 'alt="image 1 (image/svg+xml)" src="image?cassette=example-xss&amp;file=' in page
    image = httpx.get(
        view.url + "image", params={"cassette": "example-xss", "file": IMAGE_FILE, "n": "1"}
    )
    assert (image.status_code, image.headers["content-type"], image.content) == (
        200,
        "image/svg+xml",
        SVG,
    )
    # Its own policy, in place of the pages' (which would let a same-origin script run):
    # opened as a document of its own (the thumbnail's link), it runs no script and is
    # sandboxed into an origin of its own.
    [policy] = image.headers.get_list("content-security-policy")
    directives = {d.split()[0]: d.split()[1:] for d in policy.split("; ")}
    assert directives["default-src"] == ["'none'"] and directives["script-src"] == ["'none'"]
    assert "sandbox" in directives
    assert image.headers["x-content-type-options"] == "nosniff"


def test_bad_input_is_a_404_page_with_one_clear_line(view: View) -> None:
    for page, said in [
        ("cassette?name=../etc", "is not allowed"),
        ("cassette?name=nothing-here", "has no recordings"),
        ("exchange?cassette=example&file=x.json", "is not the name of an exchange file"),
        ("exchange?cassette=example&file=" + "b" * 64 + ".json", "holds no exchange file"),
        ("diff?a=example", "needs the query parameter 'b'"),
    ]:
        answer = httpx.get(view.url + page)
        assert answer.status_code == 404, page
        assert said in html.unescape(answer.text), page


def test_an_unreadable_file_is_a_row_saying_why_not_made_up_numbers(tmp_path: Path) -> None:
    library = tmp_path / "cassettes"
    shutil.copytree(ROOT / "cassettes" / "example", library / "example")
    edited = sorted((library / "example").glob("*.json"))[0]
    data = json.loads(edited.read_text())
    data["response"]["status"] = "two hundred"
    edited.write_text(json.dumps(data))
    view = View(library, tmp_path)
    try:
        page = html.unescape(httpx.get(view.url + "cassette?name=example").text)
    finally:
        view.stop()
    row = next(line for line in page.split("<tr") if edited.name in line)
    assert "unreadable: response.status: Input should be a valid integer" in row
    assert ">-1<" not in row and "0/0" not in row


def test_a_folder_named_in_no_encoding_is_shown_skipped_not_a_failed_page(tmp_path: Path) -> None:
    """A folder whose name is no UTF-8 (unzipped from an old archive): the library page
    still answers, naming it skipped, escaped."""
    library = tmp_path / "cassettes"
    shutil.copytree(ROOT / "cassettes" / "example", library / "example")
    shutil.copytree(ROOT / "cassettes" / "example", library / os.fsdecode(b"caf\xe9"))
    view = View(library, tmp_path)
    try:
        answer = httpx.get(view.url)
    finally:
        view.stop()
    assert answer.status_code == 200
    assert "<code>caf\\udce9</code>" in answer.text.split('id="skipped"')[1]


def test_view_refuses_a_missing_library_in_one_line(tmp_path: Path) -> None:
    args = ["view", "--port", "0", "--cassettes", str(tmp_path / "none")]
    done = subprocess.run([*TAPEPROXY, *args], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("tapeproxy: no cassette library at")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_running_server_shows_its_misses_and_moves_its_stamp(
    make_proxy: MakeProxy, cassettes: Path
) -> None:
    shutil.copytree(ROOT / "cassettes" / "example", cassettes / "example")
    proxy = make_proxy(mode="replay", cassette="example")
    ui = proxy.url + "/__tapeproxy/ui/"
    assert httpx.get(proxy.url + "/__tapeproxy/ui").headers["location"] == "/__tapeproxy/ui/"
    assert "No miss since the server started" in httpx.get(ui + "misses").text
    before = httpx.get(ui + "stamp").json()["stamp"]
    asked = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "<b>France</b>?"}]}
    httpx.post(proxy.url + "/openai/v1/chat/completions", json=asked)
    assert httpx.get(ui + "stamp").json()["stamp"] != before
    page = httpx.get(ui + "misses")
    assert page.headers["content-security-policy"] == POLICY
    assert "<mark>body.messages[0].content</mark>" in page.text
    assert "<pre>&lt;b&gt;France&lt;/b&gt;?</pre>" in page.text and "<b>F" not in page.text
    assert f"file={OPENAI}" in page.text  # the closest recording, linked
    assert 'data-poll="stamp"' in httpx.get(ui).text


def test_view_with_server_shows_that_servers_misses(tmp_path: Path) -> None:
    library = make_library(tmp_path)
    server = Serve(["--cassettes", str(library), "--cassette", "example"], tmp_path)
    view = View(library, tmp_path, "--server", server.url + "/")
    try:
        stamp = httpx.get(view.url + "stamp").json()["stamp"]
        asked = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Lyon?"}]}
        httpx.post(server.url + "/openai/v1/chat/completions", json=asked)
        assert httpx.get(view.url + "stamp").json()["stamp"] == stamp + 1
        page = httpx.get(view.url + "misses").text
        assert "<mark>body.messages[0].content</mark>" in page and "Lyon?" in page
        assert 'data-poll="stamp"' in page
    finally:
        server.stop()
    gone = httpx.get(view.url + "misses")
    assert gone.status_code == 404 and "cannot read " + server.url in gone.text
    assert view.stop()[0] == 0
    bad = [*TAPEPROXY, "view", "--cassettes", str(library), "--server", "localhost:8787"]
    done = subprocess.run(bad, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--server" in done.stderr


class OddServer:
    """Not a tapeproxy: answers the control API's two GETs with what `answers` holds (JSON
    of any shape), on 127.0.0.1, until stopped."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers

        class Answer(http.server.BaseHTTPRequestHandler):
            def do_GET(handler) -> None:
                body = json.dumps(answers.get(handler.path, {})).encode()
                handler.send_response(200)
                handler.send_header("content-type", "application/json")
                handler.send_header("content-length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_view_with_a_server_that_answers_oddly_shows_what_fits_and_never_fails(
    tmp_path: Path,
) -> None:
    odd = {
        "cassette": 3,
        "key": None,
        "request": "POST openai /v1/odd",
        "closest": {"file": "x.json", "differences": "not a list"},
    }
    answers: dict[str, object] = {
        "/__tapeproxy/misses": {"misses": ["junk", odd, {"closest": [1], "message": "m2"}]},
        "/__tapeproxy/stats": {"upstream_calls": "many", "replayed": 2, "misses": True},
    }
    remote = OddServer(answers)
    view = View(make_library(tmp_path), tmp_path, "--server", remote.url)
    try:
        page = httpx.get(view.url + "misses")
        assert page.status_code == 200 and "POST openai /v1/odd" in page.text and "m2" in page.text
        assert "x.json" in page.text  # the closest file, with no differences to list
        assert httpx.get(view.url + "stamp").json()["stamp"] == 2  # only the counts that are
        answers["/__tapeproxy/misses"] = ["a list, not an object"]
        page = httpx.get(view.url + "misses")
        assert page.status_code == 404 and "not a tapeproxy server&#39;s answer" in page.text
    finally:
        remote.stop()
        assert view.stop()[0] == 0


def test_off_loopback_the_page_follows_the_admin_token_rules(tmp_path: Path) -> None:
    """The app as a server bound off loopback builds it, asked in-process (no test binds
    anything but loopback)."""
    exposed = {"host": "0.0.0.0", "port": 0, "cassettes": str(make_library(tmp_path))}
    refused = TestClient(create_app(Settings.model_validate(exposed))).get("/__tapeproxy/ui/")
    assert refused.status_code == 403 and "--admin-token" in refused.text
    settings = {**exposed, "admin_token": TOKEN}
    guarded = TestClient(create_app(Settings.model_validate(settings)))
    assert guarded.get("/__tapeproxy/ui/misses").status_code == 401
    allowed = guarded.get("/__tapeproxy/ui/misses", headers={"Authorization": f"Bearer {TOKEN}"})
    assert allowed.status_code == 200 and "Last misses" in allowed.text
    whole = f"/__tapeproxy/ui/text?cassette=example&file={OPENAI}&part=request"
    assert guarded.get(whole).status_code == 401, "a download follows the page's rules"
    allowed = guarded.get(whole, headers={"Authorization": f"Bearer {TOKEN}"})
    assert allowed.status_code == 200 and '"model"' in allowed.text


def test_an_mcp_tool_call_is_shown_as_a_tool_call_with_its_result(view: View) -> None:
    """examples/mcp-agent's tool call: the tool's name and arguments, then its result."""
    call = "e56093c9e307f8b6ce8e2dd733d995c3ec2ce7e71d567c8f6e2ca06280cf73f7.json"
    page = httpx.get(view.url + f"exchange?cassette=examples/mcp-agent&file={call}").text
    asked, answered = page.split('id="answer"')
    assert "tool call</span> <code>get_weather</code>" in asked
    assert "&#34;city&#34;: &#34;Paris&#34;" in asked
    assert "tool result</span> <code>get_weather</code>" in answered
    assert "&#34;forecast&#34;: &#34;sunny&#34;" in answered
    listed = httpx.get(view.url + "cassette?name=examples/mcp-agent").text
    assert "<td>tool get_weather</td>" in listed and "<td>gpt-4o-mini</td>" in listed


def test_a_page_asked_for_another_host_name_is_refused(view: View) -> None:
    """DNS rebinding: a web page elsewhere points its own name at 127.0.0.1 and reads the
    viewer as its own origin. Only a Host of this machine gets a page."""
    port = view.url.split(":")[2].rstrip("/")
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
        refused = httpx.get(view.url, headers={"Host": host})
        assert refused.status_code == 403, host
        assert refused.headers["content-security-policy"] == POLICY
        assert "example" not in refused.text.replace("evil.example", "")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"[::1]:{port}"):
        assert httpx.get(view.url, headers={"Host": host}).status_code == 200, host


def test_a_loopback_servers_page_answers_only_its_own_host_names(tmp_path: Path) -> None:
    settings = {"host": "127.0.0.1", "port": 0, "cassettes": str(make_library(tmp_path))}
    app = create_app(Settings.model_validate(settings))
    assert (
        TestClient(app, base_url="http://evil.example").get("/__tapeproxy/ui/").status_code == 403
    )
    assert TestClient(app, base_url="http://127.0.0.1").get("/__tapeproxy/ui/").status_code == 200
