"""Which request gets which fault: the specs in force, the seed, and the run of faults that
numbers the requests. A probability is drawn from the seed, the spec, the request's key and
its ordinal (how often this run has seen that key), never from arrival order, so the same
seed fails the same requests however a parallel client interleaves them."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections import Counter
from collections.abc import Iterable
from functools import partial

from tapeproxy.faults.spec import FaultSpec, parse_fault, parse_faults

FAULT_HEADER = "x-tapeproxy-fault"  # faults for one request
log = logging.getLogger("tapeproxy")


def chance(seed: int, spec: str, key: str, ordinal: int) -> float:
    """A uniform number in [0, 1) that depends on nothing else."""
    digest = hashlib.blake2b(f"{seed}\0{spec}\0{key}\0{ordinal}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big") / 2**64


class Schedule:
    """The faults of one server. A run of faults (its requests numbered from 1) starts with the
    server, and again at each `restart` (a PUT of faults or of the cassette, a pytest test)."""

    def __init__(self, specs: Iterable[str], seed: int | None) -> None:
        self.seed = secrets.randbelow(2**31) if seed is None else seed
        self.specs = parse_faults(specs)
        self.requests = 0
        self.asked: Counter[str] = Counter()
        self.served: Counter[str] = Counter()  # since start, by kind
        if self.specs:
            log.info(
                "faults: %s (--fault-seed %d)", ", ".join(s.text for s in self.specs), self.seed
            )

    def restart(self, specs: Iterable[str] | None = None, seed: int | None = None) -> None:
        """A new run of faults: of `specs` when given (checked whole first), else of those in
        force; drawn from `seed` when given, else from the seed in force."""
        if specs is not None:
            self.specs = parse_faults(specs)
        if seed is not None:
            self.seed = seed
        self.requests = 0
        self.asked.clear()

    def draw(self, key: str, header: str | None) -> FaultSpec | None:
        """The fault request `key` gets, if any: the header's own first, then those in force.
        Every request is numbered, faulted or not (not one with a bad header: it is refused);
        while there are faults, each key's requests are counted too."""
        own: tuple[FaultSpec, ...] = (parse_fault(header),) if header else ()
        self.requests += 1
        if not own and not self.specs:
            return None  # (nothing kept per key: a server without faults holds no more)
        ordinal = self.asked[key] = self.asked[key] + 1
        for spec in (*own, *self.specs):
            if spec.when.fires(self.requests, partial(chance, self.seed, spec.text, key, ordinal)):
                return spec
        return None

    def texts(self) -> list[str]:
        return [spec.text for spec in self.specs]
