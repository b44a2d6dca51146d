"""The guide's two generated pages say what the code does: docs/reference/cli.md holds what
`tapeproxy --help` and each command's `--help` print, docs/reference/configuration.md every
Settings field with its flag, variable, tapeproxy.toml key and default. Each is written by
docs/gen_reference.py; a stale page fails here with the one command that writes it anew."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tapeproxy.cli.main import command_names
from tapeproxy.settings import Settings, ToolSettings, env_name, option_name

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "gen_reference.py"
REGENERATE = "python docs/gen_reference.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_what_the_generator_renders_today() -> None:
    for path, text in generator().pages().items():
        shown = path.relative_to(ROOT)
        assert path.is_file(), f"{shown} is missing: run `{REGENERATE}`"
        assert path.read_text(encoding="utf-8") == text, (
            f"{shown} is stale (a command, an option or its help changed): run `{REGENERATE}` "
            "and commit the page"
        )


def page_blocks(path: Path) -> dict[str, str]:
    """`## tapeproxy CMD` heading -> the text block under it."""
    text = path.read_text(encoding="utf-8")
    found = re.findall(r"^## (tapeproxy(?: \S+)*)\n\n```text\n(.*?)\n```$", text, re.M | re.S)
    return {title: block + "\n" for title, block in found}


@pytest.mark.parametrize("command", ["", *command_names()])
def test_the_installed_command_prints_the_help_the_cli_page_shows(command: str) -> None:
    """The console script itself, as a user runs it, 80 columns and no colour."""
    script = Path(sys.executable).with_name("tapeproxy")
    assert script.is_file(), f"no console script beside {sys.executable}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEPROXY_")}
    env.update(COLUMNS="80", NO_COLOR="1", TERM="dumb")
    args = command.split()
    printed = subprocess.run(
        [str(script), *args, "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert printed.returncode == 0, printed.stderr
    blocks = page_blocks(ROOT / "docs" / "reference" / "cli.md")
    title = f"tapeproxy {command}".strip()
    assert title in blocks, f"docs/reference/cli.md has no `{title}`: run `{REGENERATE}`"
    assert printed.stdout == blocks[title], (
        f"`{title} --help` differs from docs/reference/cli.md: run `{REGENERATE}`"
    )


def test_the_settings_page_has_a_row_for_every_field_with_its_names_and_help() -> None:
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in page.splitlines()}
    for model in (Settings, ToolSettings):
        for field, info in model.model_fields.items():
            row = next((r for key, r in rows.items() if f"`{option_name(field)}`" in key), None)
            assert row is not None, f"no row for {option_name(field)}: run `{REGENERATE}`"
            assert f"`{env_name(field)}`" in row and f"`{field}`" in row, row
            assert " ".join((info.description or "").split()) in row.replace("\\|", "|"), row
