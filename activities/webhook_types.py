"""Inputs and outputs of the webhook delivery activities and workflow (plain pydantic models)."""

from __future__ import annotations

from pydantic import BaseModel

from domain.cloudevents import OutboxEvent


class PendingInput(BaseModel):
    tenant_id: str
    subscription_id: str
    after: int
    limit: int = 50


class Pending(BaseModel):
    active: bool
    events: list[OutboxEvent]
    scanned_to: int


class DeliverInput(BaseModel):
    tenant_id: str
    subscription_id: str
    event: OutboxEvent
    timeout_seconds: float


class CursorInput(BaseModel):
    tenant_id: str
    subscription_id: str
    position: int
