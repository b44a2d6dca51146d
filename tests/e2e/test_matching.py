"""Matching you can trust: default rules, --ignore, repeat policies, strict order, unused
recordings, partial replay and rekey, through the real server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tapeproxy.errors import ConfigError
from tapeproxy.sources import load_settings
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_OPENAI, files_under

ROOT = Path(__file__).resolve().parents[2]
USER: Any = [{"role": "user", "content": "Plan a trip to Paris"}]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, max_retries=0)


def chat(url: str, **extra: Any) -> str:
    answer = client(url).chat.completions.create(model="gpt-4o-mini", messages=USER, **extra)
    return answer.choices[0].message.content or ""


def embed(url: str, text: str) -> str:
    return client(url).embeddings.create(model="m", input=text).model


def test_a_changed_user_field_still_replays_under_the_default_rules(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    recorded = chat(recorder.url, user="alice", temperature=0.2)
    recorder.stop()
    fake.stop()
    replayer = make_proxy(mode="replay")
    assert chat(replayer.url, user="bob", temperature=0.2) == recorded
    with pytest.raises(openai.UnprocessableEntityError, match=r"body\.temperature: 0\.2 -> 0\.9"):
        chat(replayer.url, user="bob", temperature=0.9)


def test_a_changed_prompt_fails_with_a_diff_naming_the_exact_json_path(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    ask = client(recorder.url).chat.completions.create
    ask(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": "You are a travel agent."},
            {"role": "user", "content": "What is the weather in NYC today? Answer briefly."},
        ],
    )
    recorder.stop()
    replayer = make_proxy(mode="replay")
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client(replayer.url).chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "You are a travel agent."},
                {"role": "user", "content": "What is the weather in LA today? Answer briefly."},
            ],
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "cassette_miss"
    shown = re.search(r'body\.messages\[1\]\.content: "(.*?)" -> "(.*?)"', error["message"])
    assert shown is not None, error["message"]
    assert "in NYC today" in shown.group(1) and "in LA today" in shown.group(2)
    [difference] = error["details"]["closest"]["differences"]
    assert difference["path"] == "body.messages[1].content"
    misses = httpx.get(replayer.url + "/__tapeproxy/misses").json()["misses"]
    assert misses[0]["closest"]["differences"] == [difference]


def test_an_ignore_rule_from_the_settings_makes_a_field_not_count(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record", ignore=("openai:body:temperature",))
    recorded = chat(recorder.url, temperature=0.2)
    recorder.stop()
    replayer = make_proxy(mode="replay", ignore=("openai:body:temperature",))
    assert chat(replayer.url, temperature=1.5) == recorded


def record_three_answers(make_proxy: MakeProxy, fake: FakeUpstream, **settings: Any) -> str:
    vector = [{"object": "embedding", "index": 0, "embedding": [0.5]}]
    fake.script(
        "/v1/embeddings",
        *(
            Reply(
                body={
                    "object": "list",
                    "data": vector,
                    "model": name,
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
            )
            for name in ("one", "two", "three")
        ),
    )
    recorder = make_proxy(mode="record")
    for _ in range(3):
        embed(recorder.url, "same")
    recorder.stop()
    return make_proxy(mode="replay", **settings).url


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("repeat-last", ["one", "two", "three", "three", "three"]),
        ("cycle", ["one", "two", "three", "one", "two"]),
    ],
)
def test_repeat_policies_once_recordings_run_out(
    make_proxy: MakeProxy, fake: FakeUpstream, policy: str, expected: list[str]
) -> None:
    url = record_three_answers(make_proxy, fake, repeat=policy)
    assert [embed(url, "same") for _ in expected] == expected


def test_strict_order_catches_a_swapped_pair(make_proxy: MakeProxy, fake: FakeUpstream) -> None:
    recorder = make_proxy(mode="record")
    for text in ("first", "second", "third"):
        embed(recorder.url, text)
    recorder.stop()
    strict = make_proxy(mode="replay", strict_order=True)
    for text in ("first", "second", "third"):
        embed(strict.url, text)
    strict.put_cassette(mode="replay")
    embed(strict.url, "first")
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        embed(strict.url, "third")
    message = caught.value.body["message"]  # type: ignore[index]
    assert caught.value.body["type"] == "cassette_out_of_order"  # type: ignore[index]
    assert "request #2" in message and "POST openai /v1/embeddings" in message
    loose = make_proxy(mode="replay")
    for text in ("third", "first", "second"):
        embed(loose.url, text)


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


@pytest.mark.parametrize(("flag", "code"), [("--fail-on-unused", 3), ("--allow-unused", 0)])
def test_fail_on_unused_makes_shutdown_exit_non_zero_and_names_the_unused(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, flag: str, code: int
) -> None:
    recorder = make_proxy(mode="record")
    embed(recorder.url, "used")
    embed(recorder.url, "never replayed")
    recorder.stop()
    process, url = serve(["--cassettes", str(cassettes), flag], cassettes.parent)
    embed(url, "used")
    stats = httpx.get(url + "/__tapeproxy/stats").json()
    [run] = stats["runs"]
    assert run["unused_count"] == 1 and run["served"] == 1
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == code, err
    assert "1 recording(s) never used" in err and run["unused"][0] in err


@pytest.fixture
def tool() -> Any:
    """A second fake: a 'search' tool API the agent calls through tapeproxy."""
    with FakeUpstream() as upstream:
        yield upstream


def agent_step(url: str, query: str, **headers: str) -> tuple[str, Any]:
    """One step of an agent: ask the model, then call the tool."""
    answer = (
        chat(url)
        if not headers
        else client(url)
        .with_options(default_headers=headers)
        .chat.completions.create(model="gpt-4o-mini", messages=USER)
        .choices[0]
        .message.content
    )
    found = httpx.get(url + "/search/v1/find", params={"q": query}, headers=headers)
    return str(answer), found.json() if found.status_code == 200 else found.status_code


def test_partial_replay_runs_the_model_live_against_a_frozen_tool_api(
    make_proxy: MakeProxy, fake: FakeUpstream, tool: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record", cassette="trip", upstream={"search": tool.url})
    recorded = agent_step(recorder.url, "hotels in paris")
    recorder.stop()
    original = files_under(cassettes / "trip")
    tool_hits = len(tool.hits)
    model_hits = fake.count("/v1/chat/completions")
    tool.stop()

    replayer = make_proxy(
        mode="replay", cassette="trip", live=("openai",), upstream={"search": tool.url}
    )
    assert agent_step(replayer.url, "hotels in paris") == recorded
    assert fake.count("/v1/chat/completions") == model_hits + 1, "the model ran live"
    assert agent_step(replayer.url, "museums in paris")[1] == 422, "a new tool call is a miss"
    assert len(tool.hits) == tool_hits
    replayer.stop()
    assert files_under(cassettes / "trip") == original
    derived = [json.loads(b) for b in files_under(cassettes / "trip.derived").values()]
    assert {(d["request"]["upstream"], d["response"]["status"]) for d in derived} == {
        ("openai", 200)
    }


def test_the_live_header_makes_one_request_partial(
    make_proxy: MakeProxy, fake: FakeUpstream, tool: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record", upstream={"search": tool.url})
    recorded = agent_step(recorder.url, "hotels")
    recorder.stop()
    replayer = make_proxy(mode="replay", upstream={"search": tool.url})
    model_hits = fake.count("/v1/chat/completions")
    assert agent_step(replayer.url, "hotels", **{"x-tapeproxy-live": "openai"}) == recorded
    assert fake.count("/v1/chat/completions") == model_hits + 1
    assert replayer.stats["runs"][-1]["cassette"] == "default.derived"


def test_the_live_header_names_a_known_upstream_and_uses_up_nothing_when_wrong(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    embed(recorder.url, "once")
    recorder.stop()
    replayer = make_proxy(mode="replay")
    typo = httpx.post(
        replayer.url + "/openai/v1/embeddings",
        json={"model": "m", "input": "once"},
        headers={"x-tapeproxy-live": "opneai"},
    )
    assert typo.status_code == 400
    assert "'opneai'" in typo.json()["error"]["message"]
    assert "openai" in typo.json()["error"]["message"]
    assert embed(replayer.url, "once"), "the refused request used up no recording"


def test_strict_order_skips_what_an_earlier_request_ran_live_by_header(
    make_proxy: MakeProxy, fake: FakeUpstream, tool: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record", upstream={"search": tool.url})
    recorded = agent_step(recorder.url, "hotels")
    recorder.stop()
    replayer = make_proxy(mode="replay", strict_order=True, upstream={"search": tool.url})
    answer = client(replayer.url).with_options(default_headers={"x-tapeproxy-live": "openai"})
    answer.chat.completions.create(model="gpt-4o-mini", messages=USER)
    found = httpx.get(replayer.url + "/search/v1/find", params={"q": "hotels"})
    assert found.status_code == 200, found.text
    assert found.json() == recorded[1]


def test_rekey_moves_recordings_to_their_keys_under_new_rules(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    recorded = chat(recorder.url, temperature=0.2)
    embed(recorder.url, "unchanged")
    recorder.stop()
    before = files_under(cassettes)
    rule = "openai:body:temperature"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tapeproxy",
            "rekey",
            "default",
            "--cassettes",
            str(cassettes),
            "--ignore",
            rule,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=cassettes.parent,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["moved"]) == 2, "both files carry the new rules fingerprint"
    after = files_under(cassettes)
    assert len(after) == len(before)
    assert set(after) != set(before)
    replayer = make_proxy(mode="replay", ignore=(rule,))
    assert chat(replayer.url, temperature=0.7) == recorded
    assert embed(replayer.url, "unchanged")


def test_match_tables_in_tapeproxy_toml_become_rules(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path
) -> None:
    config = tmp_path / "tapeproxy.toml"
    config.write_text(
        '[match.openai]\nignore_body = ["temperature"]\n[match."*"]\nignore_query = ["ts"]\n'
    )
    settings = load_settings({}, environ={}, config=config)
    assert settings.ignore == ("openai:body:temperature", "*:query:ts")
    recorder = make_proxy(mode="record", ignore=settings.ignore)
    recorded = chat(recorder.url, temperature=0.1)
    recorder.stop()
    replayer = make_proxy(mode="replay", ignore=settings.ignore)
    assert chat(replayer.url, temperature=0.8) == recorded
    config.write_text('[match.openai]\nignore_bodies = ["temperature"]\n')
    with pytest.raises(ConfigError, match="ignore_body, ignore_query"):
        load_settings({}, environ={}, config=config)


def test_a_derived_cassette_is_output_so_its_files_never_count_as_unused(
    make_proxy: MakeProxy, fake: FakeUpstream, tool: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record", upstream={"search": tool.url})
    agent_step(recorder.url, "hotels")
    recorder.stop()
    for _ in range(2):  # the second run finds the first run's derived files on disk
        replayer = make_proxy(mode="replay", live=("openai",), upstream={"search": tool.url})
        agent_step(replayer.url, "hotels")
        runs = {run["cassette"]: run for run in replayer.stats["runs"]}
        replayer.stop()
        assert runs["default.derived"]["recorded_count"] == 1
        assert runs["default.derived"]["unused_count"] == 0
        assert runs["default"]["unused_count"] == 0, (
            "the recorded model answer could not be used: openai ran live"
        )


def post_chat(url: str, raw: bytes) -> httpx.Response:
    return httpx.post(
        url + "/openai/v1/chat/completions",
        content=raw,
        timeout=10,
        headers={"content-type": "application/json"},
    )


def test_a_float_recorded_by_python_replays_for_a_client_that_writes_it_as_an_integer(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    recorded = chat(recorder.url, temperature=1.0)
    assert b'"temperature":1.0' in fake.hits[-1].body.replace(b" ", b"")
    recorder.stop()
    replayer = make_proxy(mode="replay")
    body = {"model": "gpt-4o-mini", "messages": USER, "temperature": 1}
    answer = post_chat(replayer.url, json.dumps(body).encode())  # as JavaScript sends it
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == recorded
    missed = post_chat(replayer.url, json.dumps({**body, "temperature": True}).encode())
    assert missed.status_code == 422
    assert "body.temperature: 1 -> true" in missed.json()["error"]["message"]


def test_a_miss_over_nan_or_infinity_is_a_422_and_the_misses_list_stays_readable(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"logit_bias":{"1":%s}}'
    recorder = make_proxy(mode="record")
    assert post_chat(recorder.url, raw % b"NaN").status_code == 200
    recorder.stop()
    replayer = make_proxy(mode="replay")
    assert post_chat(replayer.url, raw % b"NaN").status_code == 200
    missed = post_chat(replayer.url, raw % b"Infinity")
    assert missed.status_code == 422, missed.text
    # A body holding NaN or Infinity is not strict JSON: it is kept, keyed and compared as text.
    [difference] = missed.json()["error"]["details"]["closest"]["differences"]
    assert difference == {
        "path": "body",
        "recorded": (raw % b"NaN").decode(),
        "requested": (raw % b"Infinity").decode(),
    }
    listed = httpx.get(replayer.url + "/__tapeproxy/misses", timeout=10)
    assert listed.status_code == 200 and len(listed.json()["misses"]) == 1


def test_a_key_in_a_json_or_form_body_goes_upstream_but_is_never_stored_keyed_or_shown(
    make_proxy: MakeProxy, tool: FakeUpstream, cassettes: Path
) -> None:
    tool.script("/search", *(Reply(body={"results": ["Hotel Lutetia"]}) for _ in range(3)))
    tool.script("/oauth/token", Reply(body={"access_token": "issued", "token_type": "bearer"}))
    recorder = make_proxy(mode="record", upstream={"search": tool.url})
    search = {"api_key": "tvly-OLDSECRET111", "query": "hotels"}
    assert httpx.post(recorder.url + "/search/search", json=search).status_code == 200
    form = {"grant_type": "client_credentials", "client_id": "me", "client_secret": "FORMSECRET1"}
    assert httpx.post(recorder.url + "/search/oauth/token", data=form).status_code == 200
    assert tool.hits[0].json()["api_key"] == "tvly-OLDSECRET111", "the upstream gets the key"
    assert b"client_secret=FORMSECRET1" in tool.hits[1].body
    recorder.stop()
    on_disk = b"".join(files_under(cassettes).values())
    assert b"OLDSECRET" not in on_disk and b"FORMSECRET" not in on_disk

    replayer = make_proxy(mode="replay", upstream={"search": tool.url})
    other_key = {**search, "api_key": "tvly-NEWSECRET222"}
    replayed = httpx.post(replayer.url + "/search/search", json=other_key)
    assert replayed.status_code == 200 and replayed.json() == {"results": ["Hotel Lutetia"]}
    token = httpx.post(
        replayer.url + "/search/oauth/token", data={**form, "client_secret": "FORMSECRET2"}
    )
    assert token.status_code == 200
    missed = httpx.post(replayer.url + "/search/search", json={**other_key, "query": "museums"})
    assert missed.status_code == 422 and "NEWSECRET" not in missed.text
    assert 'body.query: "hotels" -> "museums"' in missed.json()["error"]["message"]
    assert "NEWSECRET" not in httpx.get(replayer.url + "/__tapeproxy/misses").text


@pytest.mark.parametrize("header", ["x-session-id", "x-author", "x-tenant"])
def test_a_key_header_rule_counts_whatever_the_header_is_called(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, header: str
) -> None:
    proxy = make_proxy(mode="record", ignore=(f"openai:key-header:{header}",))
    body = json.dumps({"model": "m", "messages": USER}).encode()

    def key(value: str) -> str:
        return httpx.post(
            proxy.url + "/openai/v1/chat/completions",
            content=body,
            timeout=10,
            headers={header: value, "content-type": "application/json"},
        ).headers["x-tapeproxy-key"]

    assert key("one-HEADERVALUE") != key("two-HEADERVALUE")
    assert key("one-HEADERVALUE") == key("one-HEADERVALUE")
    proxy.stop()
    stored = [json.loads(b)["request"]["headers"][header] for b in files_under(cassettes).values()]
    if header == "x-tenant":
        assert sorted(set(stored)) == ["one-HEADERVALUE", "two-HEADERVALUE"]
    else:
        assert all(value.startswith("sha256:") for value in stored)


def test_after_a_rule_change_the_recorded_request_itself_misses_pointing_to_rekey(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    chat(recorder.url, seed=7)
    recorder.stop()
    replayer = make_proxy(mode="replay", ignore=("openai:body:seed",))
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        chat(replayer.url, seed=7)
    message = caught.value.body["message"]  # type: ignore[index]
    assert "it differs in" not in message
    assert "other match rules" in message and "`tapeproxy rekey default`" in message
    assert caught.value.body["details"]["closest"]["recorded_under_other_rules"]  # type: ignore[index]


def mcp_requests(url: str, token: str) -> list[httpx.Response]:
    """An Anthropic request with an MCP server and an OpenAI Responses request with an MCP
    tool, each carrying `token` as the MCP server's credential."""
    anthropic = httpx.post(
        url + "/anthropic/v1/messages",
        timeout=10,
        headers={
            "x-api-key": "sk-ant-x",
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "mcp-client-2025-04-04",
        },
        json={
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "list my repos"}],
            "mcp_servers": [
                {
                    "type": "url",
                    "url": "https://mcp.example.com/sse",
                    "name": "gh",
                    "authorization_token": token,
                }
            ],
        },
    )
    responses = httpx.post(
        url + "/openai/v1/responses",
        timeout=10,
        headers={"authorization": f"Bearer {SECRET_OPENAI}"},
        json={
            "model": "gpt-4.1",
            "input": "list my repos",
            "tools": [
                {
                    "type": "mcp",
                    "server_label": "gh",
                    "server_url": "https://mcp.example.com",
                    "headers": {"Authorization": f"Bearer {token}"},
                    "authorization": token,
                    "require_approval": "never",
                }
            ],
        },
    )
    return [anthropic, responses]


