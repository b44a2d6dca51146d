"""Where settings come from: the command line over TAPEPROXY_* over tapeproxy.toml (its
[match.*] and [redact] tables too), merged and validated once."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tapeproxy.errors import ConfigError
from tapeproxy.problems import RAISED, said
from tapeproxy.redaction.secrets import masked_userinfo
from tapeproxy.settings import Settings, ToolSettings, env_name, option_name

DEFAULT_CONFIG_FILE = "tapeproxy.toml"
LIST_FIELDS = frozenset(
    {"live", "ignore", "redact_field", "redact_keep", "intercept", "allow_host"}
)
# A regular expression, a fault spec may hold a comma.
LINE_FIELDS = frozenset({"redact_pattern", "fault"})
DICT_FIELDS = frozenset({"upstream"})


def load_settings(
    cli: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config: Path | None = None,
    fields: Collection[str] | None = None,
) -> Settings:
    """Merge the three sources, command line first, and validate once.

    `cli` holds only the options given on the command line (None means not given). `fields`,
    when given, are the only ones read: a cassette tool is not stopped by a serve-only
    setting (an TAPEPROXY_LIVE naming an upstream that serve gets on its command line)."""
    environ = os.environ if environ is None else environ
    layers: list[tuple[str, dict[str, Any]]] = [
        ("tapeproxy.toml", _from_file(config, environ, Settings)),
        ("environment", _from_env(environ, Settings)),
        ("command line", {k: v for k, v in cli.items() if v is not None and v != ()}),
    ]
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        for key, value in values.items():
            if fields is not None and key not in fields:
                continue
            # Upstreams are named: a later layer adds or overrides names, it keeps the rest.
            if key in DICT_FIELDS and isinstance(merged.get(key), dict):
                value = {**merged[key], **value}
            merged[key] = value
            origin[key] = source
    try:
        return Settings(**merged)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, origin)) from exc


def load_tool_settings(
    cli: Mapping[str, Any], environ: Mapping[str, str] | None = None, config: Path | None = None
) -> ToolSettings:
    """The cassette tools' own options, from the same three sources as load_settings()."""
    environ = os.environ if environ is None else environ
    merged = {
        **_from_file(config, environ, ToolSettings),
        **_from_env(environ, ToolSettings),
        **{key: value for key, value in cli.items() if value is not None},
    }
    try:
        return ToolSettings(**merged)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, {})) from exc


def _from_file(
    config: Path | None, environ: Mapping[str, str], model: type[BaseModel]
) -> dict[str, Any]:
    """The keys of tapeproxy.toml that `model` has (a key neither model has is an error)."""
    path = config or (Path(environ[env_name("config")]) if env_name("config") in environ else None)
    if path is None:
        path = Path(DEFAULT_CONFIG_FILE)
        if not path.is_file():
            return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from exc
    values = {key.replace("-", "_"): value for key, value in data.items()}
    if "match" in values:
        values["ignore"] = [*values.get("ignore", []), *match_tables(values.pop("match"), path)]
    if "redact" in values:
        values.update(redact_table(values.pop("redact"), path))
    if "faults" in values:
        values.update(faults_table(values.pop("faults"), path))
    known = set(Settings.model_fields) | set(ToolSettings.model_fields)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown key(s) {', '.join(unknown)}; "
            f"known keys: {', '.join(sorted(known))}"
        )
    if isinstance(values.get("upstream"), list):
        values["upstream"] = parse_pairs(values["upstream"], "upstream", f"upstream in {path}")
    return {key: value for key, value in values.items() if key in model.model_fields}


MATCH_KEYS = {
    "ignore_body": "body",
    "ignore_query": "query",
    "ignore_headers": "header",
    "key_headers": "key-header",
}


def _lists_of_strings(table: Any, keys: Mapping[str, str]) -> bool:
    """Whether a TOML table holds only `keys`, each a list of strings (a bare string would be
    split into one-letter rules)."""
    return (
        isinstance(table, dict)
        and not set(table) - set(keys)
        and all(
            isinstance(items, list) and all(isinstance(item, str) for item in items)
            for items in table.values()
        )
    )


def match_tables(tables: Any, path: Path) -> list[str]:
    """`[match.openai] ignore_body = ["user"]` -> the `--ignore` spec `openai:body:user`."""
    if not isinstance(tables, dict):
        raise ConfigError(f"config file {path}: `match` must be tables like [match.openai]")
    specs = []
    for upstream, table in tables.items():
        if not _lists_of_strings(table, MATCH_KEYS):
            raise ConfigError(
                f"config file {path}: [match.{upstream}] takes the lists of strings "
                f"{', '.join(MATCH_KEYS)}"
            )
        for key, names in table.items():
            specs += [f"{upstream}:{MATCH_KEYS[key]}:{name}" for name in names]
    return specs


