"""`evaluate --wait` rides out the API going away under it, until its --timeout: one reset
connection or refused reconnect (the API restarting) or a 503 ended an hour's wait with exit 2,
and a poll sent into a connection that had gone silent waited the HTTP client's 60 s past the
wait's own deadline. The real API, behind a TCP proxy that resets and silences connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx
import pytest

from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import register
from tests.helpers.cli import run
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.tcp_proxy import SeverableProxy


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


@dataclass
class Waiting:
    """A deployment whose evaluation takes a while, and the CLI's way to the API through a
    proxy the test can reset, refuse or silence."""

    dep: str
    model: str
    proxy: SeverableProxy
    env: dict[str, str]


@asynccontextmanager
async def _behind_proxy(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    cli_env: dict[str, str],
    api_url: str,
    name: str,
) -> AsyncIterator[Waiting]:
    dep, model = f"wait/{name}", f"wait-{name}-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    upstream.inject(model, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=1.0))
    api = urlparse(api_url)
    try:
        async with SeverableProxy(str(api.hostname), int(api.port or 80)) as proxy:
            env = {**cli_env, "MODEL_ROUTER_API_URL": f"http://127.0.0.1:{proxy.port}"}
            yield Waiting(dep, model, proxy, env)
    finally:
        upstream.state.clear_faults(model)


async def test_the_wait_outlasts_the_api_going_away_and_coming_back(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    cli_env: dict[str, str],
    api_url: str,
) -> None:
    async with _behind_proxy(http, auth, upstream, cli_env, api_url, "back") as w:
        # The first poll reaches the API and its connection is reset before the answer; then
        # every new connection is refused, as while the API restarts.
        w.proxy.cut_request_with(
            f"GET /factory/model-deployments/{w.dep} ".encode(), then_down=True
        )
        waiting = asyncio.create_task(
            run(w.env, "deployments", "evaluate", w.dep, "--wait", "--timeout", "120")
        )
        await eventually(lambda: not w.proxy.cut_pending(), timeout=30)
        # The CLI meets a refused connection, and tries again.
        await eventually(lambda: w.proxy.refused >= 2, timeout=30)
        w.proxy.restore()
        upstream.state.clear_faults(w.model)
        result = await asyncio.wait_for(waiting, 120)
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "did not answer" in said and "trying again" in said, said
    assert "tool-calling" in result.stdout and "PASS RATE" in result.stdout


async def test_a_poll_into_a_silent_connection_ends_at_the_waits_deadline(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    cli_env: dict[str, str],
    api_url: str,
) -> None:
    """Ended at the wait's own deadline, and as a wait that ran out: the evaluation was read
    running, and the API went quiet after. The deadline reached inside a poll exited 2 (come
    back), where README says a wait still running after --timeout exits 1."""
    async with _behind_proxy(http, auth, upstream, cli_env, api_url, "silent") as w:
        started = time.monotonic()
        waiting = asyncio.create_task(
            run(w.env, "deployments", "evaluate", w.dep, "--wait", "--timeout", "4")
        )
        # Once the wait has read the evaluation running (its second poll goes out only after
        # the first was answered): its connections go silent, open ones and new ones.
        poll = f"GET /factory/model-deployments/{w.dep} ".encode()
        await eventually(
            lambda: sum(c.startswith(poll) for c in w.proxy.sent) >= 2, timeout=30, interval=0.01
        )
        w.proxy.sever(partition=True)
        result = await asyncio.wait_for(waiting, 120)
        elapsed = time.monotonic() - started
        w.proxy.restore()
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert "is still running after 4 s as last seen" in said, said
    # Ended by the wait's own deadline, not by the HTTP client's 60 s timeout.
    assert "did not answer" in said and "until the wait's deadline" in said, said
    assert elapsed < UNBOUNDED, elapsed


async def test_an_api_out_of_reach_for_the_whole_wait_exits_2(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    cli_env: dict[str, str],
    api_url: str,
) -> None:
    """No read of the wait answered (the API gone from its first poll on): exit 2, the API out
    of reach, as README says of an API that does not answer."""
    async with _behind_proxy(http, auth, upstream, cli_env, api_url, "away") as w:
        w.proxy.cut_request_with(
            f"GET /factory/model-deployments/{w.dep} ".encode(), then_down=True
        )
        result = await run(w.env, "deployments", "evaluate", w.dep, "--wait", "--timeout", "3")
        w.proxy.restore()
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "did not answer" in said and "kept so until the wait's deadline" in said, said
    assert "still running" not in said, said
