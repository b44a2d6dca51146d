"""The note a cassette keeps of its last finished replay run: which recordings it used and
which it left unused. `llmtape prune` reads it; it holds no wall-clock time."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

# Beside the exchanges, and no exchange name: keys, verify and diff never see it. It starts
# with a dot like a temporary file, but does not end in `.tmp`, so it is not a leftover.
LAST_RUN_FILE = ".llmtape-run.json"
LAST_RUN_VERSION = 1


class LastRun(BaseModel):
    """What the last finished replay run of a cassette used and left unused, as file names.
    Recordings of upstreams that ran live (partial replay) are in neither list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(default=LAST_RUN_VERSION, ge=1, le=LAST_RUN_VERSION)
    used: list[str] = Field(default_factory=list)
    unused: list[str] = Field(default_factory=list)


def dump_last_run(record: LastRun) -> bytes:
    data = record.model_dump()
    data["used"], data["unused"] = sorted(record.used), sorted(record.unused)
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def load_last_run(raw: bytes) -> LastRun:
    return LastRun.model_validate_json(raw)
