"""The package's shape: no import cycle among its modules, no module over 300 lines and no
function over 50."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The import package `tapeproxy` is built from these folders (pyproject.toml's package-dir).
FOLDERS = {"tapeproxy": ROOT / "proxy", "tapeproxy.cli": ROOT / "cli"}
MAX_LINES = 300
MAX_FUNCTION_LINES = 50


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its `__init__.py`)."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            found[".".join([package, *(p for p in parts if p != "__init__")])] = path
    return found


def _runtime(body: list[ast.stmt], typing: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: its top-level statements, those in
    a top-level `if` or `try` too, but not those under `if TYPE_CHECKING:` unless `typing`
    (nor any import inside a function, which runs only when it is called)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and (typing or "TYPE_CHECKING" not in ast.unparse(node.test)):
            yield from _runtime(node.body, typing)
            yield from _runtime(node.orelse, typing)
        elif isinstance(node, ast.Try):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _runtime(part, typing)
            yield from _runtime(node.finalbody, typing)


def _targets(node: ast.Import | ast.ImportFrom, package: str, known: Set[str]) -> Iterator[str]:
    """The modules an import statement names: `from a import b` names `a.b` when that is a
    module, else `a`."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from the package, one level up per extra dot
        anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        base = f"{anchor}.{base}" if base else anchor
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield sub if sub in known else base


def _packages(name: str) -> set[str]:
    """The packages a module sits in: `a.b.c` -> {`a`, `a.b`}."""
    parts = name.split(".")
    return {".".join(parts[:end]) for end in range(1, len(parts))}


def import_graph(typing: bool = False) -> dict[str, set[str]]:
    """Each module -> the package modules importing it runs: the ones it names and the
    packages they sit in (importing `a.b.c` runs `a/b/__init__.py` first). A module's own
    packages are already being imported when it runs: they count only when it names them
    (`from tapeproxy.store import open_store` in a module of tapeproxy.store). With `typing`,
    the imports under `if TYPE_CHECKING:` count too."""
    found = modules()
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        own = _packages(name) | {name}
        graph[name] = set()
        for node in _runtime(ast.parse(path.read_text(encoding="utf-8")).body, typing):
            for target in _targets(node, package, found.keys()):
                graph[name] |= (_packages(target) - own) & found.keys()
                if target in found and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: Mapping[str, Set[str]]) -> list[str] | None:
    """One import cycle as the modules along it (the first repeated at the end), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:  # every import of path[-1] walked: no cycle through it
                done.add(path.pop())
                stack.pop()
            elif following in path:
                return [*path[path.index(following) :], following]
            elif following not in done:
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return None


def test_no_module_of_the_package_imports_itself_back() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_store_modules_import_each_other_one_way_even_for_type_checking() -> None:
    """A circle hidden behind `if TYPE_CHECKING:` still ties two modules into one: neither
    can be read, moved or split without the other."""
    graph = import_graph(typing=True)
    store = {
        name: targets for name, targets in graph.items() if name.startswith("tapeproxy.store.")
    }
    assert "tapeproxy.store.lastrun" in graph["tapeproxy.store.protocol"]  # TYPE_CHECKING seen
    cycle = find_cycle({name: targets & store.keys() for name, targets in store.items()})
    assert cycle is None, "import cycle in tapeproxy.store: " + " -> ".join(cycle or ())


def test_the_import_walk_sees_the_imports_that_run() -> None:
    """A walk that missed imports would find no cycle anywhere: check it on known edges."""
    graph = import_graph()
    assert {"tapeproxy.cli.maintenance", "tapeproxy.cli.tools"} <= graph["tapeproxy.cli.main"]
    assert "tapeproxy.providers" in graph["tapeproxy.settings"]  # a package's __init__ counts
    assert "tapeproxy.cli.server" not in graph["tapeproxy.cli.main"]  # imported in a function
    assert "tapeproxy.exchange.model" not in graph["tapeproxy.redaction.scrubber"]  # TYPE_CHECKING


def test_a_cycle_is_found_and_shown() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": {"d"}, "d": {"b"}}) == [
        "b",
        "c",
        "d",
        "b",
    ]


def test_no_module_is_over_300_lines() -> None:
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in modules().values()
    }
    too_long = sorted(f"{name} ({n})" for name, n in lengths.items() if n > MAX_LINES)
    assert not too_long, (
        f"over {MAX_LINES} lines: {', '.join(too_long)}; split each along its responsibilities"
    )


def test_no_function_is_over_50_lines() -> None:
    long = [
        f"{path.relative_to(ROOT).as_posix()}: {node.name} ({node.end_lineno - node.lineno + 1})"
        for path in modules().values()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
