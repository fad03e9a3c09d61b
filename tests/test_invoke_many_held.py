"""Many calls held at once in one API process. Past its workflow-task slots (256) a start is not
eager: its first task goes round the standalone worker, and the call is adopted by an activity on
the process's caller queue, which must start within 10 s or the call is taken for lost. That
queue's worker had Temporal's default 100 activity slots, so the calls past 356 waited for a
slot while the others were held, and their receipts were closed `caller-lost` (Failed, usage
Unknown) beside calls that then answered. Every call is adopted now, and every receipt says what
its call did."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import openai
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from core.settings import Settings
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve, workers

PROFILE, MODEL = "many-held", "many-held-sim"
# Past the workflow-task slots (256) and the caller queue's former 100 activity slots.
CALLS = 380
HI: Any = [{"role": "user", "content": "hold on"}]


async def test_calls_held_past_the_eager_slots_are_all_adopted_and_answered(
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"held-{run}",
            "temporal_invocation_task_queue": f"held-inv-{run}",
            "invoke_first_token_timeout_seconds": 120.0,
        }
    )
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    endpoint = {"provider": "openai", "model": MODEL, "endpointRef": upstream.endpoint_ref}
    before = upstream.requests(MODEL)
    # Every answer is held until the test releases it.
    upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=120, times=CALLS))
    async with workers(own, sessions) as client, serve(own, client) as api:
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
            await approved_profile(http, auth, client, tenant, PROFILE, {"mh/sim": endpoint})
        sdk = openai.AsyncOpenAI(
            base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=180
        )
        keys = [f"held-{run}-{n}" for n in range(CALLS)]
        calls = [
            asyncio.ensure_future(
                sdk.chat.completions.create(
                    model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": key}
                )
            )
            for key in keys
        ]
        hub = api.app.state.runtime.invoke.hub
        # Every call reached the provider, and every one was adopted by its workflow's
        # activity (an adopted call leaves the hub's table): one left there past its caller
        # queue's 10 s was taken for lost.
        await eventually(lambda: upstream.requests(MODEL) - before >= CALLS, timeout=120)
        await eventually(lambda: not hub._calls, timeout=120, interval=0.2)

        def released() -> bool:
            upstream.release()
            return all(c.done() for c in calls)

        await eventually(released, timeout=120, interval=0.2)
        answers = await asyncio.gather(*calls)
        await sdk.close()
    assert all(a.choices[0].message.content for a in answers)
    async with sessions() as session:
        rows = await session.execute(
            select(col(InvocationReceiptRow.outcome), func.count())
            .where(col(InvocationReceiptRow.tenant_id) == tenant)
            .where(col(InvocationReceiptRow.idempotency_key).in_(keys))
            .group_by(col(InvocationReceiptRow.outcome))
        )
        outcomes = {str(outcome): count for outcome, count in rows.all()}
    assert outcomes == {"Completed": CALLS}, outcomes
    assert upstream.requests(MODEL) - before == CALLS  # one provider call per key
