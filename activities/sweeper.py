"""The receipt sweeper's activity: close receipts still open past the invocation budget whose
InvokeModel workflow is no longer running (it failed, was terminated, or never started because
the claim's reply was lost). Failed, usage Unknown, close reason `swept`, counted in
`receipts_swept`. A receipt whose workflow still runs is left to it: the workflow retries its
close until the store answers, and its summary is what the caller was told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from core import metrics
from domain.invocation import invoke_workflow_id
from domain.sweep import SweepInput, SweepReport
from store import receipts
from store.receipt_statements import ReceiptStatements


class SweeperActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], client: Client) -> None:
        self._sessions, self._client = sessions, client
        self._statements = ReceiptStatements(sessions.kw["bind"])

    @activity.defn(name="sweep_open_receipts")
    async def sweep(self, data: SweepInput) -> SweepReport:
        cutoff = datetime.now(UTC) - timedelta(seconds=data.open_longer_than_seconds)
        async with self._sessions() as session:
            found = await receipts.open_before(session, cutoff, data.batch)
        report = SweepReport(found=len(found))
        for tenant_id, invocation_id in found:
            activity.heartbeat()
            if await self._running(tenant_id, str(invocation_id)):
                report.left_to_workflow += 1
                continue
            if await self._statements.sweep(tenant_id, invocation_id):
                report.closed += 1
                metrics.receipts_swept.add(1, {"tenant": tenant_id})
        return report

    async def _running(self, tenant_id: str, invocation_id: str) -> bool:
        handle = self._client.get_workflow_handle(invoke_workflow_id(tenant_id, invocation_id))
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status is WorkflowExecutionStatus.RUNNING
