"""A cassette recorded from the Python SDK replays for the Node SDK: keys ignore the client."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import openai
import pytest

from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir(),
    reason="needs node and `npm install --prefix tests/node` (.ci/run does it)",
)
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_python_recording_replays_for_the_node_sdk_chat_and_stream(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    client = openai.OpenAI(base_url=recorder.url + "/openai/v1", api_key=SECRET_OPENAI)
    text = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    stream = client.chat.completions.create(  # type: ignore[call-overload]
        model="gpt-4o-mini",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    recorder.stop()
    fake.stop()

    replayer = make_proxy(mode="replay")
    result = subprocess.run(
        ["node", str(NODE_DIR / "chat.mjs"), replayer.url + "/openai/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    node = json.loads(result.stdout)
    assert node["text"] == text.choices[0].message.content
    assert node["deltas"] == deltas
    assert node["usage"]["total_tokens"] > 0
    assert replayer.stats["misses"] == 0


def test_node_sdk_gets_two_chunks_of_a_recorded_stream_cut_after_two_then_raises(
    make_proxy: MakeProxy, fake: FakeUpstream
) -> None:
    recorder = make_proxy(mode="record")
    client = openai.OpenAI(base_url=recorder.url + "/openai/v1", api_key=SECRET_OPENAI)
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    assert len(list(stream)) > 2  # the recording has more than the cut lets through
    recorder.stop()
    fake.stop()

    replayer = make_proxy(mode="replay", fault=("cut:after=2",))
    result = subprocess.run(
        ["node", str(NODE_DIR / "cut.mjs"), replayer.url + "/openai/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    node = json.loads(result.stdout)
    assert node["chunks"] == 2
    assert node["error"]  # the SDK raised: the stream ended without its final frame
    assert replayer.stats["faults_by_kind"] == {"cut": 1}
