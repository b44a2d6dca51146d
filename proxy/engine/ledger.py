"""What runs leave when they end: each one's summary (for stats, the shutdown log and
--fail-on-unused), the note of a replay run for `tapeproxy prune`, the recordings a record run
superseded deleted, and what a run that is not over for prune used, for the next one."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from datetime import UTC, datetime

from tapeproxy.engine.run import Run
from tapeproxy.engine.stats import RunSummary
from tapeproxy.errors import TapeproxyError
from tapeproxy.store.lastrun import LastRun, recording_digest
from tapeproxy.store.protocol import CassetteStore, exchange_file

MAX_LISTED = 50
MAX_ENDED = 200  # ended runs kept for stats and the shutdown log (those with news only)
# Unused recordings a run's note lists for prune, each read and digested when the run ends:
# 100,000 of them took the server over 20 s to stop (and a SIGKILL).
MAX_NOTED = 5_000
log = logging.getLogger("tapeproxy")


class Ledger:
    """The runs that ended, and what ending one does on disk. `finish`, `summary`,
    `forget_note` and `untouched` read and write files: call them off the event loop."""

    def __init__(self, store: CassetteStore, live: frozenset[str] = frozenset()) -> None:
        self._store = store
        self._live = live
        # What the runs that ended without their own note used, per cassette: the next run
        # of it carries on from them (Run.inherited). Recordings on disk only: bounded.
        self._carried: dict[str, set[tuple[str, int]]] = {}
        self.ended: deque[RunSummary] = deque(maxlen=MAX_ENDED)
        self.ended_unused = 0  # unused recordings over every ended run, listed or not
        self._notes_failed = False  # a note could not be kept: said once (_write_note)

    def inherited(self, cassette: str) -> set[tuple[str, int]]:
        """What the next run of `cassette` carries on from (see `finish`'s `carry`)."""
        return self._carried.pop(cassette, set())

    def finish(
        self,
        run: Run,
        prune: bool = False,
        carry: bool = False,
        supersede: bool = True,
        failed: bool = False,
    ) -> RunSummary:
        """Close a run: drop the repeats a record run superseded (with `prune`, every
        recording it did not use), note what a replay run used (for `tapeproxy prune`), keep its
        summary. With `carry` the run is not over for prune: it writes no note (and removes an
        older one, which no longer says what is in use), and the next run of the cassette
        carries on from what it used. A `failed` run (its test failed) or one with misses
        notes so, and lists nothing as unused: prune deletes nothing on its word."""
        if run.anew and supersede:
            self._drop_superseded(run)
        unused = self._unused(run) if run.replayed_from else []
        if not carry:
            self._note(run, unused, failed)
        else:
            if used := run.used():
                self._carried[run.cassette] = used
            if used or run.replayed_from:
                self._write_note(run.cassette, None)
        summary = self.summary(run, unused)
        self.ended_unused += summary.unused_count
        if summary.unused_count or summary.recorded_count:
            self.ended.append(summary)
        if prune:
            self._drop(run, run.unused(), "it did not make")
        return summary

    def _note(self, run: Run, unused: list[tuple[str, int]], failed: bool = False) -> None:
        """A replay run leaves the note of what it used and did not, with a digest of each
        unused recording as it is now. A run that did not pass (its test failed, or requests
        missed) leaves what it used and why it did not pass, and lists nothing unused: what
        it left unused may be what the fixed test needs, and no recording is read. A run
        that only recorded into the cassette removes an older note: it no longer says what
        is on disk."""
        if run.replayed_from:
            passed = not failed and not run.misses
            noted = unused[:MAX_NOTED] if passed else []
            if passed and len(unused) > len(noted):
                log.info(
                    "cassette %r: the run left %d recordings unused; its note for `tapeproxy "
                    "prune` lists the first %d (replay and prune again for the others)",
                    run.cassette,
                    len(unused),
                    len(noted),
                )
            note: LastRun | None = LastRun(
                used=[exchange_file(k, o) for k, o in sorted(run.used())],
                unused=[exchange_file(k, o) for k, o in noted],
                digests=self._digests(run.cassette, noted),
                misses=run.misses,
                failed=failed,
                faults=dict(run.faults),
                mode=run.mode,
                started=datetime.fromtimestamp(int(run.started), UTC),
                served=len(run.served),
                recorded=len(run.recorded),
            )
        elif run.recorded:
            note = None
        else:
            return
        self._write_note(run.cassette, note)

    def _digests(self, cassette: str, places: list[tuple[str, int]]) -> dict[str, str]:
        """The digest of each recording that can be read (one that cannot gets none, so
        prune keeps it)."""
        digests = {}
        for key, ordinal in places:
            with contextlib.suppress(TapeproxyError):
                exchange = self._store.read(cassette, key, ordinal)
                digests[exchange_file(key, ordinal)] = recording_digest(exchange)
        return digests

    def fail_note(self, cassette: str) -> None:
        """A test failed before any request reached its cassette: the cassette's note, if it
        has one, now says its last run failed, and lists nothing unused. Call it off the event
        loop."""
        try:
            note = self._store.read_last_run(cassette)
        except TapeproxyError:
            return  # an unreadable note: prune deletes nothing on its word already
        if note is not None and not note.failed:
            failed = note.model_copy(update={"failed": True, "unused": [], "digests": {}})
            self._write_note(cassette, failed)

    def forget_note(self, run: Run) -> None:
        """Remove the cassette's last-run note before this run first writes into it: from
        then on the note no longer says what is on disk, so a prune while this run is under
        way (or after it crashed) must not act on it. Call it off the event loop."""
        if not run.note_dropped:
            self._write_note(run.cassette, None)
            run.note_dropped = True

    def _write_note(self, cassette: str, note: LastRun | None) -> None:
        """Keep (or, None, remove) the note in the library's state folder. A library that
        takes no writes still replays: one warning for the server's life, not one per run.
        A note that cannot be removed is an error each time: it no longer says what is on
        disk."""
        try:
            self._store.write_last_run(cassette, note)
        except (OSError, TapeproxyError) as exc:
            if note is None:
                log.error("cassette %r: could not remove its last-run note: %s", cassette, exc)
            elif not self._notes_failed:
                self._notes_failed = True
                log.warning(
                    "the cassette library %s takes no notes for `tapeproxy prune` (%s): "
                    "replay goes on, and prune will find no finished replay run",
                    self._store.where(),
                    exc,
                )

    def untouched(self, cassette: str, replaying: bool) -> RunSummary:
        """A cassette the server was told to serve that no request reached: in a replaying
        mode, every recording it holds went unused. Call it off the event loop."""
        found = self._store.entries(cassette) if replaying else {}
        names = [exchange_file(k, o) for k, ordinals in sorted(found.items()) for o in ordinals]
        summary = RunSummary(cassette, 0, 0, [], 0, names[:MAX_LISTED], len(names))
        self.ended_unused += summary.unused_count
        if summary.unused_count:
            self.ended.append(summary)
        return summary

    def _drop_superseded(self, run: Run) -> None:
        self._drop(run, run.superseded(), "this run superseded")

    def _drop(self, run: Run, stale: list[tuple[str, int]], why: str) -> None:
        for key, ordinal in stale:
            self._store.delete(run.cassette, key, ordinal)
        if stale:
            names = ", ".join(exchange_file(k, o) for k, o in stale[:10])
            log.info(
                "cassette %r: removed %d recording(s) %s: %s", run.cassette, len(stale), why, names
            )

    def summary(self, run: Run, unused: list[tuple[str, int]] | None = None) -> RunSummary:
        """Counts for /__tapeproxy/stats and the shutdown log. Unused recordings count only for
        a cassette replayed from (not for a `.derived` one that was only written), and not
        for upstreams that ran live (partial replay), whose recordings could not be used.
        May read files (to learn a recording's upstream): call it off the event loop."""
        if unused is None:
            unused = self._unused(run) if run.replayed_from else []
        names = [exchange_file(k, o) for k, o in unused]
        return RunSummary(
            cassette=run.cassette,
            requests=run.requests,
            served=len(run.served),
            recorded=[exchange_file(k, o) for k, o in run.recorded[:MAX_LISTED]],
            recorded_count=len(run.recorded),
            unused=names[:MAX_LISTED],
            unused_count=len(names),
        )

    def _unused(self, run: Run) -> list[tuple[str, int]]:
        unused = run.unused()
        live = self._live | run.live
        if not live:
            return unused
        return [(k, o) for k, o in unused if self._upstream_of(run, k, o) not in live]

    def _upstream_of(self, run: Run, key: str, ordinal: int) -> str | None:
        if key not in run.upstreams:
            try:
                run.upstreams[key] = self._store.read(run.cassette, key, ordinal).request.upstream
            except TapeproxyError:
                return None
        return run.upstreams[key]
