"""The spares (store/spares.py) seen from outside: a recording server (its scribe's journal,
and the server's own) makes the files a plain open would, in a team's shared folder too."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tapeproxy.store import journal
from tapeproxy.store import spares as spares_module
from tests.conftest import MakeProxy
from tests.e2e.test_scribe import ask, scribe_at_work
from tests.unit.test_review_spares import another_group

pytestmark = pytest.mark.skipif(
    not journal.SUPPORTED or not spares_module.SUPPORTED or not Path("/proc/self/stat").exists(),
    reason="spares are made where the journal and O_TMPFILE are",
)


@pytest.mark.parametrize("scribe", [True, False])
def test_a_recording_server_keeps_a_setgid_cassette_folder_s_group_on_every_file(
    make_proxy: MakeProxy, cassettes: Path, scribe: bool
) -> None:
    group = another_group()
    folder = cassettes / "default"
    folder.mkdir(parents=True)
    os.chown(folder, -1, group)
    folder.chmod(0o2775)
    proxy = make_proxy(mode="record", scribe=scribe)
    if scribe:
        scribe_at_work(proxy, cassettes)
    for n in range(40):  # the journal's halves, then its spares, are made meanwhile
        assert ask(proxy, f"question {n}").status_code == 200
        time.sleep(0.01)
    proxy.stop()
    groups = {path.name: path.stat().st_gid for path in folder.glob("*.json")}
    assert len(groups) >= 40
    assert {name for name, gid in groups.items() if gid != group} == set()
