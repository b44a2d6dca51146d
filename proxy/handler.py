"""One proxied request, start to end: route, key, look up, plan, then serve, refuse or forward."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from llmtape.errors import ClientGone, ConfigError, LlmtapeError, OutOfOrder, UpstreamError
from llmtape.matching import follow_order
from llmtape.misses import Miss
from llmtape.models import Exchange, Outcome
from llmtape.normalize import RequestParts, canonical, request_key, request_parts
from llmtape.pipeline import Action, Recorder, Replay, plan
from llmtape.providers import Rulebook
from llmtape.providers.base import Provider, generic_error
from llmtape.recorded import candidates, recorded_request
from llmtape.responses import (
    LiveResponse,
    ReplayResponse,
    cut_on_shutdown,
    raw_headers,
    unless_client_leaves,
)
from llmtape.routing import LIVE_HEADER, live_names, resolve
from llmtape.rules import MatchRules
from llmtape.settings import Mode, Settings
from llmtape.state import Run, Runs, ServerState
from llmtape.store.base import CassetteStore, exchange_file
from llmtape.store.names import check_cassette_name, derived_name
from llmtape.timing import TIMING_HEADER, parse_timing
from llmtape.upstream import Outbound, Upstream, UpstreamResponse, answer_headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

CASSETTE_HEADER = "x-llmtape-cassette"
MAX_MISSES = 50

log = logging.getLogger("llmtape")


@dataclass
class Context:
    """What one request resolved to."""

    provider: Provider
    path: str
    cassette: str
    mode: Mode
    live_upstreams: frozenset[str]  # --live, plus x-llmtape-live on this request
    rules: MatchRules
    parts: RequestParts
    key: str
    timing: float | None  # replay timing factor: --replay-timing or x-llmtape-timing
    started: float = field(default_factory=time.monotonic)

    @property
    def live(self) -> bool:
        return self.provider.name in self.live_upstreams


@dataclass(frozen=True)
class Target:
    """Where a live answer is recorded: a cassette's run, its seq there, and whether the run
    records the cassette anew (record mode, a .derived cassette) or adds to it (auto)."""

    run: Run
    seq: int
    anew: bool


@dataclass
class Proxy:
    settings: Settings
    providers: Mapping[str, Provider]
    rules: Rulebook
    store: CassetteStore
    state: ServerState
    runs: Runs
    upstream: Upstream | None = None
    misses: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_MISSES))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await cut_on_shutdown(self.handle(request))
        await response(scope, receive, send)

    async def handle(self, request: Request) -> ASGIApp:
        provider: Provider | None = None
        try:
            raw_path = request.scope.get("raw_path") or request.url.path.encode()
            provider, path = resolve(raw_path.decode("latin-1"), request.headers, self.providers)
            ctx = await self._context(request, provider, path)
            return await self._dispatch(request, ctx)
        except LlmtapeError as exc:
            if exc.status >= 500:
                self.state.stats.errors += 1
            log.warning("%s", exc.message)
            return error_response(provider, exc)

    async def _context(self, request: Request, provider: Provider, path: str) -> Context:
        # Every header is checked before the run counts the request, so a bad one uses up
        # no recording.
        cassette = check_cassette_name(request.headers.get(CASSETTE_HEADER) or self.state.cassette)
        named = live_names(request.headers.get(LIVE_HEADER, ""), self.providers)
        timing = request.headers.get(TIMING_HEADER, self.settings.replay_timing)
        try:
            factor = parse_timing(timing)
        except ValueError as exc:
            raise ConfigError(f"{TIMING_HEADER}: {exc}") from exc
        rules = self.rules.for_upstream(provider.name)
        body = await request.body()
        parts = request_parts(
            request.method, provider.name, path, request.url.query, request.headers, body, rules
        )
        return Context(
            provider=provider,
            path=path,
            cassette=cassette,
            mode=self.state.mode,
            live_upstreams=frozenset(self.settings.live) | named,
            rules=rules,
            parts=parts,
            key=request_key(parts, rules),
            timing=factor,
        )

    async def _dispatch(self, request: Request, ctx: Context) -> ASGIApp:
        run = await self.runs.get(ctx.cassette)
        ask, seq = run.ask(ctx.key)
        ordinal = run.pick(ctx.key, ask, self.settings.repeat)
        action = plan(ctx.mode, ordinal is not None, ctx.live)
        run.replayed_from |= action in {Action.SERVE, Action.REFUSE}
        if action is Action.SERVE and ordinal is not None:
            return await self._serve(ctx, run, ordinal)
        if action is Action.REFUSE:
            return await self._refuse(ctx, run, ask)
        if action is Action.FORWARD:
            return await self._forward(request, ctx, None)
        if ctx.mode is Mode.REPLAY and ctx.live:
            # Partial replay: live answers go beside the cassette, never into it, and this
            # upstream's recordings are neither expected in order nor counted as unused.
            run.live.add(ctx.provider.name)
            run = await self.runs.get(derived_name(ctx.cassette))
            _, seq = run.ask(ctx.key)
        # Record mode records the run anew (ordinals from 1); auto adds after what is there.
        return await self._forward(request, ctx, Target(run, seq, ctx.mode is not Mode.AUTO))

    async def _serve(self, ctx: Context, run: Run, ordinal: int) -> ASGIApp:
        if run.order is not None:
            self._check_order(ctx, run, ordinal)
        cached = (ctx.cassette, ctx.key, ordinal)
        replay = self.runs.replays.get(cached)
        if replay is None:
            exchange = await asyncio.to_thread(self.store.read, ctx.cassette, ctx.key, ordinal)
            replay = Replay.of(exchange, ctx.key)
            self.runs.replays.put(cached, replay)
        run.served.add((ctx.key, ordinal))
        self.state.stats.replayed += 1
        self._log(ctx, "replayed", replay.status)
        return ReplayResponse(replay, ctx.timing)

    def _check_order(self, ctx: Context, run: Run, ordinal: int) -> None:
        verdict = follow_order(
            run.order or [], run.cursor, ctx.live_upstreams | run.live, ctx.key, ordinal
        )
        if isinstance(verdict, int):
            run.cursor = verdict
            return
        self.state.stats.misses += 1
        position, expected = verdict
        here = exchange_file(ctx.key, ordinal)
        came = f"{ctx.parts.method} {ctx.provider.name} {ctx.path} ({here})"
        wanted = (
            f"{expected.summary} ({exchange_file(expected.key, expected.ordinal)})"
            if expected is not None
            else "no further request"
        )
        raise OutOfOrder(
            f"--strict-order: request #{run.requests} of this run in cassette {ctx.cassette!r} "
            f"should have been recording #{position + 1} in recorded order, {wanted}, but "
            f"{came} came. Replay the requests in the recorded order, or drop --strict-order."
        )

    async def _refuse(self, ctx: Context, run: Run, ask: int) -> ASGIApp:
        self.state.stats.misses += 1
        found = run.candidates
        if found is None:
            found = run.candidates = await asyncio.to_thread(
                candidates, self.store, self.rules, run.cassette, run.ordinals
            )
        miss = Miss(
            cassette=ctx.cassette,
            mode=ctx.mode.value,
            key=ctx.key,
            ask=ask,
            recorded=len(run.ordinals.get(ctx.key, ())),
            request=canonical(ctx.parts, ctx.rules),
            candidates=found,
            load=partial(recorded_request, self.store, self.rules, run.cassette),
            listed=len(run.ordinals),
        )
        # Off the event loop: a diff of large bodies must not stall the requests being served.
        details = await asyncio.to_thread(miss.explain)
        self.misses.appendleft(details)
        log.warning("%s", details["message"])
        body = ctx.provider.error_body("cassette_miss", details["message"], 422)
        body["error"]["details"] = {k: v for k, v in details.items() if k != "message"}
        return JSONResponse(body, status_code=422)

    async def _forward(self, request: Request, ctx: Context, target: Target | None) -> ASGIApp:
        if self.upstream is None:
            raise UpstreamError("llmtape is not started: no upstream client yet")
        self.state.stats.upstream_calls += 1
        try:
            response = await unless_client_leaves(
                self.upstream.open(await outbound(request, ctx)), request.receive
            )
        except ClientGone:
            self.state.stats.aborted += 1
            raise
        recorder = None if target is None else self._recorder(ctx, target, response)

        def finished(outcome: str) -> None:
            if target is not None:
                target.run.end_recording()
            self._log(ctx, outcome, response.status)

        async def on_end(cut: bool) -> None:
            if cut:
                self.state.stats.errors += 1
            outcome = "cut" if cut else "live"
            try:
                if recorder is not None and target is not None:
                    outcome = await self._commit(target, recorder.finish(cut))
            finally:
                finished(outcome)

        def on_abort() -> None:
            self.state.stats.aborted += 1
            finished("client went away, nothing recorded")

        def on_shutdown() -> None:
            finished("cut by shutdown, nothing recorded")

        headers = answer_headers(response.headers, keep_length=ctx.parts.method == "HEAD")
        headers.append(("x-llmtape-key", ctx.key))
        return LiveResponse(response, raw_headers(headers), recorder, on_end, on_abort, on_shutdown)

    def _recorder(self, ctx: Context, target: Target, response: UpstreamResponse) -> Recorder:
        # A PUT that ends the run waits for this answer to be written (or dropped).
        target.run.begin_recording()
        return Recorder(
            provider=ctx.provider,
            request=ctx.parts,
            key=ctx.key,
            seq=target.seq,
            rules=ctx.rules.fingerprint(),
            status=response.status,
            headers=list(response.headers),
            chunked=response.chunked,
        )

    async def _commit(self, target: Target, exchange: Exchange) -> str:
        """Write a finished exchange. Its ordinal is given here, not when it was asked, so an
        answer that is not kept (a 429 the SDK retried) leaves no gap in the numbering."""
        if exchange.outcome is not Outcome.COMPLETE and not self.settings.record_failures:
            return f"not recorded ({exchange.outcome.value})"
        run = target.run
        ordinal = run.next_ordinal(exchange.key, target.anew)
        exchange = exchange.model_copy(update={"ordinal": ordinal})
        try:
            await asyncio.to_thread(self.store.write, run.cassette, exchange)
        except OSError as exc:
            self.state.stats.errors += 1
            log.error("could not write to cassette %r: %s", run.cassette, exc)
            return "not recorded (write failed)"
        run.add(exchange.key, ordinal)
        self.runs.replays.discard((run.cassette, exchange.key, ordinal))
        self.state.stats.recorded += 1
        failed = exchange.outcome is not Outcome.COMPLETE
        return f"recorded {exchange.outcome.value}" if failed else "recorded"

    def _log(self, ctx: Context, outcome: str, status: int) -> None:
        ms = (time.monotonic() - ctx.started) * 1000
        log.info(
            "%s %s %s %s key=%s -> %s %d (%.0f ms)",
            ctx.mode.value,
            ctx.provider.name,
            ctx.parts.method,
            ctx.path,
            ctx.key[:12],
            outcome,
            status,
            ms,
        )


async def outbound(request: Request, ctx: Context) -> Outbound:
    """The request as it goes upstream: same method, path, query and body; new host."""
    query = request.url.query
    url = ctx.provider.base_url + ctx.path + (f"?{query}" if query else "")
    return Outbound.of(
        ctx.provider.name, request.method, url, request.headers.raw, await request.body()
    )


def error_response(provider: Provider | None, exc: LlmtapeError) -> JSONResponse:
    shape = provider.error_body if provider is not None else generic_error
    return JSONResponse(shape(exc.error_type, exc.message, exc.status), status_code=exc.status)
