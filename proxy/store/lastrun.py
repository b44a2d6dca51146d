"""The note of a cassette's last finished replay run: which recordings it used and which it
left unused, each unused one with a digest of its content then, and the run's mode, start
and counts, so prune can say which run it goes by. `tapeproxy prune` reads it. Every
backend keeps it at the same place, `note_name`, in the library's state folder
`.tapeproxy/`, never beside the exchanges (see store/state.py): the start time in it never
reaches a cassette."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange.model import Exchange, dump_exchange
from tapeproxy.modes import Mode
from tapeproxy.problems import one_line
from tapeproxy.store.names import check_folder_name

# 2: digests of the unused recordings; 3: misses, failed, faults; 4: mode, started, served,
# recorded
LAST_RUN_VERSION = 4
# The notes, one per cassette, in the library's state folder (a dot folder: no cassette name
# starts with a dot, and every walk of the library skips them).
NOTES = ".tapeproxy/runs"
# No cassette name holds it, so each name has a note of its own in one flat folder, and the
# note's name never grows past the cassette's (a nested name as nested folders could meet
# another's note: `a.json` and the folder of `a.json/b`).
SLASH = "~"
# A fault's kind as a note holds it (`rate_limit`, `server_error`): a word, so that a note
# edited by hand cannot put markup in a report's Markdown or a character XML refuses in its
# JUnit document.
FaultKind = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]


class LastRun(BaseModel):
    """What the last finished replay run of a cassette used and left unused, as file names,
    with the digest (`recording_digest`) of each unused one as it was when the run ended:
    prune deletes a file only while it still holds that content, so a file renumbered by
    rekey or redact, or recorded anew since, is never taken for the one the run left unused.
    Recordings of upstreams that ran live (partial replay) are in neither list.

    `misses` counts the run's requests that no recording answered, `failed` says the run did
    not pass (a pytest test that failed or errored), and `faults` counts the faults it served
    by kind. `mode` is the run's, `started` when it began (UTC, to the second), `served` and
    `recorded` how many recordings it served from the cassette and wrote into it (an `auto`
    run does both). A note of an older version reads with none of them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(default=LAST_RUN_VERSION, ge=1, le=LAST_RUN_VERSION)
    used: list[str] = Field(default_factory=list)
    unused: list[str] = Field(default_factory=list)
    digests: dict[str, str] = Field(default_factory=dict)  # unused file -> recording_digest
    misses: int = Field(default=0, ge=0)
    failed: bool = False
    faults: dict[FaultKind, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    mode: Mode | None = None
    started: AwareDatetime | None = None
    served: int = Field(default=0, ge=0)
    recorded: int = Field(default=0, ge=0)


def recording_digest(exchange: Exchange) -> str:
    """sha256 of a recording as tapeproxy writes it (so an older schema on disk and its
    migrated form have one digest)."""
    return hashlib.sha256(dump_exchange(exchange)).hexdigest()


def dump_last_run(record: LastRun) -> bytes:
    data = record.model_dump(mode="json")
    data["used"], data["unused"] = sorted(record.used), sorted(record.unused)
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def load_last_run(raw: bytes) -> LastRun:
    return LastRun.model_validate_json(raw)


def note_name(cassette: str) -> str:
    """`.tapeproxy/runs/<name>.json` in the library, each `/` of a nested name written `~`."""
    return f"{NOTES}/{check_folder_name(cassette).replace('/', SLASH)}.json"


def read_note(raw: bytes, where: str) -> LastRun:
    """A note's bytes read back; CassetteCorrupt in one line naming `where` when they cannot
    be."""
    try:
        return load_last_run(raw)
    except ValueError as exc:  # bad JSON, and pydantic's ValidationError
        raise unreadable_note(where, exc) from exc


def unreadable_note(where: str, exc: BaseException) -> CassetteCorrupt:
    return CassetteCorrupt(
        f"cannot read {where}: {one_line(exc)}; delete it, and replay the cassette again"
    )