def test_an_mcp_servers_token_goes_upstream_but_is_never_stored_keyed_or_shown(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    recorded = mcp_requests(recorder.url, "ghp_MCPTOKEN_ALICE")
    assert [r.status_code for r in recorded] == [200, 200]
    assert all(b"ghp_MCPTOKEN_ALICE" in hit.body for hit in fake.hits), "upstream gets it"
    recorder.stop()
    written = files_under(cassettes)
    assert len(written) == 2 and b"MCPTOKEN" not in b"".join(written.values())
    replayer = make_proxy(mode="replay")
    replayed = mcp_requests(replayer.url, "ghp_MCPTOKEN_BOB")
    assert [r.json() for r in replayed] == [r.json() for r in recorded]


def test_a_tool_schema_tool_result_or_form_field_named_like_a_secret_keeps_requests_apart(
    make_proxy: MakeProxy, tool: FakeUpstream
) -> None:
    def schema(min_length: int) -> dict[str, Any]:
        return {
            "model": "gpt-4o-mini",
            "messages": USER,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "create_user",
                        "parameters": {
                            "type": "object",
                            "properties": {"password": {"type": "string", "minLength": min_length}},
                        },
                    },
                }
            ],
        }

    def vault(code: str) -> dict[str, Any]:
        return {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "get_vault", "response": {"secret": code}}}
                    ],
                }
            ]
        }

    gemini = "/gemini/v1beta/models/gemini-2.0-flash:generateContent"
    pairs: list[tuple[str, dict[str, Any]]] = [
        ("/openai/v1/chat/completions", {"json": schema(8)}),
        ("/openai/v1/chat/completions", {"json": schema(64)}),
        (gemini, {"json": vault("1234")}),
        (gemini, {"json": vault("9876")}),
        ("/santa/draw", {"data": {"secret_santa": "alice"}}),
        ("/santa/draw", {"data": {"secret_santa": "bob"}}),
    ]

    def send(url: str, which: int) -> httpx.Response:
        path, body = pairs[which]
        return httpx.post(url + path, timeout=10, **body)

    tool.script("/draw", Reply(body={"gift": "book"}), Reply(body={"gift": "socks"}))
    recorder = make_proxy(mode="record", upstream={"santa": tool.url})
    live = [send(recorder.url, which) for which in range(6)]
    keys = [r.headers["x-tapeproxy-key"] for r in live]
    assert len(set(keys)) == 6, "each pair differs in a way that changes the answer"
    recorder.stop()
    replayer = make_proxy(mode="replay", upstream={"santa": tool.url})
    for which in (5, 3, 1):  # the second of each pair alone gets its own answer
        assert send(replayer.url, which).json() == live[which].json()


