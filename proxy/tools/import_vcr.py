"""VCR.py and pytest-recording cassettes read: every vcrpy layout (the `interactions` of
1.0 on, the bare list before it, httpx's early `status_code`/`content`), YAML or JSON,
bodies as text, bytes or `!!binary`; each interaction as a `Whole` to import."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tapeproxy.store.names import cassette_for_test
from tapeproxy.tools.importing import Skip, Whole
from tapeproxy.tools.importrun import MAX_FILE

SUFFIXES = (".yaml", ".yml", ".json")
# Tags older vcrpy wrote for its own classes: plain mappings and lists once taken off (as
# vcrpy's own migration does), so a safe loader reads them.
OLD_TAGS = (
    "!!python/object:vcr.request.Request",
    "!!python/object/apply:__builtin__.frozenset",
    "!!python/object/apply:builtins.frozenset",
)
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def vcr_files(paths: Sequence[Path], cassette: str | None) -> list[tuple[Path, str]]:
    """Each cassette file with the tapeproxy cassette it goes to: under a folder, named
    after its path there without the extension (pytest-recording's `test_module/test_name`);
    a file given alone, after its name; or `cassette` for all."""
    found: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES):
                if file.is_file():
                    name = plugin_name(file.relative_to(path).with_suffix("").as_posix())
                    found.append((file, cassette or name))
        else:
            found.append((path, cassette or path.stem))
    return found


def plugin_name(name: str) -> str:
    """The cassette the tapeproxy plugin gives the test pytest-recording named a cassette
    after (`test_module/TestClass.test_name[param]`): `test_module/TestClass/test_name.param`
    (store.names.cassette_for_test). A name of no test's (a cassette a `vcr` marker named)
    is kept as it is."""
    *folders, last = name.split("/")
    base, bracket, param = last.partition("[")
    owner, dot, test = base.partition(".")
    if not folders or (bracket and not param.endswith("]")):
        return name
    if dot and not (owner.startswith("Test") and test.startswith("test") and "." not in test):
        return name
    if not (test if dot else base).startswith("test"):
        return name
    names = [owner, test] if dot else [base]
    names[-1] += bracket + param
    nodeid = "/".join(folders) + ".py::" + "::".join(names)
    found = cassette_for_test(nodeid)
    # One the plugin hashes (a parameter with a space in it) hashes the whole node id, and
    # where the tests live is not in the file's path: kept, and refused with why.
    return name if found.endswith("-" + hashlib.sha256(nodeid.encode()).hexdigest()[:8]) else found


def read_vcr(raw: bytes) -> Iterator[Whole | str]:
    """Each interaction of a VCR.py cassette, or why it cannot be imported; Skip when the
    file is no VCR.py cassette."""
    data = _parse(raw)
    interactions = data.get("interactions") if isinstance(data, dict) else data
    if not isinstance(interactions, list):
        raise Skip("no VCR.py cassette: it holds no `interactions` list")
    for item in interactions:
        try:
            yield _whole(item)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            yield f"not a VCR.py interaction ({type(exc).__name__}: {exc})"


def _parse(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except RecursionError as exc:
            raise Skip("not readable JSON: it nests too deeply") from exc
        except ValueError:
            pass  # YAML is a superset of JSON's look: let the YAML parser say what is wrong
    for tag in OLD_TAGS:
        text = text.replace(tag, "")
    try:
        data = yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()
        raise Skip(f"not readable YAML or JSON: {' '.join(first[:3])}") from exc
    except RecursionError as exc:  # the pure-Python parser, where libyaml is not there
        raise Skip("not readable YAML: it nests too deeply") from exc
    _bounded(data, MAX_FILE)
    return data


def _bounded(data: Any, limit: int) -> None:
    """Skip a document that, its aliases written out, is over `limit` (a billion laughs: a
    kilobyte of anchors that names the same list 9**9 times) or holds itself. An alias is
    one object however often it is named, so the document is small until read; counted
    once per object, without recursion (as deep as the parser allows)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if done:
            size = 1 + sum(sizes.get(id(one), _scalar(one)) for one in _children(node))
            if size > limit:
                raise Skip(
                    f"its aliases, written out, make it over {limit:,} bytes: "
                    "no VCR.py cassette names that much"
                )
            sizes[id(node)] = size
            open_.discard(id(node))
        elif id(node) in open_:
            raise Skip("it holds itself (an alias to a list or mapping it is in)")
        elif id(node) not in sizes:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((one, False) for one in _children(node))


def _children(node: dict[Any, Any] | list[Any]) -> Iterable[Any]:
    return [*node.keys(), *node.values()] if isinstance(node, dict) else node


def _scalar(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes)) else 1


def _whole(item: Mapping[str, Any]) -> Whole:
    request, response = item["request"], item["response"]
    if "status_code" in response:  # vcrpy's first httpx stub: the text of the answer
        status, body = response["status_code"], response.get("content")
    else:
        status = response["status"]["code"] if isinstance(response["status"], dict) else None
        body = (response.get("body") or {}).get("string")
    if not isinstance(status, int):
        raise ValueError(f"its status is {status!r}, not a number")
    return Whole(
        method=str(request["method"]),
        url=_uri(request),
        headers=_headers(request.get("headers")),
        body=_bytes(request.get("body")),
        status=status,
        answer_headers=_headers(response.get("headers")),
        answer=_bytes(body),
    )


def _uri(request: Mapping[str, Any]) -> str:
    if "uri" in request:
        return str(request["uri"])
    scheme, host, port = request["protocol"], request["host"], int(request["port"])
    shown = "" if port == {"http": 80, "https": 443}.get(scheme) else f":{port}"
    return f"{scheme}://{host}{shown}{request['path']}"


def _headers(headers: Any) -> list[tuple[str, str]]:
    """vcrpy keeps each header's values as a list (a string in old files)."""
    pairs: list[tuple[str, str]] = []
    for name, values in (headers or {}).items():
        for value in values if isinstance(values, list) else [values]:
            pairs.append((str(name), _text(value)))
    return pairs


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _bytes(body: Any) -> bytes:
    """A body as vcrpy kept it: text (UTF-8 on the wire), bytes, `{string: ...}`, or none."""
    if isinstance(body, Mapping):
        body = body.get("string")
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8", "surrogateescape")
    raise ValueError(f"a body of type {type(body).__name__}")
