"""Settings: the one source of truth for every option, and load_settings() (CLI > env > file)."""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Collection, Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from tapeproxy.engine.rules import parse_rule
from tapeproxy.engine.timing import parse_timing
from tapeproxy.errors import BadCassetteName, ConfigError
from tapeproxy.providers import BUILTIN
from tapeproxy.redaction.scrubber import check_field, check_pattern
from tapeproxy.store.names import check_cassette_name

ENV_PREFIX = "TAPEPROXY_"
MIB = 1024 * 1024
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"k": 1024, "m": MIB, "g": 1024 * MIB}
DEFAULT_CONFIG_FILE = "tapeproxy.toml"
UPSTREAM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
RESERVED_NAMES = frozenset({"v1", "__tapeproxy"})


class Mode(StrEnum):
    RECORD = "record"
    REPLAY = "replay"
    AUTO = "auto"
    ONCE = "once"
    PASSTHROUGH = "passthrough"


class RepeatPolicy(StrEnum):
    """What replay does when a run asks for a request more often than it was recorded."""

    ERROR = "error"
    REPEAT_LAST = "repeat-last"
    CYCLE = "cycle"


class Settings(BaseModel):
    """Every option of `tapeproxy serve`. Each field is a CLI option, an TAPEPROXY_* variable
    and a key of tapeproxy.toml (tests/unit/test_settings.py holds the three in step)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = Field(Mode.REPLAY, description="record, replay, auto, once or passthrough.")
    host: str = Field("127.0.0.1", description="Address to bind.")
    port: int = Field(8787, ge=0, le=65535, description="Port to bind (0 picks a free one).")
    cassettes: str = Field(
        "cassettes", description="The cassette library: a folder, or a file:// URL."
    )
    cassette: str = Field("default", description="Cassette used when a request names none.")
    upstream: dict[str, str] = Field(
        default_factory=dict,
        description=f"Add an upstream or override a built-in ({', '.join(BUILTIN)}); repeatable.",
    )
    live: tuple[str, ...] = Field(
        (), description="An upstream that runs live in replay mode (partial replay); repeatable."
    )
    record_failures: bool = Field(
        False, description="Also record 429/5xx answers and streams cut short."
    )
    replay_timing: str = Field(
        "none", description="none, recorded, or a factor (0.5 = twice as fast) for stream frames."
    )
    repeat: RepeatPolicy = Field(
        RepeatPolicy.ERROR, description="error, repeat-last or cycle, once recordings run out."
    )
    strict_order: bool = Field(False, description="Replay requests must come in recorded order.")
    fail_on_unused: bool = Field(
        False, description="Exit non-zero at shutdown if recordings went unused in replay."
    )
    ignore: tuple[str, ...] = Field(
        (), description="A match rule, e.g. openai:body:user (see README); repeatable."
    )
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to connect upstream.")
    read_timeout: float = Field(
        300.0, gt=0, description="Seconds the upstream may stay silent mid-answer."
    )
    shutdown_timeout: float = Field(
        5.0, ge=0, description="Seconds open connections get to finish at shutdown."
    )
    log_level: str = Field("info", description="debug, info, warning or error.")
    max_body: int = Field(
        32 * MIB, gt=0, description="Largest request body (bytes, or 32MiB, 512KiB); more is a 413."
    )
    max_record: int = Field(
        64 * MIB,
        gt=0,
        description="Largest answer recorded (bytes, or 64MiB); a larger one passes, unrecorded.",
    )
    admin_token: str | None = Field(
        None,
        description="Bearer token that control requests changing state (PUT) must carry.",
        repr=False,
    )

    @field_validator("cassettes", mode="before")
    @classmethod
    def _library(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("max_body", "max_record", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("admin_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and (len(value) < 16 or any(c.isspace() for c in value)):
            raise ValueError("use at least 16 characters, with no spaces")
        return value

    redact_field: tuple[str, ...] = Field(
        (),
        description="A body field scrubbed before recording, e.g. messages[*].content or "
        "user.email ([redact] fields in tapeproxy.toml); repeatable.",
    )
    redact_pattern: tuple[str, ...] = Field(
        (),
        description="A regular expression scrubbed from bodies before recording ([redact] "
        "patterns in tapeproxy.toml; one per line in the variable); repeatable.",
    )
    ready_file: Path | None = Field(
        None,
        description="Once ready, write the URL it serves on into this file (removed at exit); "
        "the Docker image's health check reads it.",
    )

    @field_validator("cassette")
    @classmethod
    def _cassette_name(cls, value: str) -> str:
        try:
            return check_cassette_name(value)
        except BadCassetteName as exc:
            raise ValueError(exc.message) from exc

    @field_validator("upstream")
    @classmethod
    def _upstreams(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if not UPSTREAM_NAME.match(name) or name in RESERVED_NAMES:
                raise ValueError(f"upstream name {name!r}: use lowercase letters, digits, - or _")
            if not re.match(r"^https?://[^/\s]+", url):
                raise ValueError(f"upstream {name}={url!r} needs an http:// or https:// URL")
            if re.search(r"[\s#]", url):  # each would go on the request line as it is
                raise ValueError(f"upstream {name}={url!r}: a URL holds no space and no #fragment")
            if "?" in url:  # the client's path would go after the query
                raise ValueError(
                    f"upstream {name}={url!r}: no ?query in an upstream URL (the client's path "
                    "and query are added to it)"
                )
        return {name: url.rstrip("/") for name, url in value.items()}

    @field_validator("live")
    @classmethod
    def _live(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        names = tuple(name.lower() for name in value)
        _check_known(names, info)
        return names

    @field_validator("strict_order")
    @classmethod
    def _order(cls, value: bool, info: ValidationInfo) -> bool:
        repeat = info.data.get("repeat")
        if value and isinstance(repeat, RepeatPolicy) and repeat is not RepeatPolicy.ERROR:
            raise ValueError(
                f"cannot be combined with --repeat {repeat.value}: a strict-order replay "
                "serves each recording once, in the recorded order"
            )
        return value

    @field_validator("replay_timing")
    @classmethod
    def _timing(cls, value: str) -> str:
        parse_timing(value)
        return value

    @field_validator("ignore")
    @classmethod
    def _rules(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        for spec in value:
            try:
                rule = parse_rule(spec)
            except ConfigError as exc:
                raise ValueError(exc.message) from exc
            if rule.upstream != "*":
                _check_known([rule.upstream], info, f"rule {spec!r}: ")
        return value

    @field_validator("redact_field")
    @classmethod
    def _redact_fields(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _checked(check_field, value)

    @field_validator("redact_pattern")
    @classmethod
    def _redact_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _checked(check_pattern, value)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be one of debug, info, warning, error")
        return value.lower()


def is_loopback(host: str) -> bool:
    """Whether an address to bind is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_size(text: str) -> int:
    """`1048576`, `512KiB`, `32MiB`, `1GB` (powers of 1024 either way) -> bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: write bytes, or a number with KiB, MiB or GiB")
    number, unit = int(match.group(1)), (match.group(2) or "").lower()
    return number * _UNITS.get(unit[:1], 1)


def _checked(check: Callable[[str], object], value: tuple[str, ...]) -> tuple[str, ...]:
    for item in value:
        try:
            check(item)
        except ConfigError as exc:
            raise ValueError(exc.message) from exc
    return value


def _check_known(names: Iterable[str], info: ValidationInfo, context: str = "") -> None:
    """A typo in an upstream name must stop the start, not quietly match nothing."""
    known = set(BUILTIN) | set(info.data.get("upstream") or {})
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(
            f"{context}no upstream named {', '.join(map(repr, unknown))}; known upstreams: "
            f"{', '.join(sorted(known))} (add one with --upstream NAME=URL)"
        )


class ToolSettings(BaseModel):
    """Options only the cassette tools read (not `serve`): a CLI option of theirs, an
    TAPEPROXY_* variable and a key of tapeproxy.toml, in the same order as Settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prices: Path | None = Field(
        None, description="A price table (JSON) over the shipped one, for the cost shown."
    )


