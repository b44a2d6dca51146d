"""`tapeproxy drift --update` on an `s3://` library (a real SeaweedFS): the exchange that
broke re-recorded there, the others untouched, the last report in its state folder."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from tapeproxy.cli.main import app
from tapeproxy.settings import Settings
from tests.e2e.test_s3_library import objects
from tests.fakes.drifting import DriftingUpstream
from tests.support import ProxyServer
from tests.support.seaweed import SeaweedFS

KEY = "sk-test-drift-s3-0123456789"


def test_update_on_an_s3_library(
    s3_library: str, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake = DriftingUpstream()
    fake.start()
    try:
        given = {"port": 0, "cassettes": s3_library, "upstream": {"openai": fake.url}}
        with ProxyServer(Settings.model_validate({**given, "mode": "record"})) as proxy:
            for cassette in ("one", "two"):
                client = openai.OpenAI(
                    base_url=proxy.url + "/openai/v1",
                    api_key=KEY,
                    default_headers={"x-tapeproxy-cassette": cassette},
                    max_retries=0,
                )
                said: Any = [{"role": "user", "content": "hello"}]
                client.chat.completions.create(model="gpt-4o-mini", messages=said)
        before = objects(seaweed, s3_library)
        fake.mutation = "chat-field-removed"
        args = ["drift", "one", "--update", "--json", "--cassettes", s3_library]
        result = CliRunner().invoke(app, [*args, f"--upstream=openai={fake.url}"])
    finally:
        fake.stop()
    report = json.loads(result.output)
    assert result.exit_code == 1 and [u["cassette"] for u in report["updated"]] == ["one"]
    after = objects(seaweed, s3_library, state=True)
    changed = {name for name in before if before[name] != after[name]}
    assert len(changed) == 1 and changed.pop().startswith("one/")
    assert json.loads(after[".tapeproxy/drift.json"])["counts"]["error"] == 1
    assert not any(KEY.encode() in data for data in after.values())
