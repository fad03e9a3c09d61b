"""A run keeps the profile version its route plan was resolved under (retired or superseded
since), new runs get the newest active version; and a call that tenant policy leaves without a
candidate is a denial, not a transient failure."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from activities.lifecycle_types import workflow_id
from core import metrics
from providers.upstream import Fault, FaultKind, UpstreamServer
from store import route_plans
from store.receipts import by_key
from store.tables import InvocationReceiptRow, OutboxEventRow, RoutePlanRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import (
    approved_deployment,
    profile_event,
    publish,
    record_evidence,
    register,
)
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow

INTERNAL_NOT_EXTERNAL = {
    "allowedPrivacyClasses": {
        "Public": ["External", "Regional", "Confidential", "Local"],
        "Internal": ["Regional", "Confidential", "Local"],
        "Confidential": ["Confidential", "Local"],
        "Restricted": ["Local"],
    }
}


class Ctx:
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
        # Upstream models are per test: faults and request counts never leak between tests.
        self.tag = uuid.uuid4().hex[:8]

    def model(self, name: str) -> str:
        return f"{name}-{self.tag}"

    async def deployment(self, deployment_id: str, model: str, **over: Any) -> None:
        await approved_deployment(
            self.http,
            self.auth,
            self.temporal,
            self.tenant,
            deployment_id,
            model=self.model(model),
            endpointRef=self.upstream.endpoint_ref,
            **over,
        )

    async def profile(self, profile_id: str, allowed: list[str], **over: Any) -> None:
        resp = await publish(self.http, self.auth, profile_event(profile_id, allowed, {}, **over))
        assert resp.status_code == 200, resp.text

    async def retire(self, profile_id: str, version: str) -> None:
        event = {
            "eventType": "AssetReleaseDeprecated",
            "releaseId": f"rel-{profile_id}-{version}",
            "profileId": profile_id,
            "version": version,
        }
        resp = await self.http.post("/factory/asset-events", json=event, headers=self.auth)
        assert resp.status_code == 200, resp.text

    async def policy(self, revision: str, policy: dict[str, Any]) -> None:
        body = {"revision": revision, "policy": policy}
        resp = await self.http.put("/factory/tenant-policy", json=body, headers=self.auth)
        assert resp.status_code == 200, resp.text

    async def chat(
        self,
        profile_id: str,
        run: uuid.UUID | None = None,
        key: str | None = None,
        data_class: str = "Internal",
    ) -> tuple[httpx.Response, str]:
        key = key or f"pin-{uuid.uuid4().hex}"
        headers = {**self.auth, "Idempotency-Key": key, "X-Data-Classification": data_class}
        if run is not None:
            headers["X-Run-Id"] = str(run)
        resp = await self.http.post(
            "/v1/chat/completions",
            headers=headers,
            json={"model": profile_id, "messages": [{"role": "user", "content": "pinned?"}]},
        )
        return resp, key

    async def tool_call(self, profile_id: str, run: uuid.UUID) -> httpx.Response:
        """A call on the run that asks for tools."""
        tool = {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}
        return await self.http.post(
            "/v1/chat/completions",
            headers={**self.auth, "X-Run-Id": str(run), "X-Data-Classification": "Internal"},
            json={
                "model": profile_id,
                "messages": [{"role": "user", "content": "?"}],
                "tools": [tool],
            },
        )

    async def receipt(self, key: str) -> InvocationReceiptRow | None:
        async with self.sessions() as s:
            return await by_key(s, self.tenant, key)

    async def plan(self, run: uuid.UUID, profile_id: str) -> RoutePlanRow | None:
        async with self.sessions() as s:
            return await route_plans.find(s, self.tenant, run, profile_id)

    def requests(self, model: str) -> int:
        return self.upstream.requests(self.model(model))


@pytest.fixture
async def ctx(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[Ctx]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    c = Ctx(http, auth, temporal_client, upstream, sessions, tenant)
    yield c
    for name in ("a", "b", "ext", "reg"):
        upstream.state.clear_faults(c.model(name))


def _problem(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/problem+json"), resp.text
    return dict(resp.json())


class _PlanStatements:
    """The statements on `route_plans` that name one run, from every engine in this process
    (the API under test runs in it): what the run's plan costs the database."""

    def __init__(self, run: uuid.UUID) -> None:
        self.run, self.seen = run, 0

    def __call__(self, conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "route_plans" in statement and self.run.hex in repr(params).replace("-", ""):
            self.seen += 1


async def test_a_runs_later_calls_reuse_its_pinned_plan_without_a_plan_statement(
    ctx: Ctx,
) -> None:
    await ctx.deployment("pin/a", "a")
    await ctx.profile("cached", ["pin/a"])
    run = uuid.uuid4()
    count = _PlanStatements(run)
    event.listen(Engine, "before_cursor_execute", count)
    try:
        first, first_key = await ctx.chat("cached", run)
        assert first.status_code == 200, first.text
        # The first call of the run looks for its plan and pins one: the counter sees that.
        assert count.seen >= 2
        count.seen = 0
        later = [await ctx.chat("cached", run) for _ in range(3)]
        # Every later call in the run goes on the plan this process pinned and remembered
        # (api/invocations.py, `_remember`): not one statement on route_plans for it.
        assert count.seen == 0
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    pinned = await ctx.receipt(first_key)
    assert pinned is not None and pinned.route_plan_id is not None
    for resp, key in later:
        assert resp.status_code == 200, resp.text
        row = await ctx.receipt(key)
        assert row is not None and row.route_plan_id == pinned.route_plan_id
    plan = await ctx.plan(run, "cached")
    assert plan is not None and plan.route_plan_id == pinned.route_plan_id


async def test_a_run_pinned_to_a_retired_version_is_still_served(ctx: Ctx) -> None:
    await ctx.deployment("pin/a", "a")
    await ctx.profile("retiring", ["pin/a"])
    run = uuid.uuid4()
    first, first_key = await ctx.chat("retiring", run)
    assert first.status_code == 200, first.text
    await ctx.retire("retiring", "1")  # no active version is left

    served, key = await ctx.chat("retiring", run)
    assert served.status_code == 200, served.text
    assert served.headers["X-Model-Router-Deployment"] == "pin/a"
    row, pinned = await ctx.receipt(key), await ctx.receipt(first_key)
    assert row is not None and pinned is not None
    assert str(row.invocation_id) == served.headers["X-Model-Router-Receipt-Id"]
    assert (row.outcome, row.deployment_id) == ("Completed", "pin/a")
    assert row.route_plan_id == pinned.route_plan_id and row.run_id == run

    # Nothing new may start on the retired version: a new run, or a call without one.
    before = ctx.requests("a")
    for fresh in (uuid.uuid4(), None):
        refused, refused_key = await ctx.chat("retiring", fresh)
        assert refused.status_code == 404, refused.text
        assert _problem(refused)["field"] == "body.model"
        assert await ctx.receipt(refused_key) is None
    assert ctx.requests("a") == before


async def test_a_run_keeps_its_version_when_a_newer_one_is_activated(ctx: Ctx) -> None:
    await ctx.deployment("pin/a", "a")
    await ctx.deployment("pin/b", "b")
    await ctx.profile("pin-b", ["pin/b"])
    await ctx.profile("evolving", ["pin/a"], priceBasis="basis-1")
    run = uuid.uuid4()
    first, first_key = await ctx.chat("evolving", run)
    assert first.status_code == 200, first.text
    first_row = await ctx.receipt(first_key)
    assert first_row is not None and first_row.pricing_revision == "basis-1"
    # v2 bills against another pricebook and may fall back to pin-b; v1 stays active too.
    await ctx.profile(
        "evolving",
        ["pin/a"],
        version="2",
        priceBasis="basis-2",
        fallbackEnabled=True,
        fallbackChain=["pin-b"],
    )

    pinned, pinned_key = await ctx.chat("evolving", run)
    fresh_run = uuid.uuid4()
    fresh, fresh_key = await ctx.chat("evolving", fresh_run)
    assert pinned.status_code == fresh.status_code == 200
    pinned_row, fresh_row = await ctx.receipt(pinned_key), await ctx.receipt(fresh_key)
    assert pinned_row is not None and fresh_row is not None
    assert (pinned_row.pricing_revision, fresh_row.pricing_revision) == ("basis-1", "basis-2")

    # pin/a fails: the run keeps v1's "no fallback", the new run takes v2's fallback.
    ctx.upstream.inject(ctx.model("a"), Fault(kind=FaultKind.UNAVAILABLE))
    b_before = ctx.requests("b")
    failed, failed_key = await ctx.chat("evolving", run)
    assert failed.status_code == 503, failed.text
    failed_row = await ctx.receipt(failed_key)
    assert failed_row is not None
    assert (failed_row.outcome, failed_row.deployment_id, failed_row.fallback_used) == (
        "Failed",
        "pin/a",
        False,
    )
    assert ctx.requests("b") == b_before

    rescued, rescued_key = await ctx.chat("evolving", fresh_run)
    assert rescued.status_code == 200, rescued.text
    rescued_row = await ctx.receipt(rescued_key)
    assert rescued_row is not None
    assert (rescued_row.deployment_id, rescued_row.fallback_used) == ("pin/b", True)
    assert ctx.requests("b") == b_before + 1


async def test_every_candidate_refused_by_tenant_policy_is_a_denial(ctx: Ctx) -> None:
    await ctx.deployment("deny/ext", "ext", privacyClass="External")
    await ctx.profile("outside", ["deny/ext"], privacyClass="External")
    await ctx.policy("deny-1", INTERNAL_NOT_EXTERNAL)
    reason = {"tenant": ctx.tenant, "reason": "privacy_denied_by_policy"}
    denials, calls = metrics.denials.value(reason), ctx.requests("ext")

    # The runtime's order: ResolveRoutePlan first, then Invoke. An empty route is refused the
    # same way, and not pinned: the run may be served once the policy allows it.
    run = uuid.uuid4()
    plan = await ctx.http.post(
        "/gateway/route-plans",
        json={"runId": str(run), "profileId": "outside", "dataClassification": "Internal"},
        headers=ctx.auth,
    )
    assert plan.status_code == 403, plan.text
    assert _problem(plan)["reason"] == "privacy_denied_by_policy"
    assert await ctx.plan(run, "outside") is None
    keys = []
    for pinned in (None, run):
        denied, key = await ctx.chat("outside", pinned)
        keys.append(key)
        assert denied.status_code == 403, denied.text
        problem = _problem(denied)
        assert problem["type"] == "https://model-router.dev/problems/policy-denied"
        assert (problem["reason"], problem["field"]) == (
            "privacy_denied_by_policy",
            "dataClassification",
        )
        assert problem["errorClass"] == "permanent" and problem["policyRevision"] == "deny-1"
        assert "privacy class External not allowed by tenant policy" in problem["detail"]
        assert problem["excluded"] == [
            {
                "deploymentId": "deny/ext",
                "code": "privacy_denied_by_policy",
                "reason": "privacy class External not allowed by tenant policy",
            }
        ]
        assert "Retry-After" not in denied.headers
    assert metrics.denials.value(reason) == denials + 2
    assert ctx.requests("ext") == calls  # no provider saw the call
    # Nothing reached an adapter, so there is no receipt, and the key is not spent.
    assert [await ctx.receipt(k) for k in keys] == [None, None]

    # The gateway surface says the same.
    gateway = await ctx.http.post(
        "/gateway/invoke",
        headers=ctx.auth,
        json={
            "profileId": "outside",
            "request": {"messages": [{"role": "user", "content": "hi"}]},
        },
    )
    assert gateway.status_code == 403 and _problem(gateway)["reason"] == "privacy_denied_by_policy"

    # Public data may go External: it was the policy, not the catalog.
    public, _ = await ctx.chat("outside", data_class="Public")
    assert public.status_code == 200, public.text
    # Once the policy lets Internal data out, the denied key is served.
    open_policy = {"allowedPrivacyClasses": {"Internal": ["External", "Regional"]}}
    await ctx.policy("deny-2", open_policy)
    again, _ = await ctx.chat("outside", key=keys[0])
    assert again.status_code == 200, again.text
    # The run that was refused is served too, and only now gets its plan.
    in_run, _ = await ctx.chat("outside", run)
    assert in_run.status_code == 200, in_run.text
    plan_now = await ctx.plan(run, "outside")
    assert plan_now is not None and list(plan_now.candidates) == ["deny/ext"]
    assert ctx.requests("ext") == calls + 3

    # Policy refuses one candidate, the other is Degraded: that one comes back by itself when
    # its probe recovers, so the call is worth retrying and stays a transient failure.
    await ctx.policy("deny-3", INTERNAL_NOT_EXTERNAL)
    await ctx.deployment("deny/reg", "reg")
    await ctx.profile("mixed", ["deny/ext", "deny/reg"], privacyClass="External")
    handle = ctx.temporal.get_workflow_handle(workflow_id(ctx.tenant, "deny/reg"))
    record = await handle.execute_update(DeploymentLifecycleWorkflow.probe_failed)
    assert record.state == "Degraded"
    denials = metrics.denials.value(reason)
    resp, key = await ctx.chat("mixed")
    assert resp.status_code == 503, resp.text
    problem = _problem(resp)
    assert problem["errorClass"] == "transient" and resp.headers["Retry-After"]
    assert metrics.denials.value(reason) == denials
    assert await ctx.receipt(key) is None


async def test_a_run_planned_for_less_sensitive_data_takes_no_call_its_policy_refuses(
    ctx: Ctx,
) -> None:
    # The run is planned for Internal data on a Regional deployment. A later Restricted call on
    # it (policy: Local only) went there too, where the same call without a run is refused.
    await ctx.deployment("cls/reg", "reg", privacyClass="Regional")
    await ctx.deployment("cls/local", "a", privacyClass="Local")
    await ctx.profile("classes", ["cls/reg"], privacyClass="Regional")
    await ctx.policy("cls-1", INTERNAL_NOT_EXTERNAL)
    run = uuid.uuid4()
    first, _ = await ctx.chat("classes", run, data_class="Internal")
    assert first.status_code == 200, first.text
    calls = ctx.requests("reg")
    reason = {"tenant": ctx.tenant, "reason": "run-planned-for-other-data"}
    denials = metrics.denials.value(reason)

    restricted, key = await ctx.chat("classes", run, data_class="Restricted")
    assert restricted.status_code == 403, restricted.text
    problem = _problem(restricted)
    assert problem["type"] == "https://model-router.dev/problems/policy-denied"
    assert (problem["reason"], problem["field"]) == (
        "run-planned-for-other-data",
        "dataClassification",
    )
    assert problem["errorClass"] == "permanent"
    assert metrics.denials.value(reason) == denials + 1
    alone, _ = await ctx.chat("classes", data_class="Restricted")
    assert alone.status_code == 403, alone.text  # the same call without a run
    assert ctx.requests("reg") == calls and await ctx.receipt(key) is None

    # Less or equally sensitive data keeps the run's plan.
    for data_class in ("Public", "Internal"):
        served, key = await ctx.chat("classes", run, data_class=data_class)
        assert served.status_code == 200, served.text
        assert (await ctx.receipt(key)).deployment_id == "cls/reg"  # type: ignore[union-attr]
    # A Confidential call on a run planned on a Local deployment is served: the policy lets
    # Local deployments see it.
    await ctx.profile("local", ["cls/local"], privacyClass="Local")
    local_run = uuid.uuid4()
    assert (await ctx.chat("local", local_run, data_class="Public"))[0].status_code == 200
    confidential, key = await ctx.chat("local", local_run, data_class="Confidential")
    assert confidential.status_code == 200, confidential.text
    assert (await ctx.receipt(key)).deployment_id == "cls/local"  # type: ignore[union-attr]


async def test_a_run_that_starts_while_its_deployments_are_down_is_served_once_they_heal(
    ctx: Ctx,
) -> None:
    await ctx.deployment("heal/a", "a")
    await ctx.profile("healing", ["heal/a"])
    handle = ctx.temporal.get_workflow_handle(workflow_id(ctx.tenant, "heal/a"))
    assert (await handle.execute_update(DeploymentLifecycleWorkflow.probe_failed)).state == (
        "Degraded"
    )
    run = uuid.uuid4()
    down, _ = await ctx.chat("healing", run)
    assert down.status_code == 503 and _problem(down)["errorClass"] == "transient"
    resolved = await ctx.http.post(
        "/gateway/route-plans",
        json={"runId": str(run), "profileId": "healing"},
        headers=ctx.auth,
    )
    assert resolved.status_code == 503 and resolved.headers["Retry-After"]
    # Nothing was pinned, so the recovery reaches this run as well as new ones.
    assert await ctx.plan(run, "healing") is None
    assert (await handle.execute_update(DeploymentLifecycleWorkflow.probe_recovered)).state == (
        "Approved"
    )
    served, _ = await ctx.chat("healing", run)
    assert served.status_code == 200, served.text
    pinned = await ctx.plan(run, "healing")
    assert pinned is not None and list(pinned.candidates) == ["heal/a"]


async def test_a_runs_call_with_tools_goes_only_to_a_deployment_measured_for_them(
    ctx: Ctx,
) -> None:
    """The run's first call asked for no tools, so its plan promised none: both deployments,
    one never measured for tool calling. A later call with tools went to that one, the plan's
    first, where the same call without a run is never routed."""
    await register(
        ctx.http, ctx.auth, "pin/untooled", model=ctx.model("a"),
        endpointRef=ctx.upstream.endpoint_ref,
    )  # fmt: skip
    await record_evidence(ctx.temporal, ctx.tenant, "pin/untooled", {"json-schema": 0.9})
    approved = await ctx.http.post(
        "/factory/model-deployments/pin/untooled/approve", headers=ctx.auth
    )
    assert approved.status_code == 200, approved.text
    await ctx.deployment("pin/tooled", "b")
    await ctx.profile("needs", ["pin/untooled", "pin/tooled"])
    run = uuid.uuid4()
    first, first_key = await ctx.chat("needs", run)
    assert first.status_code == 200, first.text
    pinned = await ctx.receipt(first_key)
    assert pinned is not None and pinned.deployment_id == "pin/untooled"  # the plan's first
    tooled = await ctx.tool_call("needs", run)
    assert tooled.status_code == 200, tooled.text
    assert tooled.headers["X-Model-Router-Deployment"] == "pin/tooled"
    assert ctx.requests("a") == 1  # the unmeasured one took only the call without tools

    # A run pinned on the unmeasured deployment alone has none to give it: a refusal that
    # says why, not a call to it.
    await ctx.profile("untooled-only", ["pin/untooled"])
    alone = uuid.uuid4()
    assert (await ctx.chat("untooled-only", alone))[0].status_code == 200
    refused = await ctx.tool_call("untooled-only", alone)
    assert refused.status_code == 400, refused.text
    assert "planned without tool-calling" in refused.text
    assert ctx.requests("a") == 2

    # The one measured for tools retired: the first run has none left to take the call, for
    # good (it was a 503 to come back after, waiting on a Retired deployment for ever), while
    # its calls without tools still go to the other.
    retired = await ctx.http.post("/factory/model-deployments/pin/tooled/retire", headers=ctx.auth)
    assert retired.status_code == 200, retired.text
    gone = await ctx.tool_call("needs", run)
    assert gone.status_code == 400 and "planned without tool-calling" in gone.text, gone.text
    assert (await ctx.chat("needs", run))[0].status_code == 200


async def test_a_run_whose_deployments_are_all_retired_is_told_so_not_to_come_back(
    ctx: Ctx,
) -> None:
    """A pinned plan never changes and a Retired deployment never returns: the run's calls
    were 503s with Retry-After, a retry for ever. They are a permanent refusal saying why; a
    new run is planned afresh."""
    await ctx.deployment("pin/leaving", "a")
    await ctx.profile("leaving", ["pin/leaving"])
    run = uuid.uuid4()
    assert (await ctx.chat("leaving", run))[0].status_code == 200
    retired = await ctx.http.post("/factory/model-deployments/pin/leaving/retire", headers=ctx.auth)
    assert retired.status_code == 200, retired.text
    refused, _ = await ctx.chat("leaving", run)
    assert refused.status_code == 409, refused.text
    problem = _problem(refused)
    assert problem["reason"] == "run-plan-retired" and problem["errorClass"] == "permanent"
    assert "Retry-After" not in refused.headers
    assert ctx.requests("a") == 1


async def test_a_retired_runs_call_goes_to_its_enabled_fallback_chain(ctx: Ctx) -> None:
    """A run whose plan's deployments are all Retired was refused (409) before its profile's
    enabled fallback chain was tried, while one whose deployments were all Degraded was served
    by that chain. The chain serves it, as a fallback from the plan's first for the reason the
    run alone is refused; with no chain target either, the 409 stands."""
    await ctx.deployment("pin/leaving", "a")
    await ctx.deployment("pin/staying", "b")
    await ctx.profile("staying", ["pin/staying"])
    await ctx.profile("chained", ["pin/leaving"], fallbackEnabled=True, fallbackChain=["staying"])
    run = uuid.uuid4()
    first, first_key = await ctx.chat("chained", run)
    assert first.status_code == 200 and first.headers["X-Model-Router-Deployment"] == "pin/leaving"
    retired = await ctx.http.post("/factory/model-deployments/pin/leaving/retire", headers=ctx.auth)
    assert retired.status_code == 200, retired.text
    fallbacks = metrics.fallbacks.value({"profile": "chained", "reason": "run-plan-retired"})
    served, key = await ctx.chat("chained", run)
    assert served.status_code == 200, served.text
    assert served.headers["X-Model-Router-Deployment"] == "pin/staying"
    receipt = await ctx.receipt(key)
    assert receipt is not None and receipt.fallback_used
    assert receipt.route_plan_id == (await ctx.receipt(first_key)).route_plan_id  # type: ignore[union-attr]
    async with ctx.sessions() as s:
        used = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == ctx.tenant)
                .where(col(OutboxEventRow.event_type) == "ModelFallbackUsed")
                .where(col(OutboxEventRow.aggregate_id) == str(receipt.invocation_id))
            )
        ).all()
    assert [e.payload for e in used] == [
        {
            "invocationId": str(receipt.invocation_id),
            "tenantId": ctx.tenant,
            "profileId": "chained",
            "fromDeploymentId": "pin/leaving",
            "toDeploymentId": "pin/staying",
            "reason": "run-plan-retired",
        }
    ]
    assert metrics.fallbacks.value({"profile": "chained", "reason": "run-plan-retired"}) == (
        fallbacks + 1
    )
    assert ctx.requests("a") == 1

    # The chain's deployment Degraded for now: the run waits on it, a 503 to come back after
    # (it was the run's 409 for good, though the chain would serve it once back).
    handle = ctx.temporal.get_workflow_handle(workflow_id(ctx.tenant, "pin/staying"))
    assert (await handle.execute_update(DeploymentLifecycleWorkflow.probe_failed)).state == (
        "Degraded"
    )
    waiting, _ = await ctx.chat("chained", run)
    assert waiting.status_code == 503, waiting.text
    assert _problem(waiting)["errorClass"] == "transient" and waiting.headers["Retry-After"]

    # The chain's own deployment retired as well: nothing serves the run, for good.
    gone = await ctx.http.post("/factory/model-deployments/pin/staying/retire", headers=ctx.auth)
    assert gone.status_code == 200, gone.text
    refused, _ = await ctx.chat("chained", run)
    assert refused.status_code == 409, refused.text
    assert _problem(refused)["reason"] == "run-plan-retired"


