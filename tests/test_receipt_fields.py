"""One receipt mapping (domain/receipt_fields.py): every column of `invocation_receipts` is
declared there, and each surface carries exactly what the declaration says — the REST view,
the ModelInvoked event, the summary a replay answers with. A column added to the table but not
to the mapping, or declared for a surface that drops it, fails here."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
from pydantic.alias_generators import to_camel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from api.receipt_views import Receipt
from domain import receipt_fields
from domain.amounts import decimal_text
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationInput, InvocationSummary, Target
from domain.receipt_fields import FIELDS, Written
from store.receipt_statements import ReceiptStatements
from store.receipts import by_key, summary_of
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.receipts import add_receipt
from tests.helpers.surfaces import Catalog
from workflows.invoke import InvokeModelWorkflow

# The spec's InvocationReceipt (model-router-service, "InvocationReceipt" entity): its 22 fields.
SPEC_FIELDS = (
    "invocationId tenantId projectId runId attemptId profileId deploymentId routePlanId "
    "fallbackUsed requestHash idempotencyKey policyDecisionId outcome usageStatus inputTokens "
    "outputTokens estimatedCostUsd pricingRevision latencyMs outputArtifactRef startedAt endedAt"
).split()
# The spec's ModelInvoked payload.
SPEC_EVENT = (
    "invocationId tenantId projectId runId attemptId profileId deploymentId outcome usageStatus "
    "inputTokens outputTokens estimatedCostUsd"
).split()
COLUMNS = {c.name for c in InvocationReceiptRow.__table__.columns}  # type: ignore[attr-defined]


def _camel(names: Any) -> set[str]:
    return {to_camel(n) for n in names}


def _json(value: Any) -> Any:
    if isinstance(value, Decimal):
        return decimal_text(value)
    return str(value) if isinstance(value, uuid.UUID) else value


def test_every_column_is_declared_once_and_every_declaration_has_its_source() -> None:
    assert set(FIELDS) == COLUMNS, "declare each invocation_receipts column in receipt_fields"
    assert set(SPEC_FIELDS) <= _camel(COLUMNS)
    # Copied by name: a field written at the claim needs its name on InvocationInput, one
    # written at the close or carried by a replay its name on InvocationSummary.
    assert set(receipt_fields.CLAIMED) <= set(InvocationInput.model_fields)
    assert set(receipt_fields.CLOSED) <= set(InvocationSummary.model_fields)
    assert set(receipt_fields.REPLAYED) <= set(InvocationSummary.model_fields)
    # A column the live summary carries is one a replay must carry too (else replays drop it).
    assert set(InvocationSummary.model_fields) & COLUMNS <= set(receipt_fields.REPLAYED)
    assert [key for _, key in receipt_fields.EVENT] == SPEC_EVENT
    assert set(Receipt.model_fields) == set(receipt_fields.SHOWN)
    assert {n for n, f in FIELDS.items() if f.written is Written.SETTLED} == {"statement_ref"}


async def test_each_surface_carries_the_declared_fields_of_the_stored_receipt(
    http: httpx.AsyncClient,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    run, key = str(uuid.uuid4()), f"rf-{uuid.uuid4().hex[:8]}"
    body = {
        "profileId": catalog.profile("openai"),
        "runId": run,
        "attemptId": str(uuid.uuid4()),
        "idempotencyKey": key,
        "request": {"messages": [{"role": "user", "content": "fields"}], "max_tokens": 20},
    }
    first = await http.post("/gateway/invoke", json=body, headers=catalog.auth)
    assert first.status_code == 200, first.text
    async with sessions() as session:
        row = await by_key(session, catalog.tenant, key)
        assert row is not None
        [event] = (
            await session.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.aggregate_id) == str(row.invocation_id))
                .where(col(OutboxEventRow.event_type) == "ModelInvoked")
            )
        ).all()
    stored = row.model_dump()
    assert stored["outcome"] is InvocationOutcome.COMPLETED and stored["input_tokens"]

    # The REST view: every shown column, with the stored value.
    [view] = (await http.get(f"/factory/runs/{run}/model-receipts", headers=catalog.auth)).json()
    assert set(view) == _camel(receipt_fields.SHOWN)
    for name in receipt_fields.SHOWN:
        if name not in ("started_at", "ended_at"):  # RFC 3339 text, checked elsewhere
            assert view[to_camel(name)] == _json(stored[name]), name
    assert view["startedAt"] and view["endedAt"]

    # ModelInvoked: the spec's payload, each the stored value.
    assert set(event.payload) == {key for _, key in receipt_fields.EVENT}
    for name, camel in receipt_fields.EVENT:
        assert event.payload[camel] == _json(stored[name]), name

    # A replay tells what the live call told: the workflow's own summary, field by field.
    live = await temporal_client.get_workflow_handle_for(
        InvokeModelWorkflow.run, f"invoke/{catalog.tenant}/{row.invocation_id}"
    ).result()
    replayed = summary_of(row)
    for name in receipt_fields.REPLAYED:
        assert getattr(replayed, name) == stored[name], name
        if name not in receipt_fields.DERIVED:
            assert getattr(replayed, name) == getattr(live, name), name
    again = await http.post("/gateway/invoke", json=body, headers=catalog.auth)
    assert again.json()["receipt"] == first.json()["receipt"]


def _input(tenant: str) -> InvocationInput:
    return InvocationInput(
        invocation_id=uuid.uuid4(),
        tenant_id=tenant,
        project_id="p",
        run_id=uuid.uuid4(),
        attempt_id=uuid.uuid4(),
        profile_id="rf",
        route_plan_id=uuid.uuid4(),
        policy_decision_id=uuid.uuid4(),
        idempotency_key=f"rf-{uuid.uuid4().hex[:8]}",
        request_hash="sha256:x",
        pricing_revision="none",
        caller_token="",
        caller_queue="q",
        timeout_seconds=30,
        targets=[Target(deployment_id="rf/a", provider="openai", model="m", endpoint_ref="env:X")],
    )


async def test_the_workflows_close_writes_what_the_hot_paths_finalize_writes(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """`close` (the workflow's finalize_receipt, knowing only the summary) and `finalize` (the
    call's own, with its input) are one mapping: the same columns, the same events — and the
    API's claim and finalise straight on asyncpg (`direct`) store every value with the type
    and value the SQLAlchemy ones store."""
    engine = sessions.kw["bind"]
    direct, plain = ReceiptStatements(engine, direct=True), ReceiptStatements(engine)
    found: list[tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]] = []
    for way in ("asyncpg", "sqlalchemy", "close"):
        statements = direct if way == "asyncpg" else plain
        data = _input(tenant)
        assert await statements.claim(data, "rf/a")
        assert not await statements.claim(data, "rf/a")  # a used key
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=InvocationOutcome.COMPLETED,
            usage_status=UsageStatus.REPORTED,
            deployment_id="rf/b",
            input_tokens=7,
            output_tokens=3,
            cached_input_tokens=2,
            cache_write_input_tokens=4,
            estimated_cost_usd=Decimal("0.00012"),
            latency_ms=40,
            time_to_first_token_ms=9,
            output_artifact_ref="sha256:out",
            provider_request_id="req-1",
            fallback_used=True,
            fallback_from="rf/a",
            fallback_reason="unavailable",
        )
        if way != "close":
            assert await statements.finalize(data, summary)
        else:
            assert await statements.close(tenant, summary)
        assert not await statements.close(tenant, summary)  # the first close wins
        assert not await statements.finalize(data, summary)
        async with sessions() as session:
            row = await by_key(session, tenant, data.idempotency_key)
            assert row is not None
            events = (
                await session.scalars(
                    select(OutboxEventRow)
                    .where(col(OutboxEventRow.aggregate_id) == str(data.invocation_id))
                    .order_by(col(OutboxEventRow.position))
                )
            ).all()
        ids = {str(data.invocation_id), str(data.run_id), str(data.attempt_id)}
        columns = {
            n: (type(v), v)
            for n, v in row.model_dump().items()
            if n not in ("started_at", "ended_at")
            and _json(v) not in ids | {data.idempotency_key}
            and n not in ("route_plan_id", "policy_decision_id")
        }
        found.append(
            (
                columns,
                [
                    (e.event_type, {k: v for k, v in e.payload.items() if v not in ids})
                    for e in events
                ],
            )
        )
    await direct.aclose()
    assert found[0] == found[1] == found[2]
    columns, written = found[0]
    assert columns["deployment_id"] == (str, "rf/b")
    assert columns["close_reason"] == (str, "completed")
    assert columns["estimated_cost_usd"] == (Decimal, Decimal("0.00012"))
    # The cache writes the provider reported are the receipt's own count (migration 0017): the
    # reconciler prices them and a replay reports them; no close path wrote them before.
    assert columns["cache_write_input_tokens"] == (int, 4)
    assert [t for t, _ in written] == ["ModelInvoked", "ModelFallbackUsed"]


def test_model_invoked_carries_a_cost_in_fixed_point() -> None:
    """A Decimal's own text is scientific for small amounts: the payload said `8.0E-7` for a
    tiny call and `0E-8` for a free one, which usage accounting read as text, not a number."""
    data, now = _input("t"), datetime.now(UTC)
    for cost, text in ((Decimal("0.00000080"), "0.00000080"), (Decimal("0E-8"), "0.00000000")):
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=InvocationOutcome.COMPLETED,
            usage_status=UsageStatus.REPORTED,
            estimated_cost_usd=cost,
        )
        receipt = {**receipt_fields.claim_values(data, "rf/a", now)}
        receipt.update(receipt_fields.close_values(summary, now))
        assert receipt_fields.model_invoked(receipt)["payload"]["estimatedCostUsd"] == text


async def test_a_receipts_cost_reads_in_fixed_point_through_the_api(
    http: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
) -> None:
    """A zero-priced call (NUMERIC(18, 8) reads back as `0E-8`) and a tiny one (`8.0E-7`):
    the REST receipt, as ModelInvoked, writes them as plain decimals."""
    run = uuid.uuid4()
    for cost, at in ((Decimal("0"), 0), (Decimal("0.0000008"), 1)):
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="rf/cost",
            started_at=datetime(2026, 12, 1, 0, 0, at, tzinfo=UTC),
            usage_status=UsageStatus.REPORTED,
            estimated_cost_usd=cost,
            run_id=run,
        )
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    listed = await http.get(f"/factory/runs/{run}/model-receipts", headers=auth)
    assert listed.status_code == 200, listed.text
    assert [r["estimatedCostUsd"] for r in listed.json()] == ["0.00000000", "0.00000080"]
