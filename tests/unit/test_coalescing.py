"""The client's transport that joins writes (tapeproxy.doors.head_limits.Coalescing), over a
stand-in for asyncio's transport that records each write it is given (the real server's
side: tests/e2e/test_wire_edges.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from tapeproxy.doors.head_limits import Coalescing


class Recorder:
    """What asyncio's transport is given, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def joined(steps: Any) -> list[bytes]:
    async def main() -> list[bytes]:
        real = Recorder()
        transport = Coalescing(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        await steps(transport)
        await asyncio.sleep(0)  # the end of the pass
        return real.writes

    return asyncio.run(main())


def test_two_writes_in_one_pass_leave_as_one_at_once() -> None:
    async def steps(transport: Coalescing) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"body")
        assert transport._transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]  # type: ignore[attr-defined]

    assert joined(steps) == [b"HTTP/1.1 200 OK\r\n\r\nbody"]


def test_a_lone_write_leaves_at_the_end_of_the_pass_and_a_third_joins_none() -> None:
    async def steps(transport: Coalescing) -> None:
        transport.write(b"a")
        transport.write(b"b")
        transport.write(b"c")  # held again, alone
        assert transport.get_write_buffer_size() == 1
        await asyncio.sleep(0)
        transport.write(b"d")

    assert joined(steps) == [b"ab", b"c", b"d"]


def test_close_sends_what_is_held_and_abort_drops_it() -> None:
    async def closing(transport: Coalescing) -> None:
        transport.write(b"last words")
        transport.close()
        transport.write(b"after close")  # the transport is closing: never sent

    async def aborting(transport: Coalescing) -> None:
        transport.write(b"dropped")
        transport.abort()

    assert joined(closing) == [b"last words"]
    assert joined(aborting) == []


def test_the_peer_name_and_other_calls_are_the_transport_s_own() -> None:
    async def steps(transport: Coalescing) -> None:
        assert transport.get_extra_info("peername") == ("127.0.0.1", 1)

    joined(steps)
