"""Starting an invocation from the API process and following it to its receipt.

The route is planned on the process's catalog snapshot and the receipt claimed with one
statement that also checks the snapshot is current (planned again if the catalog moved); the
workflow is started eagerly, and the provider call begins in this process (held in the hub)
alongside the start when Temporal answered moments ago, its output flowing to the caller while
the start is under way, else once the start returns (api.invocation_start), never waiting for
the workflow task; the workflow's local activity adopts it. Events come back through memory.
A keyed request that was seen before replays its receipt and stored output; one still running
is waited for. The route comes from routing.routes; a refusal is mapped to its problem.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.invoke import InvokeActivities
from activities.invoke_hub import (
    Attach,
    HubEvent,
    InvocationHub,
    NotStarted,
    PendingCall,
    ReceiptReady,
)
from activities.invoke_outcomes import not_claimed, refused_by_breakers
from activities.stream_watchdog import StreamWatchdog
from api.budget import admit
from api.calls import Call, cap_output, hashed, invocation_input
from api.come_back import ComeBack
from api.given_up_claims import GivenUpClaims
from api.invocation_events import InvocationEvent, Running
from api.invocation_start import Started, WorkflowStarts
from api.problems import Problem
from api.refusals import problem_of
from api.replays import Replays
from api.result_watch import rewatch, watch_failed
from api.runtime_types import InvokeConfig
from api.temporal_gate import TemporalGate
from core import metrics, timing
from core.security import Principal
from domain.failures import STORE_RETRY_AFTER_SECONDS
from domain.hashing import request_hash
from domain.invocation import (
    Disposition,
    InvocationInput,
    InvocationSummary,
)
from domain.key_reuse import reuse_refusal
from domain.planner import PlanRequest
from routing.refusals import (
    NoneAvailable,
    PolicyDenied,
    Refusal,
    RunPlannedForOtherData,
    RunPlannedWithoutNeed,
    RunPlanRetired,
)
from routing.routes import Route, Routes
from store.receipt_statements import Claim
from store.tables import InvocationReceiptRow

log = logging.getLogger("model_router.api")

# How long the hub may stay silent before the workflow's own result is watched as well. The
# watch (a history long poll on the server) is a safety net for calls whose receipt closes
# elsewhere (the caller queue never picked up, a close by the standalone worker), so it waits
# past a normal wait for a first token: at 0.25 s, under load it started for nearly every call.
QUIET_SECONDS = 2.0
# How long a call begun here stays in the hub for its activity after the caller left.
ADOPT_GRACE_SECONDS = 30.0


class Invocations:
    def __init__(
        self,
        client: Client,
        config: InvokeConfig,
        hub: InvocationHub,
        replays: Replays,
        sessions: async_sessionmaker[AsyncSession],
        routes: Routes,
        come_back: ComeBack,
        gate: TemporalGate,
        activities: InvokeActivities,
        given_up: GivenUpClaims,
    ) -> None:
        self._activities = activities
        self._given_up = given_up
        self._sessions = sessions
        self._routes = routes
        self._gate = gate
        self._come_back = come_back
        self._config = config
        self._hub = hub
        self._starts = WorkflowStarts(client, config, gate, activities, hub, given_up)
        self._replays = replays

    def rebind(self, client: Client) -> None:
        """Start and read workflows on `client` from now on (core/temporal_rotation.py)."""
        self._starts.rebind(client)
        self._replays.rebind(client)

    async def start(self, principal: Principal, call: Call) -> Running:
        tenant = principal.tenant_id
        # After a quiet spell, the health check the start is raced with goes out now, beside
        # the routing and the claim (TemporalGate.ask_ahead).
        asked = self._gate.ask_ahead()
        key = call.idempotency_key or f"auto-{uuid.uuid4()}"
        hash_ = request_hash(hashed(call))
        if call.budget_usd is not None:
            # A denial writes its receipt before any claim of ours: a used key replays first.
            seen = await self._replays.seen(tenant, key)
            if seen is not None:
                return self._replay_or_wait(tenant, key, hash_, seen, call)
        needs = PlanRequest(
            tenant_id=tenant,
            data_classification=call.data_classification,
            needs_tools=call.needs_tools,
            needs_structured_output=call.needs_structured_output,
            budget_applies=call.budget_usd is not None,
        )
        # Planned on this process's catalog snapshot, its version checked by the claim itself
        # (one round trip for both); planned again on the current catalog if it moved. A
        # budget's admission may write a denial, so it plans on the current catalog at once.
        cached = call.budget_usd is None
        while True:
            try:
                route = await self._routes.route(
                    needs, call.profile_id, call.run_id, call.operation, cached=cached
                )
            except Refusal as refused:
                # A key used before replays its receipt, whatever the catalog says now.
                seen = await self._replays.seen(tenant, key)
                if seen is not None:
                    return self._replay_or_wait(tenant, key, hash_, seen, call)
                # A denial, counted as it is answered (a replay above is none).
                if isinstance(refused, PolicyDenied | RunPlannedForOtherData):
                    metrics.denials.add(1, {"tenant": tenant, "reason": refused.reason})
                elif isinstance(refused, NoneAvailable):
                    # Every candidate Degraded, unhealthy or draining: uncounted, a profile
                    # refusing all its calls showed in no dashboard (circuit-open is counted).
                    metrics.refusals.add(1, {"reason": "none-available"})
                elif isinstance(refused, RunPlanRetired | RunPlannedWithoutNeed):
                    metrics.refusals.add(1, {"reason": refused.reason})  # a fixed name each
                wait = partial(self._come_back.none_routable, tenant)
                raise problem_of(refused, wait, call.profile_field) from None
            data = invocation_input(tenant, key, hash_, call, route, self._config)
            allowance = cap_output(call, route)
            if call.budget_usd is not None:
                # May narrow data.targets to those the budget covers.
                await admit(
                    self._sessions,
                    self._activities.statements,
                    data,
                    call.payload,
                    call.budget_usd,
                    allowance,
                )
            first = data.targets[0].deployment_id
            if self._activities.breakers.none_callable(data):
                # Every candidate's breaker refuses now: nothing would be called. Refused
                # before the claim, as when no candidate is routable, so that the key stays
                # unused for the retry its Retry-After asks for. Claimed, the key was spent on
                # a call that called nothing, and that retry replayed the 503, told to use a
                # new key. A key used before replays.
                seen = await self._replays.seen(tenant, key)
                if seen is not None:
                    return self._replay_or_wait(tenant, key, hash_, seen, call)
                # Counted, as the calls refused for Temporal are: claimed, each was an
                # invocation Failed in the dashboards; unclaimed, it is in none otherwise.
                metrics.refusals.add(1, {"reason": "circuit-open"})
                answer = _refused(refused_by_breakers(data))
                targets = tuple(t.deployment_id for t in data.targets)
                return Running(data.invocation_id, first, answer, targets)
            if not self._gate.reachable:
                # Known unreachable: refused before anything is held or claimed, unless the
                # key was answered before, whose replay needs no workflow.
                answered = await self._replays.answered_before(tenant, call.idempotency_key)
                if answered is None:
                    raise self._gate.refuse()
                return self._replay_or_wait(tenant, key, hash_, answered, call)
            try:
                claimed = await self._claim(data, route)
            except Exception as exc:  # the store is unreachable: nothing claimed, nothing called
                log.warning("receipt claim failed: %s", type(exc).__name__)
                # Counted as the other refusals before a claim are: unclaimed, it is in no
                # invocation count.
                metrics.refusals.add(1, {"reason": "store-unavailable"})
                return Running(data.invocation_id, first, _refused(not_claimed(data)))
            if claimed is not Claim.STALE:
                break
            cached = False  # the catalog moved since the snapshot: nothing was written
        if claimed is Claim.USED:
            seen = await self._replays.seen(tenant, key)
            if seen is None:  # closed and gone between the two statements: cannot be
                raise Problem(503, "The invocation with this key is changing; retry shortly.")
            if not _own_claim(seen, data):
                return self._replay_or_wait(tenant, key, hash_, seen, call)
            # The claim is this call's own: it landed, its answer was lost with the connection,
            # and the statement sent again found it (store/asyncpg_path.py). Waited on as
            # another call's, it was never called and was swept Failed, the key spent.
        token, pending = self._hub.open(
            call.request, caller_claims=True, invocation_id=data.invocation_id
        )
        data.caller_token = token
        started = await self._starts.start(data, pending, token, asked)
        timing.after_response(pending.delivered.set)
        return Running(
            data.invocation_id,
            first,
            self._follow(tenant, key, hash_, token, pending, started),
            tuple(t.deployment_id for t in data.targets),
            pending,
        )

    async def _claim(self, data: InvocationInput, route: Route) -> Claim:
        """The claim: one statement that also tells a used key (read only then) and, for a
        route planned on the snapshot, whether the catalog moved since (claim_at)."""
        statements = self._activities.statements
        first = data.targets[0].deployment_id
        at = datetime.now(UTC)
        data.claimed_at = at  # the workflow's closer closes this claim only
        try:
            if not route.checked:
                return await statements.claim_at(data, first, route.catalog_version, at)
            return Claim.CLAIMED if await statements.claim(data, first, at) else Claim.USED
        except Exception:
            # The caller hears nothing was claimed; if the claim landed, or lands after all, it
            # is undone. Not only a statement left unanswered: a claim that committed and lost
            # its answer with the connection is sent again (store/asyncpg_path.py), and when
            # that second send fails too (no connection to be had, the server starting up) the
            # first one stands, open with no call behind it, its key held until swept and then
            # spent. Undoing a claim that never landed touches nothing (its start time is this
            # call's own).
            self._given_up.add(data.invocation_id, at)
            raise

    def retry_after(
        self, principal: Principal, running: Running, summary: InvocationSummary
    ) -> int | None:
        """Seconds a caller told its call failed transiently should wait before trying again.
        A call whose claim the receipt store did not take waits as long as the store's other
        503s say: no provider was asked, so the providers' cool-downs say nothing about it. Any
        other failure waits until a candidate may next be tried. (Temporal gone before any
        output is the gate's own 503.) None for a replayed failure: its key can only replay it
        again, however long the caller waits; a retry needs a new key."""
        if summary.error_kind == "store_unavailable":
            return STORE_RETRY_AFTER_SECONDS
        if running.replay:
            return None
        return self._come_back.after_failure(principal.tenant_id, running.candidates)

    async def _follow(
        self,
        tenant: str,
        key: str,
        hash_: str,
        token: str,
        pending: PendingCall,
        started: Started,
    ) -> AsyncIterator[InvocationEvent]:
        finished = False
        getter: asyncio.Future[HubEvent] | None = None
        result: asyncio.Future[Any] | None = None
        quiet = StreamWatchdog()  # one timer for the call's quiet bound (PendingCall.next)
        try:
            while True:
                if result is None:
                    found = await pending.next(quiet, QUIET_SECONDS)
                    if found is None:
                        # Watched once the workflow exists; a start still under way ends with
                        # the call's receipt or a NotStarted on the hub.
                        if started.done() and not started.cancelled() and not started.exception():
                            result = asyncio.ensure_future(started.result().result())
                        continue
                    item = found
                else:
                    # The receipt comes through the hub; the workflow's result is only watched
                    # once the hub went quiet (another execution owns this key, or the call
                    # ended without a receipt event), so a call that streams costs no history
                    # long poll.
                    getter = getter or asyncio.ensure_future(pending.events.get())
                    done, _ = await asyncio.wait(
                        {getter, result}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        if watch_failed(result):
                            # Temporal did not answer (an outage past the SDK's retries): that
                            # says nothing of the workflow, whose call may be running here. It
                            # was taken for the workflow's end: the call was stopped, or a
                            # stream's answer was sent a second time from the store.
                            log.info(
                                "the workflow's result was not answered (%s); watched again",
                                type(result.exception()).__name__,
                            )
                            result = asyncio.ensure_future(rewatch(started))
                            continue
                        # The workflow finished without this process's hub hearing of it. If
                        # the call ran here, its result is the receipt (the workflow wrote the
                        # close the call could not, or closed it after the call failed);
                        # otherwise another execution answered: replay what it stored.
                        own = _own_result(result) if pending.claimed else None
                        if own is not None:
                            yield ReceiptReady(own)
                            finished = True
                            return
                        if not pending.claimed:
                            # The workflow closed the receipt without adopting the call begun
                            # here: stop it, its outcome will never be written.
                            pending.cancelled.set()
                        break
                    item, getter = getter.result(), None
                if isinstance(item, Attach):
                    break
                if isinstance(item, NotStarted):
                    if not pending.first_sent.is_set():
                        await started  # nothing reached the caller: the gate's 503
                    yield ReceiptReady(item.summary)  # a stream under way ends as failed
                    finished = True
                    return
                yield item
                if isinstance(item, ReceiptReady):
                    finished = True
                    return
            # Another execution of this key answered (or is answering): wait, then replay. A
            # stream whose output began here is not sent the stored answer after what it had:
            # it ends with the receipt, as an answer that could not be given whole.
            whole = not pending.first_sent.is_set()
            async for told in self._replays.events(tenant, key, hash_, with_output=whole):
                yield told
            finished = True
        finally:
            quiet.close()
            for future in (getter, result):
                if future is not None:
                    future.cancel()
            if not finished:
                pending.cancelled.set()  # the caller went away: stop the provider call
            if pending.let_go:
                pass  # kept by the hub for the run's next execution (InvocationHub.let_go)
            elif pending.claimed or pending.work is None:
                self._hub.close(token)
            else:
                # The call began (and may have ended: its task closes the receipt, and a call
                # the caller left ends Cancelled) but the activity has not adopted it yet:
                # the entry waits for it a while, its content already dropped when the call
                # ended; then it goes regardless.
                self._hub.close_later(token, ADOPT_GRACE_SECONDS)

    def _replay_or_wait(
        self, tenant: str, key: str, hash_: str, seen: InvocationReceiptRow, call: Call
    ) -> Running:
        refused = reuse_refusal(
            (seen.request_hash, seen.run_id, seen.project_id),
            (hash_, call.run_id, call.project_id),
        )
        if refused is not None:
            raise Problem(
                409,
                refused,
                field="header.Idempotency-Key",
                type_="https://model-router.dev/problems/idempotency-key-reused",
            )
        return Running(
            seen.invocation_id,
            seen.deployment_id,
            self._replays.events(tenant, key, hash_, seen),
            replay=True,
        )


async def _refused(summary: InvocationSummary) -> AsyncIterator[InvocationEvent]:
    yield ReceiptReady(summary)


def _own_claim(seen: InvocationReceiptRow, data: InvocationInput) -> bool:
    """Whether the key's open receipt is the claim this call made (its start time)."""
    return (
        seen.ended_at is None and data.claimed_at is not None and seen.started_at == data.claimed_at
    )


def _own_result(result: asyncio.Future[Any] | None) -> InvocationSummary | None:
    if result is None or result.cancelled() or result.exception() is not None:
        return None
    found = result.result()
    if isinstance(found, InvocationSummary) and found.disposition is Disposition.DONE:
        return found
    return None
