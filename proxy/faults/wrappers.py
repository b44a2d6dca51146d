"""The faults that spoil an answer on its way (cut, slow, malformed): a recorded or a live
answer made into a `Live` whose chunks carry the fault. A stream is counted in its frames,
any other body in bytes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from tapeproxy.engine.hangup import Gone, Watch
from tapeproxy.engine.inbound import Chunks, Live, Serve
from tapeproxy.errors import UpstreamCut
from tapeproxy.exchange.eventstream import EventStreamError, Message, decode, encode
from tapeproxy.exchange.framing import FrameSplitter, dialect_for
from tapeproxy.faults.spec import FaultSpec

Headers = list[tuple[bytes, bytes]]


def spoiled(
    spec: FaultSpec,
    answer: Serve | Live,
    gone: Gone | None = None,
    ended: Callable[[str], None] | None = None,
) -> Live:
    """`answer` with the fault `spec` on it: head as it was (a malformed body loses its
    Content-Length), sent with the first chunk. A client that leaves (`gone`) ends a wait.
    A cut tells `ended` (a live answer's relay) why the answer stops there."""
    if isinstance(answer, Serve):
        status, headers, inner = answer.replay.status, list(answer.replay.headers), None
    else:
        status, headers, inner = answer.status, list(answer.headers), answer.chunks
    content_type = next((v for k, v in headers if k == b"content-type"), b"")
    dialect = dialect_for(content_type.decode("latin-1"), chunked=False)
    stream = dialect in ("sse", "ndjson", "eventstream")
    if spec.kind == "malformed":
        headers = [(k, v) for k, v in headers if k != b"content-length"]
    headers.append((b"x-tapeproxy-fault", spec.text.encode("latin-1", "replace")))
    cut = isinstance(answer, Serve) and answer.replay.cut  # a recorded cut stays one
    if inner is None:
        pieces: AsyncIterator[bytes] = recorded(answer.replay.frames)  # type: ignore[union-attr]
    elif stream and dialect is not None:
        pieces = split(inner, FrameSplitter(dialect))
    else:
        pieces = aiter(inner)
    chunks = Spoiled(spec, pieces, stream, inner, cut, gone, ended)
    if dialect == "eventstream":
        chunks.farewell, chunks.spoil = cut_event(spec.text), broken_message
    return Live(status, headers, chunks, held=True)


async def pause(seconds: float, gone: Gone | None) -> None:
    """Wait `seconds`, or until the client leaves (then ClientGone): a fault's wait (a header
    may ask for years) never outlives its client, nor holds its upstream's connection."""
    if seconds <= 0:
        return
    if gone is None:
        await asyncio.sleep(seconds)
        return
    watch = Watch(gone)
    try:
        await watch.unless_gone(asyncio.sleep(seconds))
    finally:
        watch.close()


async def recorded(frames: tuple[tuple[int, bytes], ...]) -> AsyncGenerator[bytes, None]:
    for _, data in frames:
        yield data


async def split(chunks: Chunks, splitter: FrameSplitter) -> AsyncGenerator[bytes, None]:
    """A live stream's chunks as its frames."""
    async for chunk in chunks:
        for frame in splitter.feed(chunk):
            yield frame
    for frame in splitter.flush():
        yield frame


def broken(data: bytes) -> bytes:
    """`data` (a JSON document) cut in half, so it is no longer JSON."""
    half = data[: len(data) // 2]
    try:
        json.loads(half)
    except (ValueError, RecursionError):
        return half
    return half + b"}"  # (a whole document in half of it: a trailing brace breaks it)


def broken_message(frame: bytes) -> bytes | None:
    """An eventstream message that stays one, CRCs valid, with its JSON payload broken; None
    when it is no message or carries no JSON."""
    try:
        message = decode(frame)
    except EventStreamError:
        return None
    if not message.payload.startswith(b"{"):
        return None
    return encode(Message(message.headers, broken(message.payload)))


def broken_frame(frame: bytes) -> bytes | None:
    """A stream frame with its JSON payload broken, or None when it carries none."""
    at = frame.find(b"{")
    if at < 0:
        return None
    end = len(frame.rstrip(b"\r\n"))
    return frame[:at] + broken(frame[at:end]) + frame[end:]


def cut_event(text: str) -> bytes:
    """An eventstream's failure mid-stream as AWS sends it: an exception message, which
    botocore raises as the stream's error before the connection drops."""
    headers = (
        (":exception-type", "internalServerException"),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    )
    message = f"tapeproxy fault {text}: the stream is cut here"
    return encode(Message(headers, json.dumps({"message": message}).encode()))


class Spoiled:
    """The chunks of a spoiled answer (see `spoiled`): a door iterates them like a relay's."""

    last = False
    farewell = b""  # what a cut sends last (an eventstream's exception message)
    spoil = staticmethod(broken_frame)  # how `malformed` breaks a stream's frame

    def __init__(
        self,
        spec: FaultSpec,
        pieces: AsyncIterator[bytes],
        stream: bool,
        inner: Chunks | None,
        cut: bool = False,
        gone: Gone | None = None,
        ended: Callable[[str], None] | None = None,
    ) -> None:
        self._spec = spec
        self._gone = gone
        self._ended = ended
        self._cut_at_end = cut
        self._pieces = pieces
        self._stream = stream
        self._inner = inner
        self._chunks = self._run()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    def __anext__(self) -> Any:
        return self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()
        if self._inner is not None:
            await self._inner.aclose()

    async def _run(self) -> AsyncGenerator[bytes, None]:
        kind = self._spec.kind
        if kind == "cut":
            after = int(self._spec["after"])
            async for piece in self._cut(after):
                yield piece
            if self.farewell:
                yield self.farewell
            if self._ended is not None:
                unit = "frame(s)" if self._stream else "byte(s)"
                self._ended(f"cut by the fault after {after} {unit}, nothing recorded")
            raise UpstreamCut(f"tapeproxy fault {self._spec.text}: the answer is cut here")
        if kind == "slow":
            await pause(self._spec["ttfb"] / 1000, self._gone)
        spoil = kind == "malformed"
        first = True
        async for piece in self._pieces:
            if kind == "slow" and not first:
                await pause(self._spec["gap"] / 1000, self._gone)
            first = False
            bad = None if not spoil else self.spoil(piece) if self._stream else broken(piece)
            if bad is not None:
                spoil = False
                yield bad
                if not self._stream:
                    break  # the rest of a body would only be more of the same document
                continue
            yield piece
        if self._cut_at_end:
            raise UpstreamCut("replaying a recorded upstream cut: the connection is dropped here")
        self.last = True
        yield b""

    async def _cut(self, after: int) -> AsyncGenerator[bytes, None]:
        """The first `after` frames of a stream, or bytes of a body."""
        sent = 0
        async for piece in self._pieces:
            room = after - sent
            if room <= 0:
                return
            piece = piece if self._stream else piece[:room]
            sent += 1 if self._stream else len(piece)
            yield piece
