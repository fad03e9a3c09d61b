"""Each active webhook subscription's delivery workflow: started with the subscription, and
started again, from the subscription's cursor, wherever it is gone.

A subscription is stored first and its workflow started after. An API process killed between
the two, a store blip while undoing a subscription Temporal refused, an operator's `temporal
workflow terminate`, or a Temporal cluster restored without its histories left a subscription
listed active with nothing delivering to it, and nothing said so: with no attempt, it never
showed as failing. The worker now starts every active subscription's workflow that is not
running, when it starts and every `RESTART_EVERY_SECONDS` after (one read, and one start call
per subscription, refused at once for a running one). Not an activity: the worker's own upkeep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.webhook_types import DELIVERY_WORKFLOW, DeliveryInput, workflow_id
from activities.webhooks import delivery_settings
from core.settings import Settings
from store.repositories import active_subscriptions

log = logging.getLogger("model_router.worker")

RESTART_EVERY_SECONDS = 600.0


async def start_delivery(
    client: Client, settings: Settings, tenant_id: str, subscription_id: str, after: int
) -> bool:
    """Start the subscription's delivery from position `after`; False when it is running."""
    try:
        await client.start_workflow(
            DELIVERY_WORKFLOW,
            DeliveryInput(
                tenant_id=tenant_id,
                subscription_id=subscription_id,
                after=after,
                **delivery_settings(settings).model_dump(),
            ),
            id=workflow_id(tenant_id, subscription_id),
            task_queue=settings.temporal_task_queue,
        )
    except WorkflowAlreadyStartedError:
        return False
    return True


async def restart_stopped_deliveries(
    client: Client,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant_ids: Sequence[str] | None = None,
) -> int:
    """Start the workflow of every active subscription (of `tenant_ids`; None: of every
    tenant) that has none running, from its cursor (what its last run recorded as delivered);
    how many were started."""
    async with sessions() as session:
        rows = await active_subscriptions(session, tenant_ids)
    started = 0
    for row in rows:
        try:
            restarted = await start_delivery(
                client, settings, row.tenant_id, str(row.subscription_id), row.delivered_position
            )
        except Exception as exc:  # this one at the next round; the others are not held up
            log.warning(
                "webhook subscription %s of %s not checked: %s",
                row.subscription_id,
                row.tenant_id,
                type(exc).__name__,
            )
            continue
        if restarted:
            log.warning(
                "webhook subscription %s of %s had no delivery running: started from %s",
                row.subscription_id,
                row.tenant_id,
                row.delivered_position,
            )
            started += 1
    return started


async def keep_deliveries(
    client: Callable[[], Client], settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """`restart_stopped_deliveries` now and every RESTART_EVERY_SECONDS, until cancelled, on
    the worker's client as it is then (core/temporal_rotation.py); a round that fails (the
    store or Temporal away) is tried at the next."""
    while True:
        try:
            await restart_stopped_deliveries(client(), settings, sessions)
        except Exception as exc:
            log.warning("webhook deliveries not checked: %s", type(exc).__name__)
        await asyncio.sleep(RESTART_EVERY_SECONDS)  # a polling interval, not a wait-for
