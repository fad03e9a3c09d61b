"""Fixtures: a fresh PostgreSQL database and a real Temporal dev server (both started by
`make test`), an in-process worker, and the API served over real HTTP by uvicorn."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from api.app import create_app
from core.local_ports import free_port
from core.security import new_client_secret
from core.settings import Settings
from core.temporal import connect
from domain.enums import Role, Scope
from providers.upstream import ChatTurn, Reply, UpstreamServer, default_responder
from store.clients import upsert_client
from store.db import create_engine, session_factory
from store.migrate import upgrade
from tests.helpers import spans as span_helpers
from tests.helpers.surfaces import PROTOCOLS, Catalog, build_catalog
from worker import (
    build_closer_worker,
    build_invocation_worker,
    build_webhook_delivery_worker,
    build_webhook_poll_worker,
    build_worker,
    evaluation_adapters,
)

# pytest-xdist hands its test processes COLUMNS=80, and rich fixes a console's width from it when
# the console is made: the CLI's consoles, made at import, would print 80-column tables whatever
# width a test's CliRunner environment asks for.
os.environ.pop("COLUMNS", None)

# `MODEL_ROUTER_TEST_SHUFFLE_SEED=N` runs the tests in a shuffled order (no test may depend on
# another's order).
pytest_plugins = ["tests.helpers.shuffled_order"]

# Worker processes the tests spawn would otherwise create the real schedules on the shared
# Temporal server, pointed at a task queue nobody polls once the test ends.
os.environ.setdefault("MODEL_ROUTER_SCHEDULES_ENABLED", "false")

# The process's TracerProvider, set before any client or app exists, as a process configured
# with an OTLP endpoint would have it; tests read what it exports through `spans`.
span_helpers.install()


def _required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"{name} is not set: run the suite with `make test`, which starts PostgreSQL and "
            "a Temporal dev server for it",
            pytrace=False,
        )
    return value


def pg_server_url() -> str:
    return _required_env("MODEL_ROUTER_TEST_DATABASE_URL")


async def create_database(prefix: str) -> str:
    """A new, empty database on the test server; returns its SQLAlchemy URL."""
    server = make_url(pg_server_url())
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(
        host=server.host, port=server.port, user=server.username, database=server.database
    )
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server.set(database=name).render_as_string(hide_password=False)


async def drop_database(url: str) -> None:
    parsed = make_url(url)
    server = make_url(pg_server_url())
    conn = await asyncpg.connect(
        host=server.host, port=server.port, user=server.username, database=server.database
    )
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def database_url() -> AsyncIterator[str]:
    url = await create_database("mr_test")
    await asyncio.to_thread(upgrade, url)
    yield url
    await drop_database(url)


@pytest.fixture(scope="session")
def settings(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    session = uuid.uuid4().hex[:8]
    return Settings(
        environment="test",
        database_url=database_url,
        temporal_address=_required_env("MODEL_ROUTER_TEST_TEMPORAL_ADDRESS"),
        temporal_task_queue=f"model-router-test-{session}",
        temporal_invocation_task_queue=f"model-router-test-invocations-{session}",
        allow_upstream_endpoints=True,
        # The reconciler tests name per-key variables (OPENAI_KEY_A, …) as their endpointRefs.
        secret_env_prefixes=["MODEL_ROUTER_PROVIDER_", "OPENAI_KEY_", "ANTHROPIC_KEY_"],
        artifact_root=tmp_path_factory.mktemp("artifacts"),
        auth_jwt_secret=secrets.token_urlsafe(32),
        webhook_poll_interval_seconds=0.2,
        # The tests' receivers listen on loopback.
        webhook_allowed_private_networks=["127.0.0.0/8"],
        webhook_retry_max_interval_seconds=1.0,
        # Resilience in test time: the upstream's faults are measured against these bounds.
        invoke_first_token_timeout_seconds=2.0,
        invoke_stream_idle_timeout_seconds=2.0,
        invoke_retry_base_delay_seconds=0.05,
        invoke_retry_max_delay_seconds=0.2,
        invoke_retry_after_max_seconds=1.0,
        invoke_breaker_cooldown_seconds=1.0,
        # Per-profile and per-deployment bounds (tests/test_attempt_timeouts.py).
        invoke_timeout_overrides={
            "profile:tight-first-byte": {"first_byte": 0.5},
            "deployment:at/hole": {"connect": 0.5},
        },
        _env_file=None,
    )


@pytest.fixture(scope="session")
async def sessions(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(settings.database_url)
    yield session_factory(engine)
    await engine.dispose()


@pytest.fixture(params=["postgresql", "sqlite"])
async def store(
    request: pytest.FixtureRequest,
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The session's PostgreSQL, then a migrated SQLite file (the embedded default): for the
    reads each engine writes its own SQL for."""
    if request.param == "postgresql":
        yield sessions
        return
    url = f"sqlite+aiosqlite:///{tmp_path}/either.db"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
async def temporal_client(settings: Settings) -> Client:
    return await connect(settings)


