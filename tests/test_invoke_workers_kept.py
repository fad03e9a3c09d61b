"""The API process's in-process workers stop on their own (the SDK gives a worker up after a
run of poll errors): the process notices, refuses invocations meanwhile (`/readyz` not ready,
503 with Retry-After) and builds them again. Unnoticed, its calls' activities waited on a caller
queue nobody polled, and the workflow closed a call still running Failed (`caller-lost`)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import openai
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.settings import Settings
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve, workers

PROFILE, MODEL = "kept-workers", "kept-workers-sim"


async def test_workers_that_stop_are_built_again_and_calls_wait_for_them(
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
) -> None:
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"kept-{run}",
            "temporal_invocation_task_queue": f"kept-inv-{run}",
            "invoke_first_byte_timeout_seconds": 60.0,
            "invoke_first_token_timeout_seconds": 60.0,
        }
    )
    async with workers(own, sessions) as client, serve(own) as api:
        token = await token_for(tenant)
        auth = {"Authorization": f"Bearer {token}"}
        endpoint = {"provider": "openai", "endpointRef": upstream.endpoint_ref, "model": MODEL}
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
            await approved_profile(http, auth, client, tenant, PROFILE, {"kept/sim": endpoint})
            sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0)
            await sdk.chat.completions.create(
                model=PROFILE, messages=[{"role": "user", "content": "warm"}]
            )
            kept = api.app.state.runtime.invoke.workers
            seen: list[int] = []
            said: list[dict[str, bool]] = []  # readiness's checks while not ready

            process: list[int] = []  # the process's own readiness, meanwhile

            async def ready_again() -> bool:
                ready = await http.get("/readyz")
                seen.append(ready.status_code)
                if ready.status_code == 503:
                    said.append(ready.json()["checks"])
                    process.append((await http.get("/readyz/process")).status_code)
                return 503 in seen and seen[-1] == 200

            # One stops: it alone is built again; the other, and the calls it holds, run on.
            workflow_worker, caller_worker = kept.current
            await caller_worker.shutdown()  # as a worker the SDK gave up on: its run ends
            await eventually(ready_again, timeout=30, interval=0.05)
            assert workflow_worker in kept.current and caller_worker not in kept.current
            # The process itself stays in its load balancer: a rebuild ends by itself, and
            # after a Temporal outage every process's runs at once (counted, the Service
            # emptied while they did).
            assert process and set(process) == {200}, process
            # Readiness names the stopped worker, not Temporal, which answered throughout.
            assert said and all(
                checks
                == {"database": True, "schema": True, "temporal": True, "invocationWorkers": False}
                for checks in said
            ), said

            # Both stop.
            stopped = kept.current
            seen.clear()
            for worker in stopped:
                await worker.shutdown()
            await eventually(ready_again, timeout=30, interval=0.05)
            assert not set(kept.current) & set(stopped)

            # A call longer than the caller queue's 10 s schedule-to-start bound: its workflow
            # task is eager again, so the call is adopted and closed by its own task.
            key = f"kept-{run}"
            upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=12, times=1))
            answer = await sdk.chat.completions.create(
                model=PROFILE,
                messages=[{"role": "user", "content": "long"}],
                extra_headers={"Idempotency-Key": key},
                timeout=60,
            )
            assert answer.choices[0].message.content
            await sdk.close()
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed", row and row.close_reason
