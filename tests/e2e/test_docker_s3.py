"""docker/docker-compose.s3.yml, the shared library for CI: valid Compose, its two services
agreeing on the bucket, the endpoint and the key pair, and tapeproxy set up as it sets it up
recording into a real SeaweedFS started as its s3 service starts it, then replaying."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from tapeproxy.settings import Settings, env_name
from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, check_jsonschema
from tests.support.seaweed import BUCKET, SeaweedFS
from tests.support.serve import Serve

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "docker-compose.s3.yml"


def services() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Any] = loaded["services"]
    return found


def default(value: str) -> str:
    """`${NAME:-default}` as compose reads it with NAME unset."""
    return value.split(":-", 1)[1].rstrip("}") if value.startswith("${") else value


def test_the_s3_compose_file_validates_against_the_compose_specification() -> None:
    result = check_jsonschema("vendor.compose-spec", COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tapeproxy_and_the_store_agree_on_bucket_endpoint_and_keys() -> None:
    s3, tapeproxy = services()["s3"], services()["tapeproxy"]
    env = {name: default(value) for name, value in tapeproxy["environment"].items()}
    assert f"-bucket={BUCKET}" in s3["command"] and "-master.telemetry=false" in s3["command"]
    assert env["TAPEPROXY_CASSETTES"].startswith(f"s3://{BUCKET}/")
    assert env["AWS_ENDPOINT_URL"] == "http://s3:8333" and "8333/healthz" in str(s3["healthcheck"])
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key] == default(s3["environment"][key])
    assert tapeproxy["depends_on"]["s3"]["condition"] == "service_healthy"
    settings = {env_name(field) for field in Settings.model_fields}
    assert {name for name in env if name.startswith("TAPEPROXY_")} <= settings
    assert tapeproxy["ports"] == ["127.0.0.1:8787:8787"]


def test_tapeproxy_set_up_as_the_compose_file_records_into_the_store_and_replays(
    seaweed: SeaweedFS, fake: FakeUpstream, tmp_path: Path
) -> None:
    env = {name: default(value) for name, value in services()["tapeproxy"]["environment"].items()}
    env.update(seaweed.env())  # this machine's SeaweedFS, not the service name `s3`
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "compose?"}]}
    headers = {"authorization": f"Bearer {SECRET_OPENAI}"}
    answers = []
    for upstream in (fake.url, "http://127.0.0.1:9"):  # then the upstream is down
        server = Serve(["--upstream", f"openai={upstream}"], tmp_path, env=env)
        assert "auto ready on" in server.ready, server.stop()
        url = server.url + "/openai/v1/chat/completions"
        answers.append(httpx.post(url, json=body, headers=headers, timeout=60).json())
        code, err = server.stop()
        assert code == 0, err
    assert answers[0] == answers[1] and fake.count() == 1
