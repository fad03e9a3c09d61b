"""A confidential workload never falls back to an external provider (DESIGN §4.5), whether its
primary failed at call time or was passed over before any call (Degraded, past the budget).
Through the openai SDK against the API and the local upstream; the tenant's policy lets an
External deployment into a Confidential plan (`externalMaySeeConfidential`) as its second
candidate, so only the fallback rule keeps the call from it. The rule itself
(domain/fallback.py `may_stand_in`) is checked alone at the end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from activities.lifecycle_types import workflow_id
from domain.fallback import may_stand_in, stand_ins
from domain.invocation import Target
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipts import by_key
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow

EVERY = ["External", "Regional", "Confidential", "Local"]
# Confidential data may see an External deployment: the plan holds one.
LETS_EXTERNAL_IN = {
    "allowedPrivacyClasses": {
        "Public": EVERY,
        "Internal": EVERY,
        "Confidential": ["Confidential", "External"],
        "Restricted": ["Local"],
    },
    "externalMaySeeConfidential": True,
}


class Private:
    """Profile `{name}` on `pv/{name}` (Confidential), then `pv/ext` (External), fallback on;
    each deployment on an upstream model of this test's own."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        auth: dict[str, str],
        temporal: Client,
        upstream: UpstreamServer,
        sessions: async_sessionmaker[AsyncSession],
        tenant: str,
    ) -> None:
        self.http, self.auth, self.temporal = http, auth, temporal
        self.upstream, self.sessions, self.tenant = upstream, sessions, tenant
        self.tag = uuid.uuid4().hex[:8]

    def model(self, name: str) -> str:
        return f"pv-{name}-{self.tag}"

    async def deployment(self, name: str, privacy: str) -> None:
        await approved_deployment(
            self.http,
            self.auth,
            self.temporal,
            self.tenant,
            f"pv/{name}",
            model=self.model(name),
            privacyClass=privacy,
            endpointRef=self.upstream.endpoint_ref,
        )

    async def profile(self, name: str, **over: Any) -> None:
        # A fallback needs a chain: a profile on the Confidential one alone, harmless here.
        solo = profile_event(f"{name}-solo", [f"pv/{name}"], privacyClass="Confidential", **over)
        assert (await publish(self.http, self.auth, solo)).status_code == 200
        event = profile_event(
            name,
            [f"pv/{name}", "pv/ext"],
            privacyClass="External",
            fallbackEnabled=True,
            fallbackChain=[f"{name}-solo"],
            **over,
        )
        published = await publish(self.http, self.auth, event)
        assert published.status_code == 200, published.text

    async def degrade(self, name: str) -> None:
        """What the health probe does when the deployment's probes fail."""
        handle = self.temporal.get_workflow_handle(workflow_id(self.tenant, f"pv/{name}"))
        assert (await handle.execute_update(DeploymentLifecycleWorkflow.probe_failed)).state == (
            "Degraded"
        )

    async def receipt(self, key: str) -> InvocationReceiptRow | None:
        async with self.sessions() as s:
            return await by_key(s, self.tenant, key)

    async def fallback(self, row: InvocationReceiptRow) -> dict[str, Any]:
        """The call's ModelFallbackUsed payload."""
        async with self.sessions() as s:
            found = (
                await s.scalars(
                    select(OutboxEventRow)
                    .where(col(OutboxEventRow.tenant_id) == self.tenant)
                    .where(col(OutboxEventRow.event_type) == "ModelFallbackUsed")
                    .where(col(OutboxEventRow.aggregate_id) == str(row.invocation_id))
                )
            ).all()
        assert len(found) == 1, found
        return dict(found[0].payload)

    def requests(self, name: str) -> int:
        return self.upstream.requests(self.model(name))


