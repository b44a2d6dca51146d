"""`tapeproxy prune`: delete the recordings that the last finished replay run of a cassette left
unused, as its last-run note lists them, and only while each still holds what it held then;
nothing when that run did not pass (a test that failed, or requests that missed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC

from tapeproxy.errors import ConfigError, TapeproxyError
from tapeproxy.store.blobs import KEEP_UNUSED, used_by
from tapeproxy.store.lastrun import NOTES, LastRun, note_name, recording_digest
from tapeproxy.store.protocol import CassetteStore, exchange_file


class NoFinishedRun(ConfigError):
    """A cassette with no note of a finished replay run: prune cannot tell what is unused."""

    error_type = "no_finished_run"


class NeedsYes(ConfigError):
    """The run prune would go by also recorded (an `auto` run): a run that records may not
    have asked for everything the cassette's tests need, so deleting waits for --yes."""

    error_type = "needs_yes"


class RunNotPassed(ConfigError):
    """The last finished replay run of a cassette failed or missed: what it left unused may be
    what the fixed test needs."""

    error_type = "run_not_passed"


@dataclass
class PruneReport:
    cassette: str
    dry_run: bool
    pruned: list[str] = field(default_factory=list)  # deleted, or would be with --dry-run
    gone: list[str] = field(default_factory=list)  # listed unused, but no longer on disk
    # Listed unused, but the file holds another recording now (renumbered by rekey or redact,
    # or recorded anew): kept.
    changed: list[str] = field(default_factory=list)
    kept: int = 0  # recordings left
    run: str = ""  # the run prune relies on, in words
    mode: str | None = None  # that run's mode, its start (UTC, ISO 8601), what it served and
    started: str | None = None  # recorded (all None from a note of an older tapeproxy,
    served: int | None = None  # which noted none of them)
    recorded: int | None = None
    # That run also recorded, so deleting what it left unused waits for --yes (a dry run
    # says so; without --yes, prune raises NeedsYes).
    needs_yes: bool = False
    blobs: list[str] = field(default_factory=list)  # blobs no recording uses: deleted


def prune(
    store: CassetteStore, cassette: str, dry_run: bool = False, yes: bool = False
) -> PruneReport:
    """Delete (or, with `dry_run`, list) what the last finished replay run left unused, each
    file only while its content has the digest the note gives it; after a run that also
    recorded, only with `yes` (NeedsYes). The note is rewritten with nothing unused, so a
    second prune deletes nothing more."""
    note = store.read_last_run(cassette)
    if (note is None or note.failed or note.misses) and unused_blobs(store, cassette):
        return _blobs_only(store, cassette, dry_run)  # unused, from the files alone
    if note is None:
        raise NoFinishedRun(
            f"cassette {cassette!r} has no finished replay run on record (no note of it in "
            f"{store.where()}/{NOTES}/), so nothing is known to be unused; "
            "nothing deleted. Replay it with `tapeproxy serve --mode replay` and end the run "
            "(a PUT on /__tapeproxy/cassette, or stop the server), then prune"
        )
    where = f"{store.where()}/{note_name(cassette)}"
    if note.failed or note.misses:
        raise RunNotPassed(
            f"the last finished replay run of cassette {cassette!r} did not pass "
            f"({_why(note)}; noted in {where}), so what it left unused may be what the fixed "
            "test needs; nothing deleted. Make the test pass (or record it again), replay it, "
            "then prune"
        )
    places = _places(store, cassette)
    report = _report(cassette, dry_run, note, where)
    for name in sorted(note.unused):
        if name not in places:
            report.gone.append(name)
        elif _holds(store, cassette, places[name], note.digests.get(name)):
            report.pruned.append(name)
        else:
            report.changed.append(name)
    report.kept = len(places) - len(report.pruned)
    report.needs_yes = bool(note.recorded and report.pruned and not yes)
    if report.needs_yes and not dry_run:
        raise NeedsYes(
            f"relying on {report.run}; a run that records may not have asked for everything "
            f"the cassette's tests need, so the {len(report.pruned)} recording(s) it left "
            f"unused are deleted only with --yes; nothing deleted. `tapeproxy prune {cassette} "
            "--dry-run` lists them"
        )
    if not dry_run:
        for name in report.pruned:
            store.delete(cassette, *places[name])
        if note.unused:
            store.write_last_run(cassette, note.model_copy(update={"unused": [], "digests": {}}))
    report.blobs = _drop_blobs(store, cassette, dry_run, set(report.pruned))
    return report


