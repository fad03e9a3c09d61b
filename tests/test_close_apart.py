"""Where the workflow retries a close the caller's process could not write: on the closers queue,
which only the standalone workers poll (the process whose store had just failed it never takes
it), and on the shared invocation queue when no worker polls the closers queue (a standalone
worker from before it, or none running), once the first attempt has waited 10 s to be taken."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.settings import Settings
from core.temporal import connect
from domain.invocation import closer_queue, invoke_workflow_id
from providers.upstream import UpstreamServer
from providers.upstream.turn import Reply
from tests.conftest import TokenFactory
from tests.helpers.activity_history import activity_runs
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.gateway_calls import invoke
from tests.helpers.refused_close import refused_close
from tests.helpers.stack import serve
from worker import build_invocation_worker, build_worker

MODEL = "close-apart"


async def test_a_close_no_standalone_worker_takes_is_written_on_the_invocation_queue(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    deployment = {"model": MODEL, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "apart", {"ca/a": deployment})
    upstream.register(MODEL, lambda turn: Reply(text="closed all the same"))
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"apart-{run}",
            "temporal_invocation_task_queue": f"apart-inv-{run}",
        }
    )
    # The standalone worker as it was before the closers queue: its shared and invocation
    # queues only.
    client = await connect(own)
    shared = build_worker(client, own, sessions)
    invocations = build_invocation_worker(await connect(own), own, sessions)
    key = f"ca-{uuid.uuid4().hex}"
    async with (
        shared,
        invocations,
        serve(own, client) as api,
        httpx.AsyncClient(base_url=api.url) as own_http,
        refused_close(sessions, key) as fault,
    ):
        call = asyncio.ensure_future(invoke(own_http, auth, "apart", stream=False, key=key))
        # The call's own close is refused (the store away); the workflow's is let through.
        await eventually(fault.refused, timeout=30, interval=0.05)
        await fault.lift()
        text, receipt = await call
    assert text == "closed all the same"
    assert receipt["outcome"] == "Completed"
    runs = await activity_runs(temporal_client, invoke_workflow_id(tenant, receipt["invocationId"]))
    closes = [(r.activity, r.queue, r.end) for r in runs]
    assert closes == [
        ("finalize_receipt", closer_queue(own.temporal_invocation_task_queue), "timed_out"),
        ("finalize_receipt", own.temporal_invocation_task_queue, "completed"),
    ], closes