def load_tool_settings(
    cli: Mapping[str, Any], environ: Mapping[str, str] | None = None, config: Path | None = None
) -> ToolSettings:
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


LIST_FIELDS = frozenset({"live", "ignore", "redact_field"})
LINE_FIELDS = frozenset({"redact_pattern"})  # a regular expression may hold a comma
DICT_FIELDS = frozenset({"upstream"})


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


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


REDACT_KEYS = {"fields": "redact_field", "patterns": "redact_pattern"}


def redact_table(table: Any, path: Path) -> dict[str, list[str]]:
    """`[redact] fields = [...]`, `patterns = [...]` -> redact_field, redact_pattern."""
    if not _lists_of_strings(table, REDACT_KEYS):
        raise ConfigError(
            f"config file {path}: [redact] takes the lists of strings fields (JSON paths) "
            "and patterns (regular expressions)"
        )
    return {REDACT_KEYS[key]: items for key, items in table.items()}


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
        if not sep or not name or not value:
            raise ConfigError(f"{where or option_name(field)}: {item!r} is not NAME=URL")
        pairs[name.strip()] = value.strip()
    return pairs


def _explain(exc: ValidationError, origin: Mapping[str, str]) -> str:
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        source = origin.get(field, "default")
        where = {
            "environment": env_name(field),
            "tapeproxy.toml": f"{field} in tapeproxy.toml",
        }.get(source, option_name(field))
        given = "(hidden)" if field == "admin_token" else error.get("input")
        lines.append(f"{option_name(field)} (from {where}): {given!r}: {error['msg']}")
    return "invalid settings:\n  " + "\n  ".join(lines)
