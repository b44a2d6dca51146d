"""The distribution installs one import name, `tapeproxy`, and nothing that shadows a user's own
`proxy` or `cli` package; `python -m tapeproxy` is the `tapeproxy` command."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tapeproxy import __version__

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
    [built] = out.glob("tapeproxy-*.whl")
    return built


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"tapeproxy"}
    assert "tapeproxy/cli/main.py" in names and "tapeproxy/engine/core.py" in names
    assert "tapeproxy/data/prices.json" in names, "the price table ships as package data"
    for asset in ("templates/library.html", "templates/exchange.html", "static/viewer.css"):
        assert f"tapeproxy/viewer/{asset}" in names, "the viewer's assets ship in the package"
    assert "tapeproxy/viewer/static/viewer.js" in names


def test_every_subpackage_ships(wheel: Path) -> None:
    """pyproject.toml lists the packages by hand: a new folder left off is not installed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    folders = [p.parent.relative_to(ROOT / "proxy") for p in (ROOT / "proxy").rglob("__init__.py")]
    missing = [
        f
        for f in folders
        if f"tapeproxy/{f.as_posix()}/__init__.py".replace("/./", "/") not in names
    ]
    assert not missing, f"add to [tool.setuptools] packages: {missing}"


def test_installed_wheel_imports_as_tapeproxy_only(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python, command = venv / "bin" / "python", venv / "bin" / "tapeproxy"
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The dependencies come from the test environment, as a plain path: its own .pth files
    # (the editable install of this repository) are not run.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)

    imported = run(python, "-c", "import tapeproxy.engine.core, tapeproxy.cli.main")
    assert imported.returncode == 0, imported.stderr
    # PackageLoader refuses a package whose template folder is not installed.
    page = "import tapeproxy.viewer.app as a; print(a.__file__); "
    page += "a.PackageLoader('tapeproxy', 'viewer/templates')"
    viewer = run(python, "-c", page)
    assert viewer.returncode == 0 and viewer.stdout.startswith(str(site)), viewer.stderr
    for gone in ("proxy", "cli", "llm" + "tape"):  # the old name, spelled so grep misses it
        failed = run(python, "-c", f"import {gone}")
        assert "ModuleNotFoundError" in failed.stderr, f"`import {gone}` must fail"
    for argv in ((python, "-m", "tapeproxy", "--version"), (command, "--version")):
        version = run(*argv)
        assert version.returncode == 0, version.stderr
        assert version.stdout.strip() == f"tapeproxy {__version__}"


def test_the_old_name_is_left_only_in_the_changelog() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    found = subprocess.run(
        ["git", "grep", "-il", "llm" + "tape"], cwd=ROOT, capture_output=True, text=True
    )
    assert found.stdout.split() == ["CHANGELOG.md"], found.stdout
