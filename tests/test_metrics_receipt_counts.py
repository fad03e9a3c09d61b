"""Every receipt with its ModelInvoked counts once in `invocations`, and every token a receipt
comes to hold counts in `tokens`, whoever writes them: a budget's denial (Denied), the receipt
sweeper's close (Failed), and the reconciler's settlement of usage its close could not know.
Each under the dimensions the call's own close counts in (tenant, profile, provider, …), read
from the in-process copy of the instruments."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.reconciliation import ReconciliationActivities
from activities.reconciliation_types import WindowInput
from activities.sweeper import SweeperActivities
from core import metrics
from core.settings import Settings
from domain.enums import DeploymentState, PrivacyClass, UsageStatus
from domain.invocation import InvocationInput, Target
from domain.statements import StatementLine
from domain.sweep import SweepInput, Workflow
from providers.secrets import default_broker
from store import statements
from store.db import transaction
from store.receipt_statements import ReceiptStatements
from store.receipts import by_key
from store.tables import InvocationReceiptRow, ModelDeploymentRow
from tests.helpers.invocations import completed, invocation_input
from tests.helpers.receipts import add_receipt, receipts
from tests.helpers.surfaces import Catalog

HOUR = datetime(2026, 11, 20, 9, tzinfo=UTC)
# What tests/helpers/receipts.add_receipt writes as every receipt's profile.
RECEIPT_PROFILE = "code-agent"


async def _deployment(
    sessions: async_sessionmaker[AsyncSession], tenant: str, dep: str, provider: str
) -> None:
    """The tenant's deployment row, which names a receipt's provider."""
    async with transaction(sessions) as session:
        session.add(
            ModelDeploymentRow(
                tenant_id=tenant,
                deployment_id=dep,
                provider=provider,
                model=f"m-{uuid.uuid4().hex[:8]}",
                region="eu",
                privacy_class=PrivacyClass.EXTERNAL,
                endpoint_ref=f"env:KEY_{uuid.uuid4().hex[:8].upper()}",
                state=DeploymentState.APPROVED,
            )
        )


def _invocations(tenant: str, profile: str, provider: str, outcome: str) -> float:
    return metrics.invocations.value(
        {"tenant": tenant, "profile": profile, "provider": provider, "outcome": outcome}
    )


def _tokens(tenant: str, provider: str) -> tuple[float, float]:
    where = {"tenant": tenant, "profile": RECEIPT_PROFILE, "provider": provider}
    return (
        metrics.tokens.value({**where, "direction": "input"}),
        metrics.tokens.value({**where, "direction": "output"}),
    )


# --- a budget's denial ----------------------------------------------------------------------


async def test_a_budget_denial_counts_one_denied_invocation(
    http: httpx.AsyncClient, catalog: Catalog, tenant: str
) -> None:
    profile = catalog.profile("openai")
    before = _invocations(tenant, profile, "openai", "Denied")
    call = {
        "profileId": profile,
        "idempotencyKey": f"poor-{uuid.uuid4().hex[:8]}",
        "budgetUsd": "0.000001",  # under the worst case of any call
        "request": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50},
    }
    denied = await http.post("/gateway/invoke", headers=catalog.auth, json=call)
    assert denied.status_code == 402, denied.text
    assert _invocations(tenant, profile, "openai", "Denied") == before + 1
    # Its key sent again replays the denial: the same receipt, not another invocation.
    again = await http.post("/gateway/invoke", headers=catalog.auth, json=call)
    assert again.status_code == 402, again.text
    assert again.json()["receiptId"] == denied.json()["receiptId"]
    assert _invocations(tenant, profile, "openai", "Denied") == before + 1


# --- the sweeper's close --------------------------------------------------------------------


async def _left_open(
    sessions: async_sessionmaker[AsyncSession], tenant: str, profile: str
) -> InvocationInput:
    """A receipt claimed an hour ago whose InvokeModel was never started: the sweeper's."""
    target = Target(deployment_id="mc/dep", provider="anthropic", model="m", endpoint_ref="env:X")
    data = invocation_input(
        tenant, f"lost-{uuid.uuid4().hex[:8]}", profile_id=profile, target=target
    )
    assert await ReceiptStatements(sessions.kw["bind"]).claim(data, "mc/dep")
    async with transaction(sessions) as session:
        await session.execute(
            update(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.invocation_id) == data.invocation_id)
            .values(started_at=datetime.now(UTC) - timedelta(hours=1))
        )
    return data


async def _sweep(client: Client, acts: SweeperActivities) -> None:
    await ActivityEnvironment(client=client).run(
        acts.sweep, SweepInput(open_longer_than_seconds=600)
    )


