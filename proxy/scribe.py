"""The scribe: a second process that finishes, renders and writes a recording server's
exchanges, so that this work does not share the server's GIL.

Under load, a writer thread and the event loop hand the GIL to each other at every system
call either makes; recording at 32 connections spent more time in those hand-overs than in
its work (bench/RESULTS.md, stop 9). The scribe has its own interpreter: the loop sends it a
finished answer's bytes and its ordinal, and gets back what became of it. It takes what
came in together as one batch: one journal write, one sync and one reply for them all.

The scribe owns the write-ahead journal of its server's library (journal.py); the server
keeps none of its own while the scribe runs. Before the server writes or deletes an
exchange file without the scribe (an answer too large to hold in memory, a recording a run
superseded), it tells the scribe to forget that path, so that older journaled bytes are
never written back over it. Should the scribe die, the server syncs and drops its journal
(as for any server that crashed in this boot) and writes what was in flight itself.

Spoken over two socket pairs, in frames of a 4-byte length and a pickle: one for the
work (main -> scribe: init, keep, close; scribe -> main: ready, and one reply per keep),
one for the forgets (a path, then a byte back), served by a thread of the scribe. This is
the server's side; the scribe's own is scribe_process.py, which imports none of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tapeproxy.capture import Capture
from tapeproxy.scribe_process import CLOSE, KEEP, LENGTH, READY, frame
from tapeproxy.store.fs import FileStore

if TYPE_CHECKING:
    from tapeproxy.settings import Settings

log = logging.getLogger("tapeproxy")

# What answers sent to the scribe and not yet kept may add up to. Past it, the server's
# threads write the next ones: each answer sent is also pickled, and waits in the socket's
# buffers while the scribe syncs, so the scribe's copies stay under this, whatever comes.
HELD_BYTES = 64 * 2**20
# How long a closing server waits for the scribe to write what it holds and sync its journal.
CLOSE_WAIT_S = 60.0
# A scribe that has answered neither a recording nor a forget in this long is stuck (stopped,
# or blocked): it is stopped, and the server writes what it held.
ANSWER_WAIT_S = 60.0


class ScribeGone(Exception):
    """The scribe stopped before it answered: the caller writes the recording itself."""


@dataclass(frozen=True)
class Written:
    """What became of one recording sent to the scribe."""

    outcome: str  # for the log line
    kept: bool  # written (or an equal recording was already there)
    failed: bool = False  # a write failed: counted as an error
    error: str | None = None  # for the server's log


class Scribe:
    """The server's side of the scribe: start it, send it recordings, close it."""

    def __init__(self, init: tuple[Any, ...], on_gone: Callable[[], None]) -> None:
        self._init = init  # what the scribe needs of the settings (see `serve`)
        self._on_gone = on_gone
        self._process: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        # Each recording sent, oldest first: its reply to come, and when it was sent (loop time).
        self._waiting: dict[int, tuple[asyncio.Future[Written], float]] = {}
        self._watchdog: asyncio.TimerHandle | None = None
        self._numbers = itertools.count()
        self._ready = asyncio.Event()
        self._forgets: socket.socket | None = None
        self._forget_lock = threading.Lock()
        self.gone = False

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self.gone

    async def started(self) -> bool:
        """Whether it became ready (False: it stopped first)."""
        await self._ready.wait()
        return not self.gone

    async def start(self) -> None:
        """Start the scribe; it is `ready` once its journal is open."""
        work, theirs = socket.socketpair()
        forgets, their_forgets = socket.socketpair()
        try:
            fds = (theirs.fileno(), their_forgets.fileno())
            command = [sys.executable, "-m", "tapeproxy.scribe_process", *map(str, fds)]
            # In a process group of its own, a signal to the server's group (^C in a
            # terminal) does not reach it even while it starts: the server closes it.
            self._process = await asyncio.to_thread(
                subprocess.Popen,
                command,
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
        except BaseException:
            for sock in (work, forgets):
                sock.close()
            raise
        finally:
            theirs.close()
            their_forgets.close()
        self._forgets = forgets
        try:
            reader, self._writer = await asyncio.open_unix_connection(sock=work)
            self._writer.write(frame(self._init))
        except BaseException:
            self._process.kill()
            work.close()
            raise
        self._reader_task = asyncio.create_task(self._read(reader))

    async def keep(
        self, capture: Capture, cassette: str, cut: bool, ordinal: int, fresh: bool
    ) -> Written:
        """Finish, render and write a capture held in memory, numbered `ordinal`."""
        if self.gone or self._writer is None:
            raise ScribeGone
        number = next(self._numbers)
        loop = asyncio.get_running_loop()
        waiting: asyncio.Future[Written] = loop.create_future()
        self._waiting[number] = (waiting, loop.time())
        message = (KEEP, number, cassette, cut, ordinal, fresh, capture.packed())
        try:
            self._writer.write(frame(message))
        except (RuntimeError, OSError):  # its socket closed (uvloop raises): it is going
            del self._waiting[number]
            raise ScribeGone from None
        if self._watchdog is None:
            self._watchdog = loop.call_later(ANSWER_WAIT_S, self._watch)
        return await waiting  # ScribeGone once a stuck one is seen to end

    def _watch(self) -> None:
        """One timer for every recording in flight (not one per recording: they cost the loop
        more than the rest of the wait): the oldest unanswered in ANSWER_WAIT_S is stuck."""
        self._watchdog = None
        if not self._waiting or self.gone:
            return
        loop = asyncio.get_running_loop()
        _, sent = next(iter(self._waiting.values()))
        due = sent + ANSWER_WAIT_S
        if loop.time() >= due:
            self._stuck()
        else:
            self._watchdog = loop.call_later(due - loop.time(), self._watch)

    def forget(self, path: Path) -> None:
        """Off the loop: the scribe's journal no longer holds `path`, once this returns."""
        with self._forget_lock:
            sock = self._forgets
            if sock is None or self.gone:
                return
            try:
                sock.settimeout(ANSWER_WAIT_S)
                sock.sendall(frame(str(path)))
                sock.recv(1)  # b"" when the scribe is gone: its journal is dropped then
            except TimeoutError:
                self._stuck()
            except OSError:
                pass

    def _stuck(self) -> None:
        """It did not answer in ANSWER_WAIT_S: stopped (its journal is then taken back)."""
        log.error("tapeproxy's scribe did not answer in %.0f s: stopped", ANSWER_WAIT_S)
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._process.kill()

    async def close(self) -> None:
        """The scribe writes what it holds, syncs and removes its journal, and exits."""
        process, writer = self._process, self._writer
        if process is None:
            return
        if writer is None:  # its start failed once it ran (and killed it): reaped here
            await asyncio.to_thread(process.wait)
            return
        if not self.ready:  # still starting, or gone: it holds no recording, nothing to wait for
            with contextlib.suppress(OSError):
                process.kill()
        elif not self.gone:
            with contextlib.suppress(OSError, RuntimeError):  # it died: nothing to tell
                writer.write(frame((CLOSE,)))
                await writer.drain()
        try:
            await asyncio.to_thread(process.wait, CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            log.error("tapeproxy's scribe did not stop in %.0f s: stopped", CLOSE_WAIT_S)
            process.kill()
            await asyncio.to_thread(process.wait)
        if self._reader_task is not None:
            await self._reader_task
        writer.close()
        with self._forget_lock:
            if self._forgets is not None:
                self._forgets.close()
                self._forgets = None

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                head = await reader.readexactly(LENGTH.size)
                message = pickle.loads(await reader.readexactly(LENGTH.unpack(head)[0]))
                if message == READY:
                    self._ready.set()
                    continue
                for number, *written in message:
                    waiting, _ = self._waiting.pop(number, (None, 0.0))
                    if waiting is not None and not waiting.done():
                        waiting.set_result(Written(*written))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except Exception:  # a reply it cannot read: as good as gone
            log.exception("tapeproxy's scribe sent a reply that could not be read")
        self.gone = True
        self._ready.set()  # for `started`: ready or gone
        for waiting, _ in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(ScribeGone())
        self._waiting.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._process is not None:  # ended (or as good as): waited for, never a zombie
            with contextlib.suppress(OSError):
                self._process.kill()
            await asyncio.to_thread(self._process.wait)
        self._on_gone()


class Scribing:
    """A recording server's scribe, from the server's first recording to its close.

    The first recording starts it. Once it is ready, the store hands it the journal (synced
    and removed: no file is ever journaled by both) and it takes the recordings held in
    memory; until then, and should it die, the server writes and journals them itself (a
    dead scribe's journal is taken back, and no second one is started). A closing server
    waits until every answer the scribe held is written, by it or by the server.
    """

    def __init__(
        self,
        files: FileStore,
        settings: Settings,
        reopen: Callable[[Callable[[], list[Path]]], Coroutine[Any, Any, None]],
    ) -> None:
        self._files: FileStore | None = files  # None once the scribe died: no second one
        self._init = (  # what the scribe needs of the settings (see `serve`)
            str(files.root),
            settings.upstream,
            settings.redact_field,
            settings.redact_pattern,
            settings.record_failures,
            logging.getLogger("tapeproxy").getEffectiveLevel(),  # its lines as the server's
        )
        self._reopen = reopen  # opens the store's own journal again, writing back what it held
        self._scribe: Scribe | None = None  # once it took the journal over
        self._starting: Scribe | None = None
        self._start: asyncio.Task[None] | None = None
        self._handing: asyncio.Future[None] | None = None  # the store's journal, closing
        self._reopening: asyncio.Task[None] | None = None
        self._closing = False
        self._held = 0  # answers sent to it and not yet kept
        self._held_bytes = 0  # their sizes
        self._none_held = asyncio.Event()
        self._none_held.set()

    def taker(self, capture: Capture) -> Scribe | None:
        """The scribe, if it takes this answer now; the first call starts it. It takes what
        is held in memory, while what it holds stays under HELD_BYTES."""
        if self._files is not None and self._start is None:
            self._start = asyncio.create_task(self._started(self._files))
        scribe = self._scribe
        if scribe is None or not scribe.ready or capture.spool.spilled:
            return None
        if self._held and self._held_bytes + capture.size > HELD_BYTES:
            return None
        return scribe

    @contextlib.contextmanager
    def holding(self, capture: Capture) -> Iterator[None]:
        """Around an answer sent to the scribe, until it is kept (or written instead)."""
        self._held += 1
        self._held_bytes += capture.size
        self._none_held.clear()
        try:
            yield
        finally:
            self._held -= 1
            self._held_bytes -= capture.size
            if not self._held:
                self._none_held.set()

    async def _started(self, files: FileStore) -> None:
        scribe = self._starting = Scribe(self._init, self._gone)
        try:
            await scribe.start()
            ready = await scribe.started()
        except Exception as exc:  # whatever it was, the server writes instead
            log.warning("tapeproxy's scribe could not start (%s): the server writes itself", exc)
            return
        if not ready:
            log.warning("tapeproxy's scribe stopped as it started: the server writes itself")
            return
        # Once begun, the hand-over ends even if the server closes meanwhile: its own close
        # of the store would not wait for a journal being closed.
        self._handing = asyncio.ensure_future(asyncio.to_thread(files.close))
        try:
            await asyncio.shield(self._handing)
        except OSError as exc:  # the store's journal stays for the next start: so does it
            log.error("handing the journal to tapeproxy's scribe: %s", exc)
            return
        if scribe.gone:
            self._take_journal_back()
            return
        files.elsewhere = scribe.forget
        self._scribe = scribe

    def _gone(self) -> None:
        """The scribe stopped, not told to. Before it took the journal over, _started sees
        to it; after, the journal is taken back."""
        if not self._closing and self._scribe is not None:
            self._take_journal_back()

    def _take_journal_back(self) -> None:
        """The dead scribe's journal is synced and dropped (as that of any server that
        crashed in this boot), and the store keeps its own again."""
        files, self._files = self._files, None
        if files is None:
            return
        log.warning("tapeproxy's scribe stopped: the server writes recordings itself from now on")
        files.elsewhere = None
        self._reopening = asyncio.create_task(self._reopen(files.open))

    async def close(self) -> None:
        """Stop the scribe once it wrote what it holds; a start under way is called off."""
        self._closing = True
        start = self._start
        if start is not None and not start.done():  # no waiting for it to be ready
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await start
        if self._handing is not None:
            with contextlib.suppress(OSError):  # logged by _started, if it was still there
                await self._handing
        if self._starting is not None:
            await self._starting.close()
            # What it held is written, by the server's writers if it did not write it.
            await self._none_held.wait()
        if self._reopening is not None:
            await self._reopening