def _drop_blobs(store: CassetteStore, cassette: str, dry_run: bool, pruned: set[str]) -> list[str]:
    """The blobs no recording left uses, deleted (with `dry_run`, only listed)."""
    unused = unused_blobs(store, cassette, pruned if dry_run else set())
    if not dry_run:
        for digest in unused:
            store.delete_blob(cassette, digest)
    return unused


def unused_blobs(
    store: CassetteStore,
    cassette: str,
    leaving: set[str] | None = None,
    doomed: Callable[[str], bool] = lambda digest: False,
) -> list[str]:
    """The blobs of a cassette that no recording uses (but those named in `leaving`, which
    are about to go); none when a recording cannot be read (what it uses is unknown). Only
    those put or used by a write KEEP_UNUSED ago or more (a server recording into the
    cassette now may have put a blob whose file is not written yet), or `doomed` ones."""
    held = store.blobs(cassette)
    if not held:
        return []
    wanted: set[str] = set()
    try:
        for name, place in _places(store, cassette).items():
            if name not in (leaving or set()):  # only its digests kept: bounded memory
                wanted |= used_by(store.read(cassette, *place))
    except TapeproxyError:
        return []
    unused = [digest for digest in held if digest not in wanted]
    return [digest for digest in unused if _old(store, cassette, digest) or doomed(digest)]


def _old(store: CassetteStore, cassette: str, digest: str) -> bool:
    try:
        age = store.blob_age(cassette, digest)
    except OSError:  # its age unknown: kept
        return False
    return age is not None and age >= KEEP_UNUSED


def _blobs_only(store: CassetteStore, cassette: str, dry_run: bool) -> PruneReport:
    """With no finished run that passed to go by, only the blobs no recording uses go."""
    run = "no finished replay run that passed (so no recording is deleted)"
    report = PruneReport(cassette, dry_run, run=run)
    report.kept = sum(len(ordinals) for ordinals in store.entries(cassette).values())
    report.blobs = _drop_blobs(store, cassette, dry_run, set())
    return report


def _places(store: CassetteStore, cassette: str) -> dict[str, tuple[str, int]]:
    """Each recording of `cassette` by its file name: name -> (key, ordinal)."""
    return {
        exchange_file(key, ordinal): (key, ordinal)
        for key, ordinals in store.entries(cassette).items()
        for ordinal in ordinals
    }


def _report(cassette: str, dry_run: bool, note: LastRun, where: str) -> PruneReport:
    """An empty report naming the run prune goes by: its mode, start and what it did."""
    left = f"left {len(note.unused)} unused (noted in {where})"
    if note.mode is None or note.started is None:  # a note of an older tapeproxy
        run = "the last finished run that served from it (an older tapeproxy noted neither "
        run += f"its mode nor its start), which passed: it used {len(note.used)} recording(s) "
        run += f"and {left}"
        return PruneReport(cassette, dry_run, run=run)
    at = note.started.astimezone(UTC)  # (a note may give its start under any offset)
    started = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    run = f"the last finished run, in {note.mode.value} mode, started {started}, which "
    run += f"passed: it served {note.served} recording(s)"
    run += f", recorded {note.recorded} and {left}" if note.recorded else f" and {left}"
    return PruneReport(
        cassette,
        dry_run,
        run=run,
        mode=note.mode.value,
        started=at.isoformat(),
        served=note.served,
        recorded=note.recorded,
    )


def _why(note: LastRun) -> str:
    if note.failed and note.misses:
        return f"its test failed, and {note.misses} request(s) missed the cassette"
    if note.failed:
        return "its test failed, errored or was skipped"
    return f"{note.misses} request(s) missed the cassette"


def _holds(store: CassetteStore, cassette: str, place: tuple[str, int], digest: str | None) -> bool:
    """Whether the recording at `place` is still the one the note saw (a note without a
    digest, from an older tapeproxy, vouches for nothing)."""
    if digest is None:
        return False
    try:
        return recording_digest(store.read(cassette, *place)) == digest
    except TapeproxyError:
        return False