async def test_a_runs_call_its_plan_cannot_take_goes_to_its_enabled_fallback_chain(
    ctx: Ctx,
) -> None:
    """A call asking for tools its run's plan does not promise, none of the plan's deployments
    measured for them, was refused (`run-planned-without-need`) before the profile's enabled
    fallback chain was tried; the chain's deployment measured for tools serves it."""
    await register(
        ctx.http, ctx.auth, "pin/untooled", model=ctx.model("a"),
        endpointRef=ctx.upstream.endpoint_ref,
    )  # fmt: skip
    await record_evidence(ctx.temporal, ctx.tenant, "pin/untooled", {"json-schema": 0.9})
    approved = await ctx.http.post(
        "/factory/model-deployments/pin/untooled/approve", headers=ctx.auth
    )
    assert approved.status_code == 200, approved.text
    await ctx.deployment("pin/tooled", "b")
    await ctx.profile("tooled", ["pin/tooled"])
    await ctx.profile("untooled", ["pin/untooled"], fallbackEnabled=True, fallbackChain=["tooled"])
    run = uuid.uuid4()
    first, _ = await ctx.chat("untooled", run)
    assert first.status_code == 200, first.text
    assert first.headers["X-Model-Router-Deployment"] == "pin/untooled"
    tools = await ctx.tool_call("untooled", run)
    assert tools.status_code == 200, tools.text
    assert tools.headers["X-Model-Router-Deployment"] == "pin/tooled"
    assert ctx.requests("a") == 1


