"""WebhookDelivery: one workflow per subscription relays the tenant's outbox in order.

Each event is retried with backoff until the receiver accepts it, so a receiver that is down for
a while gets everything, in order, when it comes back (at least once: a crash between the POST
and the cursor write repeats one event). History stays bounded through continue-as-new.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.webhook_types import (
        DELIVERY_WORKFLOW,
        CursorInput,
        DeliverBatchInput,
        Delivered,
        DeliverInput,
        DeliveryInput,
        DeliverySettings,
        Pending,
        PendingInput,
        deliveries_queue,
        polls_queue,
    )

ITERATIONS_PER_RUN = 300
# Marks the histories where a page of events is one activity (activities/webhooks.py says why).
BATCH_PATCH = "deliver-a-page-per-activity"
# Marks the histories where an idle subscription waits inside `webhook_pending` (a long poll)
# rather than in a timer between polls.
LONG_POLL_PATCH = "pending-long-poll"
# How long one `webhook_pending` waits for events before answering that there are none, and
# the silence after which its worker is taken for gone (it heartbeats every 5 s or sooner).
IDLE_WAIT_SECONDS = 30.0
WAIT_HEARTBEAT_TIMEOUT = timedelta(seconds=20)
# Marks the histories where a page's activity heartbeats before each event, and is scheduled
# with a heartbeat timeout: without one, a worker killed mid-page held the subscription for the
# page's whole start-to-close. Past an event's own bound (its POST's timeout and a margin,
# activities/webhooks.py) by a few seconds, so an event that takes all of it is not cut.
PAGE_HEARTBEAT_PATCH = "page-heartbeat"
PAGE_HEARTBEAT_SLACK_SECONDS = 5.0
# Marks the histories where the deliveries run on a queue of their own (`deliveries_queue`),
# not in the shared queue's slots. Before it they ran there, and a worker still serves them
# there for those histories.
DELIVERIES_QUEUE_PATCH = "deliveries-own-queue"


@workflow.defn(name=DELIVERY_WORKFLOW)
class WebhookDeliveryWorkflow:
    @workflow.run
    async def run(self, data: DeliveryInput) -> None:
        after = data.after
        delivery = DeliverySettings(
            poll_interval_seconds=data.poll_interval_seconds,
            retry_max_interval_seconds=data.retry_max_interval_seconds,
            timeout_seconds=data.timeout_seconds,
        )
        long_poll = workflow.patched(LONG_POLL_PATCH)
        for _ in range(ITERATIONS_PER_RUN):
            wait = IDLE_WAIT_SECONDS if long_poll else 0.0
            pending: Pending = await workflow.execute_activity(
                "webhook_pending",
                PendingInput(
                    tenant_id=data.tenant_id,
                    subscription_id=data.subscription_id,
                    after=after,
                    wait_seconds=wait,
                ),
                result_type=Pending,
                # The waits on a queue of their own (activities/webhook_polls.py says why).
                task_queue=polls_queue(workflow.info().task_queue) if long_poll else None,
                start_to_close_timeout=timedelta(seconds=15 + wait),
                heartbeat_timeout=WAIT_HEARTBEAT_TIMEOUT if long_poll else None,
            )
            if not pending.active:
                return
            # A deploy's new settings reach this subscription here (activities/webhook_types.py);
            # histories from before carry none, and replay as they ran.
            delivery = pending.delivery or delivery
            retry = RetryPolicy(
                initial_interval=timedelta(milliseconds=500),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=delivery.retry_max_interval_seconds),
            )
            # Each POST takes at most the timeout (activities/webhooks.py, `_post_seconds`).
            per_event = delivery.timeout_seconds + 5
            one_by_one = pending.events
            own_queue = bool(pending.events) and workflow.patched(DELIVERIES_QUEUE_PATCH)
            queue = deliveries_queue(workflow.info().task_queue) if own_queue else None
            if pending.events and workflow.patched(BATCH_PATCH):
                # The page in one activity, up to the first event the receiver does not take;
                # that one and the rest, one activity each, as before (retried with backoff).
                beats = workflow.patched(PAGE_HEARTBEAT_PATCH)
                delivered: Delivered = await workflow.execute_activity(
                    "webhook_deliver_batch",
                    DeliverBatchInput(
                        tenant_id=data.tenant_id,
                        subscription_id=data.subscription_id,
                        events=pending.events,
                        timeout_seconds=delivery.timeout_seconds,
                    ),
                    result_type=Delivered,
                    task_queue=queue,
                    start_to_close_timeout=timedelta(seconds=per_event * len(pending.events) + 5),
                    heartbeat_timeout=(
                        timedelta(seconds=per_event + PAGE_HEARTBEAT_SLACK_SECONDS)
                        if beats
                        else None
                    ),
                    retry_policy=retry,
                )
                one_by_one = pending.events[delivered.count :]
            for event in one_by_one:
                await workflow.execute_activity(
                    "webhook_deliver",
                    DeliverInput(
                        tenant_id=data.tenant_id,
                        subscription_id=data.subscription_id,
                        event=event,
                        timeout_seconds=delivery.timeout_seconds,
                    ),
                    task_queue=queue,
                    start_to_close_timeout=timedelta(seconds=per_event),
                    retry_policy=retry,
                )
            if pending.scanned_to > after:
                after = pending.scanned_to
                await workflow.execute_activity(
                    "webhook_advance",
                    CursorInput(
                        tenant_id=data.tenant_id,
                        subscription_id=data.subscription_id,
                        position=after,
                    ),
                    start_to_close_timeout=timedelta(seconds=15),
                )
            elif not long_poll:
                await workflow.sleep(timedelta(seconds=delivery.poll_interval_seconds))
            if workflow.info().is_continue_as_new_suggested():
                break
        workflow.continue_as_new(data.model_copy(update={"after": after, **delivery.model_dump()}))