REDACT_KEYS = {"fields": "redact_field", "patterns": "redact_pattern", "keep": "redact_keep"}


def redact_table(table: Any, path: Path) -> dict[str, list[str]]:
    """`[redact] fields = [...]`, `patterns = [...]`, `keep = [...]` -> redact_field,
    redact_pattern, redact_keep."""
    if not _lists_of_strings(table, REDACT_KEYS):
        raise ConfigError(
            f"config file {path}: [redact] takes the lists of strings fields (JSON paths), "
            "patterns (regular expressions) and keep (key formats left unscrubbed, or all)"
        )
    return {REDACT_KEYS[key]: items for key, items in table.items()}


def faults_table(table: Any, path: Path) -> dict[str, Any]:
    """`[faults] specs = [...]`, `seed = N` -> fault, fault_seed."""
    specs = table.get("specs", []) if isinstance(table, dict) else None
    if (
        not isinstance(table, dict)
        or set(table) - {"specs", "seed"}
        or not isinstance(specs, list)
        or not all(isinstance(spec, str) for spec in specs)
    ):
        raise ConfigError(
            f"config file {path}: [faults] takes specs (a list of fault specs) and seed"
        )
    found: dict[str, Any] = {"fault": specs} if specs else {}
    if "seed" in table:
        found["fault_seed"] = table["seed"]
    return found


def _from_env(environ: Mapping[str, str], model: type[BaseModel]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for field in model.model_fields:
        raw = environ.get(env_name(field))
        if raw is None or raw == "":
            continue
        if field in LIST_FIELDS:
            values[field] = tuple(part.strip() for part in raw.split(",") if part.strip())
        elif field in LINE_FIELDS:
            values[field] = tuple(line for line in raw.splitlines() if line)
        elif field in DICT_FIELDS:
            values[field] = parse_pairs(raw.split(","), field, env_name(field))
        else:
            values[field] = raw
    return values


def parse_pairs(items: Any, field: str, where: str | None = None) -> dict[str, str]:
    """NAME=URL items (from the CLI, a comma-separated variable or a TOML list) -> dict.
    `where` names the source in messages (the option itself by default)."""
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = str(item).strip().partition("=")
        if not isinstance(item, str) or not sep or not name or not value:
            shown = _masked(item) if not isinstance(item, str) else _masked_pair(item)
            raise ConfigError(f"{where or option_name(field)}: {shown!r} is not NAME=URL")
        pairs[name.strip()] = value.strip()
    return pairs


def _masked_pair(item: str) -> str:
    name, sep, value = item.partition("=")
    return f"{masked_userinfo(name)}{sep}{masked_userinfo(value)}"


def _masked(value: Any) -> Any:
    """An upstream setting (a URL, or what TOML made of one: a list, a table) with the user
    and password of each URL in it masked (masked_userinfo), for a message to quote."""
    if isinstance(value, str):
        return masked_userinfo(value)
    if isinstance(value, list | tuple):
        return [_masked(one) for one in value]
    if isinstance(value, dict):
        return {_masked(k): _masked(v) for k, v in value.items()}
    return value


def _shown(field: str, given: Any) -> Any:
    """A refused value as a message quotes it: never the admin token, nor the password of
    an upstream URL (tapeproxy.toml's `upstream = "https://user:pass@host"`, not a table)."""
    if field == "admin_token":
        return "(hidden)"
    return _masked(given) if field == "upstream" else given


def _explain(exc: ValidationError, origin: Mapping[str, str]) -> str:
    """Each problem in one line, without pydantic's noise (tapeproxy.problems): the option, the
    source it came from when not the command line, and the value where the message does not
    name it (a check of ours names it)."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        option, message = option_name(field), said(error)
        where = {
            "environment": f"{option} (from {env_name(field)})",
            "tapeproxy.toml": f"{option} (from {field} in tapeproxy.toml)",
        }.get(origin.get(field, ""), option)
        if error["type"] not in RAISED:
            given = _shown(field, error.get("input"))
            lines.append(f"{where} {given!r}: {message}")
        elif where == option and message.startswith(option):
            lines.append(message)
        else:
            lines.append(f"{where}: {message}")
    if len(lines) == 1:  # one problem, one line
        return f"invalid settings: {lines[0]}"
    return "invalid settings:\n  " + "\n  ".join(lines)
