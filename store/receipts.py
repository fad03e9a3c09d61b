"""Receipts: claimed before the provider is called, finalised after, closed by the workflow
when the process that made the call is gone. Usage Unknown is never written as zero."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from domain.close_reason import CloseReason, close_reason
from domain.enums import InvocationOutcome, UsageStatus
from domain.events import TOPICS, model_invoked
from domain.invocation import InvocationInput, InvocationSummary
from store.db import transaction
from store.repositories import OutboxRepository
from store.tables import InvocationReceiptRow


async def claim(
    sessions: async_sessionmaker[AsyncSession], data: InvocationInput, deployment_id: str
) -> bool:
    """Insert the in-flight receipt; False when this invocation was already claimed.
    In flight means ended_at is null; its provisional outcome is Failed with usage Unknown, which
    is what it stays if nothing ever finalises it."""
    try:
        async with transaction(sessions) as session:
            session.add(
                InvocationReceiptRow(
                    invocation_id=data.invocation_id,
                    tenant_id=data.tenant_id,
                    project_id=data.project_id,
                    run_id=data.run_id,
                    attempt_id=data.attempt_id,
                    profile_id=data.profile_id,
                    deployment_id=deployment_id,
                    route_plan_id=data.route_plan_id,
                    fallback_used=False,
                    request_hash=data.request_hash,
                    idempotency_key=data.idempotency_key,
                    policy_decision_id=data.policy_decision_id,
                    outcome=InvocationOutcome.FAILED,
                    usage_status=UsageStatus.UNKNOWN,
                    pricing_revision=data.pricing_revision,
                    started_at=datetime.now(UTC),
                )
            )
    except IntegrityError:
        return False
    return True


def _model_invoked(row: InvocationReceiptRow) -> dict[str, Any]:
    return model_invoked(
        invocation_id=str(row.invocation_id),
        tenant_id=row.tenant_id,
        project_id=row.project_id,
        run_id=str(row.run_id) if row.run_id else None,
        attempt_id=str(row.attempt_id) if row.attempt_id else None,
        profile_id=row.profile_id,
        deployment_id=row.deployment_id,
        outcome=row.outcome.value,
        usage_status=row.usage_status.value,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        estimated_cost_usd=row.estimated_cost_usd,
    )


def _fallback_used(row: InvocationReceiptRow, summary: InvocationSummary) -> dict[str, object]:
    return {
        "event_type": "ModelFallbackUsed",
        "topic": TOPICS["ModelFallbackUsed"],
        "aggregate_type": "InvocationReceipt",
        "aggregate_id": str(row.invocation_id),
        "payload": {
            "invocationId": str(row.invocation_id),
            "tenantId": row.tenant_id,
            "profileId": row.profile_id,
            "fromDeploymentId": summary.fallback_from,
            "toDeploymentId": row.deployment_id,
            "reason": summary.fallback_reason,
        },
    }


async def finalize(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, summary: InvocationSummary
) -> InvocationReceiptRow | None:
    """Close an in-flight receipt with what the call produced, and emit ModelInvoked; a receipt
    that is already closed is left as it is (the first close wins)."""
    async with transaction(sessions) as session:
        row = await _in_flight(session, tenant_id, summary.invocation_id)
        if row is None:
            return None
        if summary.outcome is not None:
            row.outcome = summary.outcome
        if summary.usage_status is not None:
            row.usage_status = summary.usage_status
        if summary.deployment_id is not None:
            row.deployment_id = summary.deployment_id
        row.input_tokens = summary.input_tokens
        row.output_tokens = summary.output_tokens
        row.cached_input_tokens = summary.cached_input_tokens
        row.estimated_cost_usd = summary.estimated_cost_usd
        row.latency_ms = summary.latency_ms
        row.time_to_first_token_ms = summary.time_to_first_token_ms
        row.output_artifact_ref = summary.output_artifact_ref
        row.provider_request_id = summary.provider_request_id
        row.fallback_used = summary.fallback_used
        row.provider_attempt = summary.provider_attempt
        row.close_reason = close_reason(row.outcome, summary.error_kind).value
        row.ended_at = datetime.now(UTC)
        outbox = OutboxRepository(session, tenant_id)
        outbox.append(**_model_invoked(row))
        if summary.fallback_used:
            outbox.append(**_fallback_used(row, summary))  # type: ignore[arg-type]
        return row


async def _in_flight(
    session: AsyncSession, tenant_id: str, invocation_id: uuid.UUID
) -> InvocationReceiptRow | None:
    stmt = (
        select(InvocationReceiptRow)
        .where(col(InvocationReceiptRow.tenant_id) == tenant_id)
        .where(col(InvocationReceiptRow.invocation_id) == invocation_id)
        .where(col(InvocationReceiptRow.ended_at).is_(None))
        .with_for_update()
    )
    return (await session.scalars(stmt)).first()


async def open_before(
    session: AsyncSession, started_before: datetime, limit: int
) -> list[tuple[str, uuid.UUID]]:
    """(tenant, invocation) of receipts still open that started before `started_before`."""
    stmt = (
        select(InvocationReceiptRow.tenant_id, InvocationReceiptRow.invocation_id)
        .where(col(InvocationReceiptRow.ended_at).is_(None))
        .where(col(InvocationReceiptRow.started_at) < started_before)
        .order_by(col(InvocationReceiptRow.started_at))
        .limit(limit)
    )
    return [(t, i) for t, i in (await session.execute(stmt)).all()]


async def sweep(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, invocation_id: uuid.UUID
) -> bool:
    """Close a receipt left open: Failed, usage Unknown (the provider may have done billable
    work), close reason `swept`, with its ModelInvoked. False if it closed meanwhile."""
    async with transaction(sessions) as session:
        row = await _in_flight(session, tenant_id, invocation_id)
        if row is None:
            return False
        row.outcome = InvocationOutcome.FAILED
        row.usage_status = UsageStatus.UNKNOWN
        row.close_reason = CloseReason.SWEPT.value
        row.ended_at = datetime.now(UTC)
        OutboxRepository(session, tenant_id).append(**_model_invoked(row))
        return True


async def by_key(
    session: AsyncSession, tenant_id: str, idempotency_key: str
) -> InvocationReceiptRow | None:
    stmt = (
        select(InvocationReceiptRow)
        .where(col(InvocationReceiptRow.tenant_id) == tenant_id)
        .where(col(InvocationReceiptRow.idempotency_key) == idempotency_key)
    )
    return (await session.scalars(stmt)).first()


async def deny(
    sessions: async_sessionmaker[AsyncSession], data: InvocationInput, reason: str
) -> InvocationSummary:
    """A denied invocation gets a receipt too; nothing reached the provider, so its usage is
    our own count: zero."""
    summary = InvocationSummary(
        invocation_id=data.invocation_id,
        outcome=InvocationOutcome.DENIED,
        usage_status=UsageStatus.ESTIMATED,
        deployment_id=data.targets[0].deployment_id,
        input_tokens=0,
        output_tokens=0,
        error_kind=reason,
    )
    await claim(sessions, data, data.targets[0].deployment_id)
    await finalize(sessions, data.tenant_id, summary)
    return summary