@pytest.fixture(scope="session")
async def worker(
    temporal_client: Client, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[None]:
    adapters = evaluation_adapters(settings)
    w = build_worker(temporal_client, settings, sessions, adapters=adapters)
    # The standalone worker's share of invocations: it finishes those whose API process died.
    # Its own connection, as in production where it is another process (one client may not
    # run two workers on one queue).
    invocations = build_invocation_worker(await connect(settings), settings, sessions)
    closers = build_closer_worker(temporal_client, settings, sessions)
    polls = build_webhook_poll_worker(temporal_client, settings, sessions)
    deliveries = build_webhook_delivery_worker(temporal_client, settings, sessions)
    async with w, invocations, closers, polls, deliveries:
        yield
    await adapters.aclose()


@pytest.fixture(scope="session")
async def api_url(settings: Settings, temporal_client: Client, worker: None) -> AsyncIterator[str]:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, temporal_client),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = asyncio.get_running_loop().time() + 30
    while not server.started:
        if task.done() or asyncio.get_running_loop().time() > deadline:
            raise RuntimeError("the API did not start")
        await asyncio.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture
async def http(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        yield client


TokenFactory = Callable[..., Awaitable[str]]


@pytest.fixture
def token_for(sessions: async_sessionmaker[AsyncSession], api_url: str) -> TokenFactory:
    """Creates an OAuth client and fetches a real token from /oauth/token."""

    async def make(
        tenant: str,
        roles: list[Role] | None = None,
        scopes: list[Scope] | None = None,
    ) -> str:
        client_id = f"client-{uuid.uuid4().hex[:10]}"
        secret = new_client_secret()
        await upsert_client(
            sessions,
            tenant_id=tenant,
            client_id=client_id,
            secret=secret,
            roles=roles if roles is not None else [Role.PLATFORM_ADMIN],
            scopes=scopes if scopes is not None else list(Scope),
        )
        async with httpx.AsyncClient(base_url=api_url) as c:
            resp = await c.post(
                "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
            )
        resp.raise_for_status()
        return str(resp.json()["access_token"])

    return make


@pytest.fixture
def spans() -> Iterator[span_helpers.SpanCapture]:
    capture = span_helpers.install()
    capture.start()
    yield capture
    capture.stop()


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> Iterator[None] | None:
    # The Temporal SDK can abort in PyGILState_Release while the interpreter tears down its
    # native threads, flipping a green run's exit code. Everything is reported by now, so
    # leave with pytest's own status instead of risking that teardown.
    if _exit_status and os.environ.get("MODEL_ROUTER_TEST_HARD_EXIT", "1") == "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[-1])
    return None


@pytest.fixture
async def cli_env(
    api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> dict[str, str]:
    """Environment for the operator CLI: a PlatformAdmin client of the test tenant."""
    client_id, secret = f"cli-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[Role.PLATFORM_ADMIN],
        scopes=list(Scope),
    )
    return {
        "MODEL_ROUTER_API_URL": api_url,
        "MODEL_ROUTER_CLIENT_ID": client_id,
        "MODEL_ROUTER_CLIENT_SECRET": secret,
        "COLUMNS": "250",
    }


@pytest.fixture
async def openai_sdk(
    api_url: str, token_for: TokenFactory, tenant: str
) -> AsyncIterator[AsyncOpenAI]:
    """The openai SDK as a caller of the API, with the test's tenant's token and no retries of
    its own (a test that wants the SDK's retries makes its own client)."""
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=0
    ) as sdk:
        yield sdk


@pytest.fixture
async def anthropic_sdk(
    api_url: str, token_for: TokenFactory, tenant: str
) -> AsyncIterator[AsyncAnthropic]:
    """The anthropic SDK as a caller of the API (/v1/messages), with the test's tenant's token
    and no retries of its own."""
    async with AsyncAnthropic(
        base_url=api_url, api_key=await token_for(tenant), max_retries=0
    ) as sdk:
        yield sdk


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    """The project's local upstream simulator, one per test module (tests script its models)."""
    async with UpstreamServer() as server:
        yield server


@pytest.fixture
async def catalog(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> Catalog:
    """One profile on an OpenAI-protocol and one on an Anthropic-protocol deployment of the
    local upstream, for the agent-native surfaces' tests (tests/helpers/surfaces.py). A module
    with a catalog of its own (test_invoke, test_routing, …) defines a `catalog` fixture of its
    own, which pytest uses there instead."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    return await build_catalog(http, auth, temporal_client, tenant, upstream)


@pytest.fixture
def seen(catalog: Catalog, upstream: UpstreamServer) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """The bodies each protocol's model of the catalog received, as the simulator read them
    (what the agent surfaces' tests check was sent on)."""
    bodies: dict[str, list[dict[str, Any]]] = {p: [] for p in PROTOCOLS}

    def recorder(protocol: str) -> Any:
        def record(turn: ChatTurn) -> Reply:
            bodies[protocol].append(turn.raw)
            return default_responder(turn)

        return record

    for protocol in PROTOCOLS:
        upstream.register(catalog.model(protocol), recorder(protocol))
    yield bodies
    for protocol in PROTOCOLS:
        upstream.register(catalog.model(protocol), default_responder)
