"""Record then replay through the real server with the official SDKs, the upstream stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream, Reply
from tests.support import SECRET_ANTHROPIC, SECRET_GEMINI, SECRET_OPENAI, SECRETS, files_under

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def openai_client(url: str, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/openai/v1", api_key=SECRET_OPENAI, **kwargs)  # type: ignore[arg-type]


def anthropic_client(url: str, **kwargs: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url + "/anthropic", api_key=SECRET_ANTHROPIC, **kwargs)  # type: ignore[arg-type]


def script_embeddings(fake: FakeUpstream, models: list[str]) -> None:
    """The next embeddings answers, told apart by their `model` field."""
    vector = [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}]
    fake.script(
        "/v1/embeddings",
        *(
            Reply(
                body={
                    "object": "list",
                    "data": vector,
                    "model": model,
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
            )
            for model in models
        ),
    )


def run_agent(url: str) -> dict[str, object]:
    """A small 'agent' touching every JSON endpoint the fake speaks."""
    oai = openai_client(url)
    ant = anthropic_client(url)
    chat = oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    embedding = oai.embeddings.create(model="text-embedding-3-small", input="hello")
    models = oai.models.list()
    message = ant.messages.create(model="claude-test-1", max_tokens=64, messages=MESSAGES)  # type: ignore[arg-type]
    return {
        "chat": chat.model_dump(),
        "embedding": embedding.model_dump(),
        "models": [m.id for m in models],
        "message": message.model_dump(),
    }


def test_record_then_replay_gives_identical_results_with_upstream_stopped(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    recorded = run_agent(recorder.url)
    assert recorder.stats["recorded"] == 4
    recorder.stop()
    hits = len(fake.hits)
    fake.stop()

    replayer = make_proxy(mode="replay")
    replayed = run_agent(replayer.url)

    assert replayed == recorded
    assert recorded["chat"]["choices"][0]["message"]["content"] == (  # type: ignore[index]
        "echo: What is the capital of France?"
    )
    assert len(fake.hits) == hits
    stats = replayer.stats
    assert (stats["replayed"], stats["upstream_calls"], stats["misses"]) == (4, 0, 0)
    assert len(list((cassettes / "default").glob("*.json"))) == 4


def test_replayed_json_body_is_byte_identical_to_the_recorded_one(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    body = {"model": "gpt-4o-mini", "messages": MESSAGES}
    recorder = make_proxy(mode="record")
    live = httpx.post(recorder.url + "/openai/v1/chat/completions", json=body)
    recorder.stop()
    fake.stop()
    replayer = make_proxy(mode="replay")
    again = httpx.post(replayer.url + "/openai/v1/chat/completions", json=body)
    assert again.status_code == live.status_code == 200
    assert again.content == live.content
    assert again.headers["content-type"] == live.headers["content-type"]


def test_a_miss_is_a_clear_4xx_that_the_sdks_do_not_retry(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    replayer = make_proxy(mode="replay", cassette="empty")
    oai = openai_client(replayer.url, max_retries=3)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        oai.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "cassette_miss"
    assert "'empty'" in error["message"] and "/v1/chat/completions" in error["message"]
    ant = anthropic_client(replayer.url, max_retries=3)
    with pytest.raises(anthropic.UnprocessableEntityError) as caught_ant:
        ant.messages.create(model="claude-test-1", max_tokens=64, messages=MESSAGES)  # type: ignore[arg-type]
    assert caught_ant.value.body["error"]["type"] == "cassette_miss"  # type: ignore[index]
    stats = replayer.stats
    assert stats["misses"] == 2, "each SDK sent exactly one request: no retries"
    assert stats["upstream_calls"] == 0 and fake.hits == []


def test_a_miss_names_the_closest_recording_and_the_differing_field(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    openai_client(recorder.url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    recorder.stop()
    replayer = make_proxy(mode="replay")
    changed = [{"role": "user", "content": "What is the capital of Italy?"}]
    response = httpx.post(
        replayer.url + "/openai/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": changed},
    )
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "body.messages[0].content" in message
    assert "France" in message and "Italy" in message
    details = response.json()["error"]["details"]
    assert details["closest"]["differences"][0]["path"] == "body.messages[0].content"
    assert replayer.get("/__tapeproxy/misses")["misses"][0]["key"] == details["key"]


def test_no_secret_reaches_the_cassette_folder(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    run_agent(recorder.url)
    httpx.post(
        recorder.url + f"/gemini/v1beta/models/gemini-test:generateContent?key={SECRET_GEMINI}",
        json={"contents": [{"parts": [{"text": "hi"}]}]},
        headers={"cookie": f"session={SECRET_OPENAI}", "x-goog-api-key": SECRET_GEMINI},
    )
    recorder.stop()
    assert fake.hits[-1].query["key"] == SECRET_GEMINI, "the upstream still gets the key"
    everything = b"".join(files_under(cassettes).values())
    assert everything, "something was recorded"
    for secret in SECRETS:
        assert secret.encode() not in everything
    for header in (b'"authorization"', b'"x-api-key"', b'"cookie"', b'"user-agent"', b"stainless"):
        assert header not in everything.lower()


def test_recording_twice_gives_byte_identical_files(
    make_proxy: MakeProxy, fake: FakeUpstream, tmp_path: Path
) -> None:
    snapshots = []
    for round_ in range(2):
        proxy = make_proxy(mode="record", cassettes=tmp_path / f"round{round_}")
        run_agent(proxy.url)
        proxy.stop()
        snapshots.append(files_under(tmp_path / f"round{round_}"))
    assert len(snapshots[0]) == 4
    assert snapshots[0] == snapshots[1]


def test_identical_requests_with_different_answers_replay_in_order(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    answers = ["first", "second", "third"]
    script_embeddings(fake, answers)
    recorder = make_proxy(mode="record")
    oai = openai_client(recorder.url)
    live = [oai.embeddings.create(model="m", input="same").model for _ in answers]
    recorder.stop()
    assert live == answers
    names = {p.name for p in (cassettes / "default").glob("*.json")}
    key = min(names, key=len).removesuffix(".json")
    assert names == {f"{key}.json", f"{key}.2.json", f"{key}.3.json"}
    fake.stop()
    replayer = make_proxy(mode="replay")
    oai = openai_client(replayer.url, max_retries=0)
    assert [oai.embeddings.create(model="m", input="same").model for _ in answers] == answers
    with pytest.raises(openai.UnprocessableEntityError, match="already served"):
        oai.embeddings.create(model="m", input="same")


def test_auto_mode_replays_hits_and_records_misses(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    oai = openai_client(recorder.url)
    oai.embeddings.create(model="m", input="old")
    recorder.stop()
    hits_after_recording = fake.count("/v1/embeddings")

    auto = make_proxy(mode="auto")
    oai = openai_client(auto.url)
    oai.embeddings.create(model="m", input="old")
    oai.embeddings.create(model="m", input="new")
    stats = auto.stats
    assert (stats["replayed"], stats["recorded"], stats["upstream_calls"]) == (1, 1, 1)
    assert fake.count("/v1/embeddings") == hits_after_recording + 1
    auto.stop()
    fake.stop()
    replayer = make_proxy(mode="replay")
    oai = openai_client(replayer.url)
    assert oai.embeddings.create(model="m", input="new").data[0].embedding


def test_passthrough_writes_nothing(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    proxy = make_proxy(mode="passthrough")
    result = run_agent(proxy.url)
    assert result["models"]
    assert proxy.stats["upstream_calls"] == 4
    proxy.stop()
    assert not cassettes.exists() or files_under(cassettes) == {}


def test_failure_answers_pass_through_but_are_recorded_only_with_record_failures(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    overloaded = Reply(
        status=529,
        body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    for record_failures, cassette in ((False, "strict"), (True, "failures")):
        fake.script("/v1/messages", overloaded)
        proxy = make_proxy(mode="record", cassette=cassette, record_failures=record_failures)
        response = httpx.post(
            proxy.url + "/anthropic/v1/messages",
            json={"model": "claude-test-1", "max_tokens": 8, "messages": MESSAGES},
            headers={"x-api-key": SECRET_ANTHROPIC, "anthropic-version": "2023-06-01"},
        )
        assert response.status_code == 529
        assert response.json()["error"]["type"] == "overloaded_error"
        proxy.stop()
    assert not (cassettes / "strict").exists()
    [stored] = (cassettes / "failures").glob("*.json")
    assert json.loads(stored.read_text())["outcome"] == "failure_status"


def test_a_corrupt_exchange_file_is_a_4xx_the_sdk_does_not_retry_naming_file_and_fix(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path
) -> None:
    recorder = make_proxy(mode="record")
    openai_client(recorder.url).embeddings.create(model="text-embedding-3-small", input="x")
    recorder.stop()
    [stored] = (cassettes / "default").glob("*.json")
    stored.write_text(stored.read_text()[:40])
    torn = stored.read_bytes()
    replayer = make_proxy(mode="replay")
    # The SDK's default retries (2): a 5xx would be asked three times, each after a back-off.
    client = openai_client(replayer.url)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.embeddings.create(model="text-embedding-3-small", input="x")
    assert caught.value.status_code == 422
    error = caught.value.body
    assert isinstance(error, dict)  # the SDK hands over the provider shape's `error` object
    assert error["type"] == "cassette_corrupt"
    message = error["message"]
    assert stored.name in message and "`tapeproxy verify default`" in message
    assert "\n" not in message
    stats = replayer.stats
    assert (stats["errors"], stats["replayed"], stats["upstream_calls"]) == (1, 0, 0), stats
    assert stored.read_bytes() == torn  # a replay never writes into the cassette


# A file that validates but whose answer cannot be rebuilt, as a hand edit leaves it: where,
# and how the message names it.
UNSENDABLE = {
    "body-not-base64": ("body", {"base64": "@@@ not base64"}, "response.body: "),
    "body-style-unknown": ("style", "pretty", "response.body: unknown JSON style 'pretty'"),
    "body-of-no-kind": ("body", {"yaml": "a: 1"}, "response.body: a body holds"),
    "request-body-of-no-kind": (
        "request",
        {"yaml": "a: 1"},
        "request.body: a body holds one of json, text or base64, not keys ['yaml']",
    ),
    "header-not-latin-1": ("header", "\u20ac 5", "response.headers.x-price: "),
    # Before, each of these made the server close the connection with no answer, and verify
    # said ok.
    **{
        f"status-{status}": ("status", status, f"response.status: {status} is no HTTP answer's")
        for status in (0, 99, 101, 1000)
    },
    **{
        f"header-value-{name}": ("header", f"5{char}x-injected: 1", "response.headers.x-price: ")
        for name, char in (("crlf", "\r\n"), ("lf", "\n"), ("nul", "\x00"))
    },
    "header-list-value-cr": ("header", ["5", "6\r"], "response.headers.x-price: "),
    "header-name-not-token": ("name", "x price", 'response.headers["x price"]: '),
    "header-name-colon": ("name", "x-a:b", 'response.headers["x-a:b"]: '),
}


@pytest.mark.parametrize("edit", UNSENDABLE.values(), ids=UNSENDABLE.keys())
def test_an_answer_that_cannot_be_rebuilt_is_a_422_naming_file_and_field_and_verify_flags_it(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, edit: tuple[str, object, str]
) -> None:
    what, value, said = edit
    recorder = make_proxy(mode="record")
    openai_client(recorder.url).embeddings.create(model="text-embedding-3-small", input="x")
    recorder.stop()
    [stored] = (cassettes / "default").glob("*.json")
    data = json.loads(stored.read_text())
    if what == "body":
        data["response"]["body"] = value
    elif what == "request":
        data["request"]["body"] = value
    elif what == "style":
        data["response"]["body"]["style"] = value
    elif what == "status":
        data["response"]["status"] = value
    elif what == "name":
        data["response"]["headers"][value] = "1"
    else:
        data["response"]["headers"]["x-price"] = value
    stored.write_text(json.dumps(data, indent=2))
    replayer = make_proxy(mode="replay")
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        openai_client(replayer.url).embeddings.create(model="text-embedding-3-small", input="x")
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "cassette_corrupt"
    message = error["message"]
    assert f"{stored.name}: {said}" in message, message
    assert "`tapeproxy verify default`" in message and "\n" not in message
    assert replayer.stats["errors"] == 1
    # Another request still gets its miss (the closest recording is looked for among the
    # files that can be read), not a 500.
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        openai_client(replayer.url).embeddings.create(model="text-embedding-3-small", input="y")
    assert isinstance(caught.value.body, dict) and caught.value.body["type"] == "cassette_miss"
    done = subprocess.run(
        [sys.executable, "-m", "tapeproxy", "verify", "--cassettes", str(cassettes)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{stored.name}: unreadable: {said}" in done.stdout, done.stdout


@pytest.mark.parametrize("mode", ["record", "auto"])
def test_concurrent_identical_requests_get_distinct_ordinals_and_lose_nothing(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, mode: str
) -> None:
    answers = sorted(f"answer-{n:02}" for n in range(12))
    script_embeddings(fake, answers)
    recorder = make_proxy(mode=mode)
    body = {"model": "m", "input": "same"}

    def send(_: int) -> str:
        reply = httpx.post(recorder.url + "/openai/v1/embeddings", json=body, timeout=10)
        return str(reply.json()["model"])

    with ThreadPoolExecutor(max_workers=12) as pool:
        live = list(pool.map(send, range(12)))
    recorder.stop()
    assert sorted(live) == answers
    stored = {
        json.loads(p.read_text())["response"]["body"]["json"]["model"]: p.name
        for p in (cassettes / "default").glob("*.json")
    }
    assert sorted(stored) == answers, "no answer overwrote another"
    assert len({name.split(".")[0] for name in stored.values()}) == 1, "one key, 12 ordinals"
    fake.stop()
    replayer = make_proxy(mode="replay")
    replayed = [
        httpx.post(replayer.url + "/openai/v1/embeddings", json=body).json()["model"]
        for _ in answers
    ]
    assert sorted(replayed) == answers
