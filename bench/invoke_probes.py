"""Where the time goes: the pieces of a gateway call, each timed alone at concurrency 1 from the
benchmark's process with the product's own functions — HTTP into the API, the database steps,
the InvokeModel workflow on Temporal, the provider adapter, hashing and the artifact write."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from api.openai_shapes import ChatCompletionIn, to_chat_request
from bench.invoke_config import DEPLOYMENT, MODEL_PROBE, PROFILE, PROMPT, TENANT
from bench.invoke_database import pg_connect
from bench.invoke_load import BenchError
from bench.invoke_stack import Stack
from bench.probe_input import probe_input
from core.settings import Settings
from core.temporal import connect
from domain.enums import InvocationOutcome, UsageStatus
from domain.hashing import canonical_json, request_hash
from domain.invocation import InvocationInput, InvocationSummary, Target
from providers.registry import resolve_adapter
from providers.secrets import default_broker
from providers.types import ProviderTimeouts, TextDelta
from routing.snapshots import SnapshotCache
from store import receipts
from store.artifacts import ArtifactStore
from store.receipt_statements import Claim, ReceiptStatements
from store.tables import ModelDeploymentRow
from workflows.invoke import InvokeModelWorkflow


async def timed(n: int, fn: Callable[[int], Awaitable[object]]) -> list[float]:
    for i in range(min(20, n)):
        await fn(-1 - i)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - t0)
    return out


def target_of(deployment: ModelDeploymentRow) -> Target:
    return Target(
        deployment_id=deployment.deployment_id,
        provider=deployment.provider,
        model=deployment.model,
        endpoint_ref=deployment.endpoint_ref,
    )


async def temporal_probe(
    client: Client,
    deployment: ModelDeploymentRow,
    n: int,
    stub: Callable[..., Awaitable[InvocationSummary]],
    entered: dict[uuid.UUID, float],
    runner: UnsandboxedWorkflowRunner | None,
) -> dict[str, list[float]]:
    """The real InvokeModel workflow, started eagerly on a worker in this process built on the
    same client, its `call_provider` local activity a stub that returns at once."""
    queue = f"bench-probe-{uuid.uuid4().hex[:8]}"
    started: list[float] = []
    to_activity: list[float] = []
    options: dict[str, Any] = {"workflow_runner": runner} if runner is not None else {}
    async with Worker(
        client,
        task_queue=queue,
        workflows=[InvokeModelWorkflow],
        activities=[stub],
        max_concurrent_workflow_tasks=64,
        **options,
    ):

        async def start(i: int) -> None:
            data = probe_input(i, target_of(deployment), queue)
            t0 = time.perf_counter()
            handle = await client.start_workflow(
                InvokeModelWorkflow.run,
                data,
                id=f"bench-probe/{data.invocation_id}",
                task_queue=queue,
                request_eager_start=True,
            )
            t1 = time.perf_counter()
            await handle.result()
            if i >= 0:
                started.append(t1 - t0)
                to_activity.append(entered[data.invocation_id] - t0)

        to_result = await timed(n, start)
    return {
        "start_returned": started,
        "start_to_activity": to_activity,
        "start_to_result": to_result,
    }


async def probe_pieces(
    n: int,
    stack: Stack,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    database_url: str,
    token: str,
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    api = f"http://127.0.0.1:{stack.api_port}"
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:

        async def healthz(_: int) -> None:
            (await http.get("/healthz")).raise_for_status()

        async def models(_: int) -> None:
            (await http.get("/v1/models", headers=auth)).raise_for_status()

        out["api_healthz"] = await timed(n, healthz)
        out["api_models"] = await timed(n, models)

    # The database steps of one invocation, with the product's own store functions and an
    # engine built like the API's (pool, pre-ping), each in its own session as the API does.
    async with sessions() as session:
        deployment = (
            await session.scalars(
                select(ModelDeploymentRow)
                .where(col(ModelDeploymentRow.tenant_id) == TENANT)
                .where(col(ModelDeploymentRow.deployment_id) == DEPLOYMENT)
            )
        ).one()

    async def by_key(i: int) -> None:
        async with sessions() as session:
            await receipts.by_key(session, TENANT, f"bench-missing-{i}")

    # As the API runs them: straight on asyncpg (store/asyncpg_path.py).
    statements = ReceiptStatements(sessions.kw["bind"], direct=True)

    async def version(_: int) -> None:
        await statements.catalog_version()

    cache = SnapshotCache(sessions, statements)

    async def view(_: int) -> None:
        # What routing reads now: the catalog version, then profile and deployments from the
        # snapshot cached per version (the first call compiles it; warm-up absorbs that).
        current = await cache.view(TENANT)
        current.targets([DEPLOYMENT], current.current_profile(PROFILE).embedding_compatibility)

    async def cached(_: int) -> None:
        # What a call without a budget reads: nothing; the snapshot in memory, its version
        # checked by the claim (ReceiptStatements.claim_at).
        current = cache.cached(TENANT)
        if current is None:
            raise BenchError("probe snapshot not compiled")
        current.targets([DEPLOYMENT], current.current_profile(PROFILE).embedding_compatibility)

    claimed: list[InvocationInput] = []

    async def claim(i: int) -> None:
        data = probe_input(i, target_of(deployment), "unused")
        version = cache.cached(TENANT).snapshot.version  # type: ignore[union-attr]
        if await statements.claim_at(data, DEPLOYMENT, version) is not Claim.CLAIMED:
            raise BenchError("probe claim refused")
        claimed.append(data)

    async def finalize(_: int) -> None:
        data = claimed.pop()
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=InvocationOutcome.COMPLETED,
            usage_status=UsageStatus.REPORTED,
            deployment_id=DEPLOYMENT,
            input_tokens=30,
            output_tokens=35,
            latency_ms=3,
        )
        if not await statements.finalize(data, summary):
            raise BenchError("probe finalize found nothing")

    out["db_idempotency_lookup"] = await timed(n, by_key)
    out["db_catalog_version"] = await timed(n, version)
    out["catalog_view"] = await timed(n, view)
    out["catalog_cached"] = await timed(n, cached)
    out["db_claim"] = await timed(n, claim)
    out["db_finalize"] = await timed(n, finalize)
    await statements.aclose()

    conn = await pg_connect(database_url)
    try:

        async def select1(_: int) -> None:
            await conn.fetchval("SELECT 1")

        out["db_raw_select1"] = await timed(n, select1)
    finally:
        await conn.close()

    # Temporal: the real InvokeModel workflow started eagerly on a worker in this process, with
    # a stub `call_provider` local activity that returns at once: start to the activity, and
    # start to the workflow's result.
    entered: dict[uuid.UUID, float] = {}

    @activity.defn(name="call_provider")
    async def stub_call(data: InvocationInput) -> InvocationSummary:
        entered[data.invocation_id] = time.perf_counter()
        return InvocationSummary(invocation_id=data.invocation_id)

    client = await connect(settings)
    for runner, suffix in ((None, ""), (UnsandboxedWorkflowRunner(), "_unsandboxed")):
        timings = await temporal_probe(client, deployment, n, stub_call, entered, runner)
        for name, values in timings.items():
            out[f"temporal_{name}{suffix}"] = values

    # The provider call as the activity makes it: the product's OpenAI adapter, streaming.
    adapter = await resolve_adapter(
        default_broker(allow_upstream=True),
        provider="openai",
        model=MODEL_PROBE,
        endpoint_ref=f"upstream:127.0.0.1:{stack.upstream_port}",
        timeouts=ProviderTimeouts(connect=5, read=60),
    )
    first: list[float] = []
    try:

        async def provider(i: int) -> None:
            body = {
                "model": PROFILE,
                "messages": [{"role": "user", "content": PROMPT.format(i=f"probe-{i}")}],
            }
            request = to_chat_request(ChatCompletionIn.model_validate(body))
            t0 = time.perf_counter()
            seen = False
            async for event in adapter.stream(request):
                if not seen and isinstance(event, TextDelta):
                    seen = True
                    if i >= 0:
                        first.append(time.perf_counter() - t0)

        out["provider_adapter_stream"] = await timed(n, provider)
        out["provider_adapter_first_token"] = first
    finally:
        await adapter.aclose()

    # In-process work of the API around the call: request model and hash, artifact write.
    store = ArtifactStore(stack.work / "probe-artifacts")

    async def convert_and_hash(i: int) -> None:
        body = {
            "model": PROFILE,
            "messages": [{"role": "user", "content": PROMPT.format(i=f"hash-{i}")}],
        }
        chat = to_chat_request(ChatCompletionIn.model_validate(body))
        request_hash({"op": "chat", "profile": PROFILE, **chat.model_dump(mode="json")})

    async def artifact(i: int) -> None:
        store.put(TENANT, canonical_json({"text": PROMPT.format(i=f"art-{i}-{uuid.uuid4()}")}))

    out["api_parse_and_hash"] = await timed(n, convert_and_hash)
    out["artifact_put"] = await timed(n, artifact)
    return out
