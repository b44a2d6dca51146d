"""Drift's retries: a live 429, 503 or 529 the recording did not have is waited out and sent
again (Retry-After and the providers' own hints honoured, else exponential backoff with
jitter), a bounded number of times, within a total wait for the run; while one upstream asks
for a pause, none of the --concurrency workers sends to it."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from tapeproxy.upstream.protocol import Outbound, Upstream, UpstreamResponse

# Rate limited (429), unavailable (503) and Anthropic's overloaded (529): passing states a
# wait may end. Other 5xx are failures a retry rarely mends, and are said at once.
RETRIED = frozenset({429, 503, 529})
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Retry:
    """How drift retries: `attempts` in all (1: never again); a wait at most `most` seconds;
    the run's waits together at most `total`; backoff from `base`, doubled each time."""

    attempts: int = 3
    most: float = 60.0
    total: float = 300.0
    base: float = 2.0


def duration(text: str) -> float | None:
    """OpenAI's reset durations (`1s`, `6m0s`, `20ms`, `1h2m3.5s`) in seconds; None if not one."""
    text = text.strip()
    if not text or _DURATION.sub("", text):
        return None
    return sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(text))


def retry_after(value: str, now: datetime) -> float | None:
    """`Retry-After`: seconds, or an HTTP date (how long until then, 0 if past)."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):  # (a year of 20 digits)
        return None
    if when.tzinfo is None:  # an HTTP date is GMT (RFC 9110)
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def asked(headers: Iterable[tuple[str, str]], now: datetime) -> tuple[float | None, bool]:
    """How long the answer asks to wait, and whether it insists: `retry-after-ms` (OpenAI),
    `Retry-After` (every provider, Anthropic's included) insist; OpenAI's
    `x-ratelimit-reset-requests` / `-tokens` (of the limits with none remaining) only hint."""
    named = {k.lower(): v for k, v in headers}
    if (ms := named.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000), True
        except ValueError:
            pass
    if (value := named.get("retry-after")) is not None:
        seconds = retry_after(value, now)
        if seconds is not None:
            return seconds, True
    resets = []
    for kind in ("requests", "tokens"):
        reset = duration(named.get(f"x-ratelimit-reset-{kind}", ""))
        if reset is not None and named.get(f"x-ratelimit-remaining-{kind}", "0").strip() == "0":
            resets.append(reset)
    return (max(resets), False) if resets else (None, False)


@dataclass
class Pacer:
    """Sends with retries, shared by the run's workers: a pause one upstream asks for holds
    every request to it (a retry, or a first send), so that no worker sends meanwhile."""

    retry: Retry = field(default_factory=Retry)
    rng: random.Random = field(default_factory=random.Random)
    waited: float = 0.0  # the pauses, together, so far
    _until: dict[str, float] = field(default_factory=dict)  # upstream -> the loop's time

    async def open(
        self, upstream: Upstream, outbound: Outbound, recorded: int
    ) -> tuple[UpstreamResponse, str]:
        """The answer, after as many attempts as it took; with why it was not retried more
        (`retried 2 times`, ...) when it is still one of RETRIED, else ''."""
        tries = 0
        while True:
            await self.ready(outbound.upstream)
            answer = await upstream.open(outbound)
            tries += 1
            if answer.status not in RETRIED or answer.status == recorded:
                return answer, ""
            why = self.pause(outbound.upstream, answer.headers, tries)
            if why is not None:
                return answer, why
            answer.close()  # (a 429 costs nothing, and is never compared)

    async def ready(self, upstream: str) -> None:
        """Once the upstream's pause is over: each worker a little after the others (up to
        a tenth of the pause, a second at most), so that they do not all send at once."""
        left = self._until.get(upstream, 0.0) - asyncio.get_running_loop().time()
        if left > 0:
            await asyncio.sleep(left + self.rng.uniform(0.0, min(1.0, left / 10)))
            await self.ready(upstream)  # another worker's 429 may have made the pause longer

    def pause(self, upstream: str, headers: Iterable[tuple[str, str]], tries: int) -> str | None:
        """Pause the upstream as its answer asks (else back off), for one more attempt; why
        not, when the attempts, the cap on a wait or the run's total are reached."""
        said = f"retried {tries - 1} time{'s' * (tries != 2)}" if tries > 1 else "not retried"
        if tries >= self.retry.attempts:
            return said if tries > 1 else ""
        seconds, insists = asked(headers, datetime.now(UTC))
        if seconds is None:
            seconds = self.backoff(tries)
        elif seconds > self.retry.most and insists:  # sent sooner, it would be refused again
            return f"{said}: it asked for a wait of {seconds:g} s, over {self.retry.most:g} s"
        seconds = min(seconds, self.retry.most)
        now = asyncio.get_running_loop().time()
        until = max(self._until.get(upstream, 0.0), now + seconds)
        added = until - max(now, self._until.get(upstream, 0.0))
        if self.waited + added > self.retry.total:
            return f"{said}: the run's waits would pass --max-wait ({self.retry.total:g} s)"
        self.waited += added
        self._until[upstream] = until
        return None

    def backoff(self, tries: int) -> float:
        """Exponential, with jitter: between a half and the whole of base * 2^(tries-1)."""
        full = min(self.retry.most, self.retry.base * 2 ** (tries - 1))
        return self.rng.uniform(full / 2, full)
