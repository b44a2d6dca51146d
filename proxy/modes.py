"""The modes a server runs in: a module of their own, light to import, so the pytest plugin
names them without loading the settings (pydantic) in a pytest run, or an xdist controller,
that starts no server."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    RECORD = "record"
    REPLAY = "replay"
    AUTO = "auto"
    ONCE = "once"
    PASSTHROUGH = "passthrough"


# The modes that serve recordings (and so read them): not record, not passthrough.
SERVES_RECORDINGS = frozenset({Mode.REPLAY, Mode.AUTO, Mode.ONCE})