def test_a_key_in_a_multipart_upload_goes_upstream_but_is_never_stored_or_keyed(
    make_proxy: MakeProxy, tool: FakeUpstream, cassettes: Path
) -> None:
    import base64

    def upload(url: str, key: str) -> httpx.Response:
        return httpx.post(
            url + "/ocr/parse/image",
            data={"apikey": key, "language": "eng"},
            files={"file": ("a.png", b"\x89PNG image bytes", "image/png")},
        )

    tool.script("/parse/image", Reply(body={"text": "hello"}))
    recorder = make_proxy(mode="record", upstream={"ocr": tool.url})
    assert upload(recorder.url, "K81234567SECRET").status_code == 200
    assert b"K81234567SECRET" in tool.hits[0].body
    recorder.stop()
    [stored] = [json.loads(data)["request"]["body"] for data in files_under(cassettes).values()]
    raw = base64.b64decode(stored["base64"])
    assert b"K81234567SECRET" not in raw and b"\x89PNG image bytes" in raw
    replayer = make_proxy(mode="replay", upstream={"ocr": tool.url})
    replayed = upload(replayer.url, "K8OTHERDEVKEY999")
    assert replayed.status_code == 200 and replayed.json() == {"text": "hello"}


def test_a_gzip_request_body_keys_and_is_stored_as_the_json_it_holds(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    import gzip

    doc = json.dumps({"model": "gpt-4o-mini", "messages": USER, "api_key": "sk-BODYSECRET"})
    headers = {"content-type": "application/json", "content-encoding": "gzip"}

    def send(url: str, mtime: int) -> httpx.Response:
        return httpx.post(
            url + "/openai/v1/chat/completions",
            headers=headers,
            timeout=10,
            content=gzip.compress(doc.encode(), mtime=mtime),
        )

    recorder = make_proxy(mode="record")
    recorded = send(recorder.url, 1000)
    assert recorded.status_code == 200
    sent = fake.hits[0]  # the fake's aiohttp unpacks what it is sent
    assert sent.headers["content-encoding"] == "gzip" and sent.json() == json.loads(doc)
    recorder.stop()
    [stored] = [json.loads(data)["request"]["body"] for data in files_under(cassettes).values()]
    assert stored["json"] == {**json.loads(doc), "api_key": "[redacted]"}
    replayer = make_proxy(mode="replay")
    replayed = send(replayer.url, 2000)  # another second: another gzip header
    assert replayed.status_code == 200 and replayed.json() == recorded.json()


def test_rekey_masks_a_form_key_an_older_tapeproxy_stored_in_clear(
    make_proxy: MakeProxy, tool: FakeUpstream, cassettes: Path
) -> None:
    from tapeproxy.engine.keying import RequestParts, request_key
    from tapeproxy.engine.rules import MatchRules

    form = {"content-type": "application/x-www-form-urlencoded"}
    body = "q=hello&target=de&key=AIzaOLDSECRET"
    recorder = make_proxy(mode="record", upstream={"translate": tool.url})
    recorded = httpx.post(recorder.url + "/translate/v2", content=body, headers=form)
    recorder.stop()
    [(name, data)] = files_under(cassettes).items()
    old = json.loads(data)  # as an older tapeproxy wrote it: in clear, keyed on the key
    old["request"]["body"]["text"] = body
    old["key"] = request_key(RequestParts.from_dict(old["request"]), MatchRules())
    (cassettes / name).unlink()
    (cassettes / "default" / f"{old['key']}.json").write_text(json.dumps(old))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tapeproxy",
            "rekey",
            "default",
            "--cassettes",
            str(cassettes),
            "--upstream",
            f"translate={tool.url}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=cassettes.parent,
    )
    assert result.returncode == 0, result.stderr
    assert b"OLDSECRET" not in b"".join(files_under(cassettes).values())
    replayer = make_proxy(mode="replay", upstream={"translate": tool.url})
    replayed = httpx.post(replayer.url + "/translate/v2", content=body, headers=form)
    assert replayed.status_code == 200 and replayed.json() == recorded.json()
