"""Settings: the one source of truth for every option, its checks, and the names it has on the
command line and in the environment (loading it: tapeproxy.sources)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tapeproxy.engine.rules import parse_rule
from tapeproxy.engine.timing import parse_timing
from tapeproxy.errors import BadCassetteName, ConfigError
from tapeproxy.faults.spec import parse_fault
from tapeproxy.forward.hosts import AllowedHosts, HostPatterns
from tapeproxy.modes import Mode
from tapeproxy.providers import BUILTIN
from tapeproxy.redaction.formats import check_keep
from tapeproxy.redaction.scrubber import check_field, check_pattern
from tapeproxy.sizes import parse_size
from tapeproxy.store.names import check_cassette_name
from tapeproxy.upstream.urls import check_upstreams

ENV_PREFIX = "TAPEPROXY_"
MIB = 1024 * 1024
CACHE_SIZE = "Largest an s3:// library's local cache grows (bytes, or 1GiB); LRU out first."


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
        "cassettes",
        description="The cassette library: a folder, a file:// URL, or s3://BUCKET/PREFIX "
        "(an S3-compatible store, set up by AWS_ENDPOINT_URL and the other AWS_ variables).",
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
    resign: Literal["aws"] | None = Field(  # one signer: pydantic says `Input should be 'aws'`
        None, description="aws: re-sign SigV4 requests going live (Bedrock)."
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
        (), description="A match rule, e.g. openai:body:user (docs/matching.md); repeatable."
    )
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to connect upstream.")
    read_timeout: float = Field(
        300.0, gt=0, description="Seconds the upstream may be silent, or read after a client left."
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
    max_frame: int = Field(
        16 * MIB, gt=0, description="Largest WebSocket frame (bytes, or 16MiB); more closes 1009."
    )
    cache_size: int = Field(1024 * MIB, gt=0, description=CACHE_SIZE)
    admin_token: str | None = Field(
        None,
        description="Bearer token that control requests changing state (PUT) must carry.",
        repr=False,
    )

    @field_validator("cassettes", mode="before")
    @classmethod
    def _library(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("max_body", "max_record", "max_frame", "cache_size", mode="before")
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
    fault: tuple[str, ...] = Field(
        (),
        description="A fault some requests get instead of their answer: KIND[:NAME=VALUE][@WHEN], "
        "e.g. rate_limit@1 or cut:after=2@p=0.1 (docs/faults.md; [faults] specs in "
        "tapeproxy.toml; one per line in the variable); repeatable.",
    )
    fault_seed: int | None = Field(
        None, ge=0, description="Seed of probabilistic faults (default: drawn and printed)."
    )
    redact_keep: tuple[str, ...] = Field(
        (),
        description="A well-known key format left unscrubbed: openai, anthropic, google, "
        "github, openai-ephemeral, aws, aws-session, slack, jwt, or all ([redact] keep in "
        "tapeproxy.toml). Every one is scrubbed from bodies and streams by default; repeatable.",
    )
    ready_file: Path | None = Field(
        None,
        description="Once ready, write the URL it serves on into this file (removed at exit); "
        "the Docker image's health check reads it.",
    )
    forward: bool = Field(False, description="Also serve the HTTPS forward proxy on this port.")
    ca_cert: Path | None = Field(None, description="Where the forward proxy's CA cert is written.")
    intercept: HostPatterns = Field(
        (), description="A host to decrypt, or *.example.com; repeatable."
    )
    allow_host: AllowedHosts = Field(
        (), description="A host a replay tunnels, not refuses; repeatable."
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
        return check_upstreams(value)

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

    @field_validator("redact_field", "redact_pattern", "fault")
    @classmethod
    def _each_checked(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """Each item parsed by its field's parser, one line naming a bad one."""
        parsers = {
            "redact_field": check_field,
            "redact_pattern": check_pattern,
            "fault": parse_fault,
        }
        return _checked(parsers[str(info.field_name)], value)

    @field_validator("redact_keep")
    @classmethod
    def _redact_keep(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        _checked(lambda name: check_keep([name]), value)
        return check_keep(value)

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


def option_name(field: str) -> str:
    """A field's command-line option: `max_body` -> `--max-body`."""
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    """A field's environment variable: `max_body` -> `TAPEPROXY_MAX_BODY`."""
    return ENV_PREFIX + field.upper()