async def test_a_run_begun_while_its_first_deployment_is_degraded_keeps_it_in_its_plan(
    ctx: Ctx,
) -> None:
    """A run's first call came while pin/a was Degraded: its plan kept only pin/b, for good. Once
    pin/a recovered and pin/b went Degraded, every call of the run was a 503 (a 409 once pin/b
    retired), though pin/a was Approved and healthy. Degraded deployments are skipped by the
    router without changing the route plan: the run's plan holds both, pin/a skipped while it
    is Degraded."""
    await ctx.deployment("pin/a", "a")
    await ctx.deployment("pin/b", "b")
    await ctx.profile("outage", ["pin/a", "pin/b"])
    a = ctx.temporal.get_workflow_handle(workflow_id(ctx.tenant, "pin/a"))
    b = ctx.temporal.get_workflow_handle(workflow_id(ctx.tenant, "pin/b"))
    assert (await a.execute_update(DeploymentLifecycleWorkflow.probe_failed)).state == "Degraded"
    run = uuid.uuid4()
    first, first_key = await ctx.chat("outage", run)
    assert first.status_code == 200, first.text
    assert first.headers["X-Model-Router-Deployment"] == "pin/b"
    row = await ctx.receipt(first_key)
    assert row is not None and row.fallback_used  # pin/a passed over: it is the plan's first
    plan = await ctx.plan(run, "outage")
    assert plan is not None and list(plan.candidates) == ["pin/a", "pin/b"]

    assert (await a.execute_update(DeploymentLifecycleWorkflow.probe_recovered)).state == (
        "Approved"
    )
    assert (await b.execute_update(DeploymentLifecycleWorkflow.probe_failed)).state == "Degraded"
    served, key = await ctx.chat("outage", run)
    assert served.status_code == 200, served.text
    assert served.headers["X-Model-Router-Deployment"] == "pin/a"
    row = await ctx.receipt(key)
    assert row is not None and (row.deployment_id, row.fallback_used) == ("pin/a", False)
    assert row.route_plan_id == plan.route_plan_id
    assert (ctx.requests("a"), ctx.requests("b")) == (1, 1)
