"""Run now on the console's schedules page is for a PlatformAdmin of a platform tenant
(MODEL_ROUTER_PLATFORM_TENANTS): the schedules serve every tenant, and the health probe spends
every tenant's provider keys. Every tenant has a PlatformAdmin of its own, and any of them could
run them. Another tenant's PlatformAdmin sees the schedules without the button, and its POST is
a 403 page naming the setting, the schedule left untriggered. Over plain HTTP, on an API of the
test's own (the suite's lists no platform tenant) and schedules of its own prefix."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.schedules import HEALTH_PROBE, NAMES, ensure_schedules, schedule_id
from core.settings import Settings
from domain.enums import Role
from tests.helpers.browser import ConsoleSession
from tests.helpers.clients import client_of
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve


@dataclass(frozen=True)
class Platform:
    url: str
    tenant: str  # listed in the API's platform_tenants
    probe: str  # the health probe's schedule id


@pytest.fixture
async def platform(settings: Settings, temporal_client: Client) -> AsyncIterator[Platform]:
    """An API whose settings list one platform tenant, and the schedules under a prefix of the
    test's own, pointed at a queue nobody polls (a run would probe every tenant of the session
    otherwise); deleted afterwards."""
    tenant, unique = f"platform-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "platform_tenants": [tenant],
            "schedule_id_prefix": f"console-platform-{unique}",
            # Its in-process invocation worker polls a queue of its own, not the suite API's.
            "temporal_invocation_task_queue": f"console-platform-invocations-{unique}",
        }
    )
    queue = f"console-platform-unpolled-{unique}"
    await ensure_schedules(temporal_client, own, task_queue=queue)
    try:
        async with serve(own) as api:
            yield Platform(api.url, tenant, schedule_id(own, HEALTH_PROBE))
    finally:
        for name in NAMES:
            await temporal_client.get_schedule_handle(schedule_id(own, name)).delete()
        async for wf in temporal_client.list_workflows(f"TaskQueue = '{queue}'"):
            await temporal_client.get_workflow_handle(wf.id, run_id=wf.run_id).terminate()


async def _signed_in(
    url: str, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> ConsoleSession:
    session, answer = await ConsoleSession.sign_in(
        url, *await client_of(sessions, tenant, Role.PLATFORM_ADMIN)
    )
    assert answer.status_code == 303, answer.text[:300]
    return session


async def test_a_platform_tenants_admin_runs_a_schedule_now(
    platform: Platform, sessions: async_sessionmaker[AsyncSession], temporal_client: Client
) -> None:
    session = await _signed_in(platform.url, sessions, platform.tenant)
    try:
        page = await session.get("/console/schedules")
        assert page.status_code == 200, page.text[:300]
        assert f'id="run-{HEALTH_PROBE}"' in page.text and 'id="read-only"' not in page.text
        ran = await session.post(
            "/console/schedules/run", {"csrf_token": session.csrf, "name": HEALTH_PROBE}
        )
        assert ran.status_code == 303, ran.text[:300]
        assert ran.headers["location"] == f"/console/schedules?done={HEALTH_PROBE}"
    finally:
        await session.close()

    async def triggered() -> bool:
        info = (await temporal_client.get_schedule_handle(platform.probe).describe()).info
        return info.num_actions >= 1

    await eventually(triggered, timeout=20, interval=0.2)


async def test_another_tenants_platform_admin_sees_them_but_may_not_run_them(
    platform: Platform, sessions: async_sessionmaker[AsyncSession], temporal_client: Client
) -> None:
    session = await _signed_in(platform.url, sessions, f"tenant-{uuid.uuid4().hex[:8]}")
    try:
        page = await session.get("/console/schedules")
        assert page.status_code == 200, page.text[:300]
        # The schedules as any reader sees them, without a way to run them.
        for name in NAMES:
            assert f'data-schedule="{name}"' in page.text
        assert 'action="/console/schedules/run"' not in page.text
        assert 'id="run-' not in page.text
        assert "MODEL_ROUTER_PLATFORM_TENANTS" in page.text
        refused = await session.post(
            "/console/schedules/run", {"csrf_token": session.csrf, "name": HEALTH_PROBE}
        )
        assert refused.status_code == 403, refused.text[:300]
        assert refused.headers["content-type"].startswith("text/html")
        assert "MODEL_ROUTER_PLATFORM_TENANTS" in refused.text
        assert "every tenant" in refused.text
    finally:
        await session.close()
    # Refused before Temporal was asked: the schedule has taken no action and runs nothing.
    info = (await temporal_client.get_schedule_handle(platform.probe).describe()).info
    assert info.num_actions == 0 and not info.recent_actions and not info.running_actions
