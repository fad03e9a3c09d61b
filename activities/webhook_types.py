"""Inputs and outputs of the webhook delivery activities and workflow (plain pydantic models)."""

from __future__ import annotations

from pydantic import BaseModel

from domain.cloudevents import OutboxEvent

DELIVERY_WORKFLOW = "WebhookDelivery"


class DeliveryInput(BaseModel):
    tenant_id: str
    subscription_id: str
    after: int = 0
    # The settings at the subscription's creation (or this run's start), until the first
    # `webhook_pending` reports the worker's current ones.
    poll_interval_seconds: float = 2.0
    retry_max_interval_seconds: float = 60.0
    timeout_seconds: float = 10.0


def workflow_id(tenant_id: str, subscription_id: str) -> str:
    return f"webhook/{tenant_id}/{subscription_id}"


def polls_queue(task_queue: str) -> str:
    """The queue of the subscriptions' long polls (activities/webhook_polls.py says why), beside
    the shared queue `task_queue` their workflows run on."""
    return f"{task_queue}-webhook-polls"


def deliveries_queue(task_queue: str) -> str:
    """The queue of the deliveries themselves (`webhook_deliver_batch`, `webhook_deliver`),
    beside the shared queue `task_queue` their workflows run on: there each POST held one of the
    slots that probes, lifecycle steps, closes and evaluations take, for up to its timeout, and
    a few tenants' slow receivers kept all of those waiting (worker.py bounds its own slots)."""
    return f"{task_queue}-webhook-deliveries"


class PendingInput(BaseModel):
    tenant_id: str
    subscription_id: str
    after: int
    limit: int = 50
    # How long to wait for something to deliver, looking every poll interval, before answering
    # that nothing is pending (a long poll, heartbeating). 0: look once (histories from before).
    wait_seconds: float = 0.0


class DeliverySettings(BaseModel):
    """The worker's webhook settings as they are now. A subscription's workflow runs as long as
    the subscription does, so it takes them from every `webhook_pending` rather than keeping
    the ones it was started with: a deploy that changes them reaches running subscriptions at
    their next poll, not only new ones."""

    poll_interval_seconds: float
    retry_max_interval_seconds: float
    timeout_seconds: float


class Pending(BaseModel):
    active: bool
    events: list[OutboxEvent]
    scanned_to: int
    # None in histories recorded before workers reported their settings: the workflow then
    # keeps its own, as those runs did.
    delivery: DeliverySettings | None = None


class DeliverInput(BaseModel):
    tenant_id: str
    subscription_id: str
    event: OutboxEvent
    # The timeout the workflow knew when it scheduled the delivery. The activity bounds the POST
    # by its worker's current setting instead (within the time the attempt has), so that raising
    # the setting reaches an event already being retried, whose input is fixed.
    timeout_seconds: float


class DeliverBatchInput(BaseModel):
    """A page of events to deliver in order, in one activity (`webhook_deliver_batch`)."""

    tenant_id: str
    subscription_id: str
    events: list[OutboxEvent]
    timeout_seconds: float  # as DeliverInput's


class Delivered(BaseModel):
    """How many of a page's events, from its first, the receiver took in one activity."""

    count: int


class CursorInput(BaseModel):
    tenant_id: str
    subscription_id: str
    position: int
