"""Starting an invocation's workflow from the API process, with its provider call begun
alongside when Temporal is answering now (a start accepted within the gate's overlap window,
or else its health service answering before this call's start is in), else once the start
returns.

Alongside, the start runs behind the call: the call's output reaches a streaming caller as it
arrives, and the receipt closes as the call ends; only the answer's end, the caller's last
byte, waits for the start, once the process's answers ahead of their starts fill the lead
(activities/answers_ahead.py). Every streamed first token used to wait for it: an eager start's
reply, timed alone on the benchmark's machine, took 4.1-4.7 ms at p50 and 11-17 at p95
(2026-12-02). A start that fails cancels a call still running and undoes its claim: the key
stays unused, and the hub's `NotStarted` tells the caller's side, which answers the gate's 503
when nothing was sent yet and ends a stream under way with its failure event. A call that had
already ended keeps its closed receipt, and its caller gets the answer (a retry of the key
would replay it): the provider was paid for it. One whose close the store refused keeps its
claim as well (`ReceiptCloser.close_late`): closed late, or left open for the sweeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

from activities.invoke import InvokeActivities
from activities.invoke_hub import InvocationHub, NotStarted, PendingCall
from activities.invoke_outcomes import not_started
from api.given_up_claims import GivenUpClaims
from api.runtime_types import InvokeConfig
from api.temporal_gate import Asked, TemporalGate
from domain.invocation import InvocationInput, invoke_workflow_id
from workflows.invoke import InvokeModelWorkflow

Started = asyncio.Future[WorkflowHandle[Any, Any]]
log = logging.getLogger("model_router.api")


class WorkflowStarts:
    def __init__(
        self,
        client: Client,
        config: InvokeConfig,
        gate: TemporalGate,
        activities: InvokeActivities,
        hub: InvocationHub,
        given_up: GivenUpClaims,
    ) -> None:
        self._client = client
        self._given_up = given_up
        self._config = config
        self._gate = gate
        self._activities = activities
        self._hub = hub
        self._behind: set[Started] = set()  # held: a caller that left drops its reference

    def rebind(self, client: Client) -> None:
        self._client = client

    async def start(
        self, data: InvocationInput, pending: PendingCall, token: str, asked: Asked | None = None
    ) -> Started:
        """The invocation's start, as a future: already done (and a failure raised here) unless
        its call runs alongside, when it is still under way. The start is sent at once either
        way; the call begins with it when Temporal answered a start moments ago, as soon as its
        health service answers otherwise (the check `asked` as the call arrived, if any), and
        after the start when the start is in first."""
        recently = self._gate.answered_recently()
        task = asyncio.ensure_future(self._start_behind(data, pending, token))
        self._behind.add(task)
        task.add_done_callback(self._ended)
        try:
            alongside = recently or await self._gate.answers_before(task, asked)
        except asyncio.CancelledError:
            task.cancel()  # the caller left before anything began: its start is undone too
            raise
        if alongside:
            pending.started = asyncio.get_running_loop().create_future()
            self._activities.begin(data, pending)
        else:
            await task  # the call began once the start was in; a failure is raised here
        return task

    def _ended(self, task: Started) -> None:
        self._behind.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the caller's side hears of it through the hub

    async def _start_behind(
        self, data: InvocationInput, pending: PendingCall, token: str
    ) -> WorkflowHandle[Any, Any]:
        try:
            return await self._start(data, pending, token)
        except BaseException:
            # A call begun alongside hears of it through the hub; one that had ended was
            # answered from its receipt. Otherwise nothing began: `start` raises the failure.
            if pending.started is not None and not pending.answered:
                pending.events.put_nowait(NotStarted(not_started(data)))
            raise

    async def _start(
        self, data: InvocationInput, pending: PendingCall, token: str
    ) -> WorkflowHandle[Any, Any]:
        """Start the workflow; the provider call may have begun alongside meanwhile
        (`PendingCall.started` set by `start`), else it begins once the start is in. The call
        closes its receipt as it ends; its answer waits for the start. A start that fails
        cancels a call still running and undoes its claim; a call that had ended keeps its
        closed receipt, and its caller gets the answer that receipt records."""
        tenant = data.tenant_id
        sends: list[WorkflowIDConflictPolicy] = []

        def send() -> Awaitable[WorkflowHandle[Any, Any]]:
            # The claim just made is unique, so a run going under this id when the first send
            # arrives belongs to no live claim: one whose start some process gave up on (its
            # reply late past the bound, its claim undone). Adopted, it looked for its call in
            # vain and closed this call's claim Failed or cancelled it
            # (tests/test_fault_temporal_late_start.py); replaced, this call is its own. A
            # send again (`TemporalGate` retries a start the server dropped) may find this
            # call's own first send landed, its run perhaps adopting the call already: it
            # attaches to it.
            policy = (
                WorkflowIDConflictPolicy.USE_EXISTING
                if sends
                else WorkflowIDConflictPolicy.TERMINATE_EXISTING
            )
            sends.append(policy)
            return self._client.start_workflow(
                InvokeModelWorkflow.run,
                data,
                id=invoke_workflow_id(tenant, data.invocation_id),
                task_queue=self._config.workflow_queue,
                id_conflict_policy=policy,
                request_eager_start=True,
                execution_timeout=self._config.workflow_timeout,
            )

        try:
            handle = await self._gate.start(send)
        except BaseException:
            if pending.work is not None and pending.started is not None:
                pending.cancelled.set()
                pending.started.set_result(False)
                with contextlib.suppress(Exception):
                    await asyncio.shield(pending.work)  # a running call ends without a close
            else:
                pending.begun.set()  # an activity that adopted the entry meanwhile finds no call
                pending.settle()
            # The prompt must not outlive a call that never started (issue 19: 900 KB prompts
            # stayed for good during an outage).
            self._hub.close(token)
            if not pending.answered and not await self._activities.closer.close_late(data, pending):
                # A call stopped before it ended recorded nothing: its claim is undone and the
                # key stays unused (`release` leaves a closed receipt alone). One that ended
                # with its close refused keeps its claim (`close_late`).
                try:
                    await self._activities.statements.release(tenant, data.invocation_id)
                except Exception as exc:
                    # The store is away too (a partition of this host): undone once it
                    # answers, as a claim whose statement went unanswered is, or the caller's
                    # retry found the key in progress and then spent.
                    log.warning("claim release failed, retried: %s", type(exc).__name__)
                    if data.claimed_at is not None:
                        self._given_up.add(data.invocation_id, data.claimed_at)
            raise
        if pending.started is not None:
            pending.started.set_result(True)
        else:
            # The provider call starts now; the workflow's activity adopts it from the hub, and
            # reports its end once this request's response is over.
            self._activities.begin(data, pending)
        return handle
