"""A call's end reaches its workflow once the caller's response is over, not before: the
activity's result starts the SDK's work to complete the workflow task on the API's event loop,
which then no longer runs ahead of the response's last bytes. The receipt is final before both.

- the activity holds a finished call's result until the response is over, and the receipt is
  already closed while it holds;
- outside a gateway request (nobody to wait for) it does not hold;
- the gateway's middleware runs what waits for the response only once the response is over,
  after its last body chunk, for a stream too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.invoke_hub import InvocationHub
from activities.invoke_setup import invoke_activities
from api.server_timing import ServerTimingMiddleware
from core import timing
from core.settings import Settings
from domain.invocation import Disposition, Target
from providers.types import ChatRequest, Message
from providers.upstream import UpstreamServer
from store import receipts
from tests.helpers.deadline import eventually
from tests.helpers.invocations import invocation_input


async def test_the_activity_reports_a_finished_call_once_the_response_is_over(
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    hub = InvocationHub()
    acts, adapters = invoke_activities(settings, sessions, hub)
    try:
        request = ChatRequest(messages=(Message(role="user", content="held"),))
        token, pending = hub.open(request, caller_claims=True)
        target = Target(
            deployment_id="sim/after",
            provider="openai",
            model="after-sim",
            endpoint_ref=upstream.endpoint_ref,
        )
        data = invocation_input(tenant, profile_id="after", target=target, caller_token=token)
        # As the API does: claim, begin the call; the activity adopts it.
        assert await acts.statements.claim(data, "sim/after")
        acts.begin(data, pending)
        activity = asyncio.create_task(ActivityEnvironment().run(acts.call_provider, data))

        async def closed() -> bool:
            async with sessions() as session:
                row = await receipts.by_key(session, tenant, data.idempotency_key)
            return row is not None and row.ended_at is not None

        await eventually(closed)  # the call ended and its receipt is final
        assert pending.work is not None and pending.work.done()
        assert not activity.done()  # the response is not over: the workflow hears nothing yet
        pending.delivered.set()
        summary = await asyncio.wait_for(activity, 20)
        assert summary.disposition is Disposition.DONE and summary.outcome == "Completed"
    finally:
        await adapters.aclose()


async def test_outside_a_gateway_request_nothing_waits() -> None:
    ran: list[str] = []
    timing.after_response(lambda: ran.append("now"))
    assert ran == ["now"]


async def test_the_middleware_runs_what_waited_after_the_last_chunk() -> None:
    app = FastAPI()
    after: list[str] = []
    first_sent = asyncio.Event()
    go_on = asyncio.Event()

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        timing.after_response(lambda: after.append("over"))

        async def body() -> AsyncIterator[bytes]:
            yield b"first\n"
            first_sent.set()
            await go_on.wait()
            yield b"last\n"

        return StreamingResponse(body(), media_type="text/plain")

    app.add_middleware(ServerTimingMiddleware)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
            client.stream("GET", "/stream") as response,
        ):
            chunks = response.aiter_bytes()
            assert (await anext(chunks)).startswith(b"first")
            await first_sent.wait()
            assert after == []  # the response is still going
            go_on.set()
            rest = b"".join([chunk async for chunk in chunks])
            assert rest.endswith(b"last\n")
        await eventually(lambda: after == ["over"])
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