async def test_a_receipt_the_sweeper_closes_counts_one_failed_invocation(
    temporal_client: Client, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    profile = f"swept-{uuid.uuid4().hex[:6]}"
    await _deployment(sessions, tenant, "mc/dep", "anthropic")
    data = await _left_open(sessions, tenant, profile)
    before = _invocations(tenant, profile, "anthropic", "Failed")
    acts = SweeperActivities(sessions)
    await _sweep(temporal_client, acts)
    async with sessions() as session:
        row = await by_key(session, tenant, data.idempotency_key)
    assert row is not None and row.close_reason == "swept"
    # Under the receipt's profile and its deployment's provider, as the call's close counts.
    assert _invocations(tenant, profile, "anthropic", "Failed") == before + 1
    await _sweep(temporal_client, acts)  # closed: nothing to sweep, nothing counted again
    assert _invocations(tenant, profile, "anthropic", "Failed") == before + 1


async def test_a_sweep_that_loses_to_the_calls_own_close_counts_nothing(
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The call's close lands between the sweeper's listing and its close: that close counted
    the invocation (Completed); the sweep writes nothing and counts nothing."""
    profile = f"raced-{uuid.uuid4().hex[:6]}"
    await _deployment(sessions, tenant, "mc/dep", "anthropic")
    data = await _left_open(sessions, tenant, profile)
    statements_ = ReceiptStatements(sessions.kw["bind"])
    looked_up = SweeperActivities._workflow

    async def closed_meanwhile(self: SweeperActivities, tenant_id: str, invocation: str) -> Any:
        if invocation == str(data.invocation_id):
            assert await statements_.finalize(data, completed(data))  # the call's own close
            return Workflow.NEVER_STARTED
        return await looked_up(self, tenant_id, invocation)

    monkeypatch.setattr(SweeperActivities, "_workflow", closed_meanwhile)
    failed = _invocations(tenant, profile, "anthropic", "Failed")
    swept = metrics.receipts_swept.value({"tenant": tenant})
    await _sweep(temporal_client, SweeperActivities(sessions))
    async with sessions() as session:
        row = await by_key(session, tenant, data.idempotency_key)
    assert row is not None and row.outcome == "Completed"
    assert _invocations(tenant, profile, "anthropic", "Failed") == failed
    assert metrics.receipts_swept.value({"tenant": tenant}) == swept


# --- the reconciler's settlement ------------------------------------------------------------


async def _settle_by_request_id(
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    tenant: str,
    request_id: str,
    tokens: tuple[int, int],
) -> int:
    """One reconciler window over HOUR, with a statement line naming `request_id`; the number
    of receipts it settled."""
    line = StatementLine(
        statement_ref=f"import/mc-{uuid.uuid4().hex[:8]}#L1",
        source="import/mc",
        provider="openai",
        tenant_id=tenant,
        provider_request_id=request_id,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
    )
    async with transaction(sessions) as session:
        await statements.upsert_lines(session, [line])
    async with httpx.AsyncClient() as unused:  # no statement source: the window reads the store
        acts = ReconciliationActivities(sessions, settings, default_broker(), unused)
        window = WindowInput(start=HOUR, end=HOUR + timedelta(hours=1), tenant_ids=[tenant])
        return (await ActivityEnvironment().run(acts.window, window)).settled


async def _waiting(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    status: UsageStatus,
    tokens: tuple[int | None, int | None],
) -> tuple[uuid.UUID, str]:
    """A closed receipt awaiting usage, carrying a request id of its own."""
    await _deployment(sessions, tenant, "mc/gpt", "openai")
    request_id = f"req_{uuid.uuid4().hex[:12]}"
    receipt = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="mc/gpt",
        started_at=HOUR + timedelta(minutes=5),
        usage_status=status,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        provider_request_id=request_id,
    )
    return receipt, request_id


async def test_a_receipt_reconciled_from_usage_unknown_adds_its_tokens_once(
    sessions: async_sessionmaker[AsyncSession], settings: Settings, tenant: str
) -> None:
    receipt, request_id = await _waiting(sessions, tenant, UsageStatus.UNKNOWN, (None, None))
    before = _tokens(tenant, "openai")
    assert await _settle_by_request_id(sessions, settings, tenant, request_id, (120, 30)) == 1
    row = (await receipts(sessions, [receipt]))[receipt]
    assert (row.usage_status, row.input_tokens, row.output_tokens) == (
        UsageStatus.RECONCILED,
        120,
        30,
    )
    assert _tokens(tenant, "openai") == (before[0] + 120, before[1] + 30)
    # Another line naming it settles nothing more (the receipt no longer awaits), adds nothing.
    assert await _settle_by_request_id(sessions, settings, tenant, request_id, (999, 999)) == 0
    assert _tokens(tenant, "openai") == (before[0] + 120, before[1] + 30)


async def test_an_estimated_receipt_reconciled_adds_only_what_passes_its_estimate(
    sessions: async_sessionmaker[AsyncSession], settings: Settings, tenant: str
) -> None:
    """Its close counted our own estimate (300 in, 50 out): the statement's 320 in, 40 out
    adds the 20 input tokens the estimate missed, never the 320 again."""
    receipt, request_id = await _waiting(sessions, tenant, UsageStatus.ESTIMATED, (300, 50))
    before = _tokens(tenant, "openai")
    assert await _settle_by_request_id(sessions, settings, tenant, request_id, (320, 40)) == 1
    row = (await receipts(sessions, [receipt]))[receipt]
    assert (row.usage_status, row.input_tokens) == (UsageStatus.RECONCILED, 320)
    assert _tokens(tenant, "openai") == (before[0] + 20, before[1])