@pytest.fixture
async def pv(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[Private]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    p = Private(http, auth, temporal_client, upstream, sessions, tenant)
    policy = {"revision": f"pv-{p.tag}", "policy": LETS_EXTERNAL_IN}
    assert (await http.put("/factory/tenant-policy", json=policy, headers=auth)).status_code == 200
    # Capability alone ranks: equal evidence keeps the profile's order, prices or not.
    weights = {"capability": 1.0, "cost": 0.0, "latency": 0.0, "history": 0.0}
    assert (await http.put("/factory/routing/weights", json=weights, headers=auth)).is_success
    await p.deployment("ext", "External")
    yield p
    for name in ("ext", "failing", "degraded", "priced"):
        upstream.state.clear_faults(p.model(name))


async def _chat(
    sdk: AsyncOpenAI,
    profile: str,
    data_class: str,
    *,
    run: uuid.UUID | None = None,
    budget: str | None = None,
) -> tuple[Any, str]:
    """The SDK's call: its completion's raw response, or the APIStatusError it raised; and
    the call's idempotency key."""
    key = f"pv-{uuid.uuid4().hex}"
    headers = {"Idempotency-Key": key, "X-Data-Classification": data_class}
    if run is not None:
        headers["X-Run-Id"] = str(run)
    if budget is not None:
        headers["X-Budget-Usd"] = budget
    try:
        raw = await sdk.chat.completions.with_raw_response.create(
            model=profile,
            messages=[{"role": "user", "content": "private?"}],
            max_tokens=10,
            extra_headers=headers,
        )
    except openai.APIStatusError as refused:
        return refused, key
    return raw, key


def _answer(refused: openai.APIStatusError) -> tuple[int, str, bool]:
    """What a caller is told: the status, the error's class, whether to come back after."""
    problem = refused.response.json()
    return refused.status_code, problem["errorClass"], "retry-after" in refused.response.headers


async def test_a_confidential_call_whose_primary_is_degraded_never_goes_to_an_external_one(
    pv: Private, openai_sdk: AsyncOpenAI
) -> None:
    # The failing-primary case, as it was answered already: the Confidential deployment's
    # provider is down, and the External one may not stand in for it.
    await pv.deployment("failing", "Confidential")
    await pv.profile("failing")
    pv.upstream.inject(pv.model("failing"), Fault(kind=FaultKind.UNAVAILABLE))
    ext = pv.requests("ext")
    failed, key = await _chat(openai_sdk, "failing", "Confidential")
    assert isinstance(failed, openai.APIStatusError), failed
    assert pv.requests("failing") >= 1 and pv.requests("ext") == ext
    row = await pv.receipt(key)
    assert row is not None
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Failed", "pv/failing", False)
    failing_answer = _answer(failed)
    assert failing_answer == (503, "transient", True)

    # The Degraded case: a run pinned while both were well, then the primary Degraded. It was
    # skipped before any call and the call went to the External deployment, recorded as a
    # fallback to it.
    await pv.deployment("degraded", "Confidential")
    await pv.profile("degraded")
    run = uuid.uuid4()
    served, _ = await _chat(openai_sdk, "degraded", "Confidential", run=run)
    assert served.headers["x-model-router-deployment"] == "pv/degraded"
    await pv.degrade("degraded")
    for pinned in (run, None):
        refused, key = await _chat(openai_sdk, "degraded", "Confidential", run=pinned)
        assert isinstance(refused, openai.APIStatusError), refused.headers
        assert _answer(refused) == failing_answer
        assert pv.requests("ext") == ext  # never sent to the External deployment
        assert await pv.receipt(key) is None  # nothing reached an adapter
    assert pv.requests("degraded") == 1

    # Data an External deployment may see still falls back to it, with or without a run.
    for pinned in (None, uuid.uuid4()):
        answered, key = await _chat(openai_sdk, "degraded", "Internal", run=pinned)
        assert answered.headers["x-model-router-deployment"] == "pv/ext"
        row = await pv.receipt(key)
        assert row is not None
        assert (row.deployment_id, row.fallback_used) == ("pv/ext", True)
        used = await pv.fallback(row)
        assert (used["fromDeploymentId"], used["reason"]) == ("pv/degraded", "degraded")
    assert pv.requests("ext") == ext + 2


async def test_a_confidential_call_the_budget_narrows_never_goes_to_an_external_one(
    pv: Private, openai_sdk: AsyncOpenAI
) -> None:
    """The Confidential primary is past the call's budget and the External second fits it:
    the budget's admission keeps only the targets it covers, and kept the External one alone."""
    entries = [
        {"provider": "openai", "model": pv.model(name), "inputUsdPerMtok": usd,
         "outputUsdPerMtok": usd, "effectiveFrom": "2026-01-01"}
        for name, usd in (("priced", "100000"), ("ext", "1000"))
    ]  # fmt: skip
    prices = {"revision": f"pv-{pv.tag}", "entries": entries}
    published = await pv.http.post("/factory/pricebook-revisions", json=prices, headers=pv.auth)
    assert published.status_code == 201, published.text
    await pv.deployment("priced", "Confidential")
    await pv.profile("priced", priceBasis=f"pv-{pv.tag}")
    ext = pv.requests("ext")

    # Worst cases: a few USD on the Confidential one, some hundredths on the External one.
    denied, key = await _chat(openai_sdk, "priced", "Confidential", budget="1")
    assert isinstance(denied, openai.APIStatusError), denied.headers
    assert denied.status_code == 402 and denied.response.json()["reason"] == "over-budget"
    assert pv.requests("ext") == ext and pv.requests("priced") == 0
    row = await pv.receipt(key)
    assert row is not None and row.outcome == "Denied"

    answered, key = await _chat(openai_sdk, "priced", "Internal", budget="1")
    assert answered.headers["x-model-router-deployment"] == "pv/ext"
    row = await pv.receipt(key)
    assert row is not None
    assert row.fallback_used and (await pv.fallback(row))["reason"] == "over-budget"
    assert pv.requests("ext") == ext + 1


def _target(deployment_id: str, privacy: str) -> Target:
    return Target(
        deployment_id=deployment_id,
        provider="openai",
        model="m",
        endpoint_ref="env:X",
        privacy_class=privacy,
        external=privacy == "External",
    )


def test_only_the_primary_or_a_permitted_stand_in_stays_on_a_route() -> None:
    conf, ext, local = (
        _target("conf", "Confidential"),
        _target("ext", "External"),
        _target("local", "Local"),
    )
    allowed = ["External", "Confidential", "Local"]
    for data_class in ("Confidential", "Restricted"):
        # Whoever the primary is, an External stand-in never serves confidential data…
        assert stand_ins([conf, ext, local], "conf", data_class, allowed) == [conf, local]
        assert stand_ins([ext, local], "conf", data_class, allowed) == [local]
        # …but the plan's own External primary (the policy let it in) is no fallback.
        assert stand_ins([ext, conf], "ext", data_class, allowed) == [ext, conf]
    assert stand_ins([ext], "conf", "Internal", allowed) == [ext]
    # A privacy class the plan does not allow stands in for no one; no list: no restriction.
    assert not may_stand_in("Internal", ["Confidential"], "Regional", False)
    assert may_stand_in("Internal", [], "Regional", False)
    assert stand_ins([local, conf], "conf", "Internal", ["Confidential"]) == [conf]
