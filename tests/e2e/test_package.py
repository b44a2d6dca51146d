"""The distribution installs one import name, `llmtape`, and nothing that shadows a user's own
`proxy` or `cli` package; `python -m llmtape` is the `llmtape` command."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from llmtape import __version__

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [built] = out.glob("llmtape-*.whl")
    return built


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"llmtape"}
    assert "llmtape/cli/main.py" in names and "llmtape/engine.py" in names
    assert "llmtape/data/prices.json" in names, "the price table ships as package data"


def test_installed_wheel_imports_as_llmtape_only(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    with zipfile.ZipFile(wheel) as archive:  # a wheel is installed by unpacking it
        archive.extractall(site)
    # The dependencies come from the test environment, as a plain path: its own .pth files
    # (the editable install of this repository) are not run.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    def run(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    assert run("import llmtape.engine, llmtape.cli.main").returncode == 0
    for shadow in ("proxy", "cli"):
        failed = run(f"import {shadow}")
        assert "ModuleNotFoundError" in failed.stderr, f"`import {shadow}` must fail"
    version = subprocess.run(
        [python, "-m", "llmtape", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"llmtape {__version__}"
