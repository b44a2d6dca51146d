"""The engine, every CLI tool and the pytest plugin reach storage only through the store seam:
`open_store` and the CassetteStore protocol. No module outside proxy/store/ imports a
backend or its file plumbing, so a new backend (S3) is one file in store/ and a row."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "tapeproxy"
# The modules of store/ that are one backend's own: only store/ imports them.
BACKEND_MODULES = {
    "tapeproxy.store.files",
    "tapeproxy.store.durable",
    "tapeproxy.store.upkeep",
    "tapeproxy.store.state",
    "tapeproxy.store.s3",
    "tapeproxy.store.s3cache",
    "tapeproxy.store.s3budget",
    "tapeproxy.store.s3client",
}
BACKEND_NAMES = {
    "FileStore",
    "files",
    "durable",
    "upkeep",
    "state",
    "s3",
    "s3cache",
    "s3budget",
    "s3client",
}  # from tapeproxy.store


def outside_store() -> list[Path]:
    """Every module of the package (proxy/ and cli/) but those of proxy/store/."""
    store = ROOT / "proxy" / "store"
    found = [*ROOT.joinpath("proxy").rglob("*.py"), *ROOT.joinpath("cli").rglob("*.py")]
    return sorted(path for path in found if store not in path.parents)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, what) for each import of a backend module or name in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _backend(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if _backend(node.module):
                found.append((node.lineno, node.module))
            elif node.module == f"{PACKAGE}.store":
                found += [(node.lineno, a.name) for a in node.names if a.name in BACKEND_NAMES]
    return found


def library_paths(path: Path) -> list[int]:
    """Lines of `path` that make a path of `settings.cassettes` (`Path(...)`, `... / name`):
    the library is a location a backend opens, maybe no folder at all."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Path":
            operands = node.args
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            operands = [node.left]
        else:
            continue
        if any(_is_library(operand) for operand in operands):
            found.append(node.lineno)
    return found


def _is_library(node: ast.expr) -> bool:
    """`settings.cassettes` (also `self.settings.cassettes`)."""
    if not isinstance(node, ast.Attribute) or node.attr != "cassettes":
        return False
    owner = node.value
    return getattr(owner, "id", None) == "settings" or getattr(owner, "attr", None) == "settings"


def _backend(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in BACKEND_MODULES)


def test_the_package_is_found() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in outside_store()}
    assert {"proxy/engine/core.py", "cli/server.py", "cli/pytest_plugin.py"} <= names
    assert not any(name.startswith("proxy/store/") for name in names)


@pytest.mark.parametrize("path", outside_store(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_outside_the_store_imports_a_backend(path: Path) -> None:
    assert imports(path) == [], f"{path.relative_to(ROOT)}: use open_store() and CassetteStore"


@pytest.mark.parametrize("path", outside_store(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_outside_the_store_makes_a_path_of_the_library(path: Path) -> None:
    assert library_paths(path) == [], f"{path.relative_to(ROOT)}: ask the store (where())"


def test_the_check_sees_each_way_of_importing_a_backend(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tapeproxy.store.files\n"
        "from tapeproxy.store.durable import write_atomic\n"
        "from tapeproxy.store import FileStore, open_store\n"
        "from tapeproxy.store import state\n"
        "from tapeproxy.store.protocol import CassetteStore\n"
    )
    assert imports(sample) == [
        (1, "tapeproxy.store.files"),
        (2, "tapeproxy.store.durable"),
        (3, "FileStore"),
        (4, "state"),
    ]


def test_the_check_sees_a_path_made_of_the_library(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "a = Path(settings.cassettes)\n"
        "b = settings.cassettes / 'default'\n"
        "c = open_store(settings.cassettes)\n"
        "d = Path(store.where('default'))\n"
    )
    assert library_paths(sample) == [1, 2]
