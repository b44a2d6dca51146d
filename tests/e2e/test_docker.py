"""docker/: no Docker engine runs in CI, so the Dockerfile and compose file are checked by
parsing them (the `dockerfile` package wraps Docker's own Go parser) and by running the
image's command, with the image's environment, as a real process on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dockerfile
import httpx
import pytest
import yaml

from llmtape.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "docker-compose.yml"
SETTINGS_VARIABLES = {env_name(field) for field in Settings.model_fields} | {env_name("config")}


def instructions(name: str) -> list[dockerfile.Command]:
    return [c for c in dockerfile.parse_file(str(DOCKERFILE)) if c.cmd == name]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for command in instructions("ENV"):
        pairs = command.value
        env.update(zip(pairs[::2], pairs[1::2], strict=True))
    return env


def compose_service() -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]["llmtape"]
    return service


def dockerignored() -> set[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_copied_path_exists_and_is_not_dockerignored() -> None:
    for command in instructions("COPY"):
        *sources, _ = command.value
        for source in sources:
            assert (ROOT / source).exists(), f"{command.original}: {source} is not in the repo"
            assert source not in dockerignored(), f"{source} is copied but .dockerignore drops it"


def test_the_image_runs_llmtape_serve_as_pid_1_on_its_exposed_port() -> None:
    [entrypoint] = instructions("ENTRYPOINT")
    [cmd] = instructions("CMD")
    # Exec form (json) so llmtape itself gets `docker stop`'s SIGTERM.
    assert entrypoint.json and cmd.json
    assert [*entrypoint.value, *cmd.value] == ["llmtape", "serve"]
    env = image_env()
    assert [e.value for e in instructions("EXPOSE")] == [(env["LLMTAPE_PORT"],)]
    assert [v.value for v in instructions("VOLUME")] == [(env["LLMTAPE_CASSETTES"],)]


def test_the_image_and_compose_set_only_real_llmtape_variables() -> None:
    compose_env = compose_service()["environment"]
    for name in [*image_env(), *compose_env]:
        if name.startswith("LLMTAPE_"):
            assert name in SETTINGS_VARIABLES, f"{name} is not an llmtape setting"


def test_compose_builds_this_dockerfile_and_publishes_on_loopback_only() -> None:
    service = compose_service()
    build = service["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    env = image_env()
    [published] = service["ports"]
    assert published == f"127.0.0.1:{env['LLMTAPE_PORT']}:{env['LLMTAPE_PORT']}"
    [volume] = service["volumes"]
    source, target = volume.split(":")
    assert target == env["LLMTAPE_CASSETTES"]
    assert (COMPOSE.parent / source).resolve() == ROOT / "cassettes"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def container_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """`llmtape serve` with the image's environment; loopback instead of 0.0.0.0, since
    tests bind nothing else, and the bundled cassettes instead of the volume."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMTAPE_")}
    env.update(image_env())
    env.update(
        LLMTAPE_HOST="127.0.0.1",
        LLMTAPE_PORT=str(free_port()),
        LLMTAPE_CASSETTES=str(ROOT / "cassettes"),
        LLMTAPE_CASSETTE="example",
        PYTHONPATH=str(ROOT),
    )
    [entrypoint] = instructions("ENTRYPOINT")
    [cmd] = instructions("CMD")
    assert entrypoint.value == ("llmtape",)
    process = subprocess.Popen(
        [sys.executable, "-m", "llmtape", *cmd.value],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process, env
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_the_image_command_serves_and_its_healthcheck_passes_then_sigterm_exits_0(
    container_process: tuple[subprocess.Popen[str], dict[str, str]],
) -> None:
    process, env = container_process
    assert process.stdout is not None
    ready = process.stdout.readline()
    assert f"http://127.0.0.1:{env['LLMTAPE_PORT']}" in ready
    [health] = instructions("HEALTHCHECK")
    probe, *argv = health.value
    assert probe == "CMD" and argv[0] == "python"
    check = subprocess.run([sys.executable, *argv[1:]], env=env, timeout=30, check=False)
    assert check.returncode == 0
    current = httpx.get(f"http://127.0.0.1:{env['LLMTAPE_PORT']}/__llmtape/cassette").json()
    assert current == {"cassette": "example", "mode": "replay"}
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
