"""The engine, read from its source: it holds no web framework or HTTP client (not even
through what it imports) and never imports a door or the CLI. Cycles and sizes, for the whole
package: test_layout.py."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = {"tapeproxy": ROOT / "proxy", "tapeproxy.cli": ROOT / "cli"}
ENGINE = sorted((ROOT / "proxy" / "engine").glob("*.py"))
WEB = {"starlette", "aiohttp", "uvicorn"}


def source_of(module: str) -> Path | None:
    """The file of a tapeproxy module (a package's __init__.py), or None for another one."""
    for prefix, folder in sorted(PACKAGE.items(), key=lambda item: -len(item[0])):
        if module == prefix or module.startswith(prefix + "."):
            path = folder.joinpath(*module[len(prefix) :].lstrip(".").split("."))
            for found in (path.with_suffix(".py"), path / "__init__.py"):
                if found.is_file():
                    return found
            return None
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "proxy").with_suffix("").parts
    return ".".join(("tapeproxy", *(p for p in parts if p != "__init__")))


def imports(path: Path) -> Iterator[str]:
    """Every module `path` imports, `from X import name` as X.name where that is a module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                if source_of(f"{node.module}.{alias.name}") is not None:
                    yield f"{node.module}.{alias.name}"


def reached(start: Path) -> set[str]:
    """Every module imported from `start`, following tapeproxy's own modules all the way."""
    seen: set[str] = set()
    todo = [start]
    done: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in done:
            continue
        done.add(path)
        for name in imports(path):
            seen.add(name)
            found = source_of(name)
            if found is not None:
                todo.append(found)
    return seen


@pytest.mark.parametrize("path", ENGINE, ids=lambda path: path.name)
def test_the_engine_holds_no_web_framework_or_http_client_and_no_door(path: Path) -> None:
    direct = {name.split(".")[0] for name in imports(path)}
    assert not direct & WEB, f"{path.name} imports {direct & WEB}"
    every = reached(path)
    assert not {name.split(".")[0] for name in every} & WEB, f"{path.name} reaches a web module"
    backwards = sorted(n for n in every if n.startswith(("tapeproxy.doors", "tapeproxy.cli")))
    assert not backwards, f"{path.name} reaches {backwards}: a request travels one way"
