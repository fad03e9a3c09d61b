"""Integration events as CloudEvents 1.0 (structured JSON), signed per Standard Webhooks."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

SOURCE = "model-router"


class OutboxEvent(BaseModel):
    """An outbox row as it crosses the workflow boundary (payloads carry ids, never content)."""

    position: int
    event_id: str
    tenant_id: str
    event_type: str
    topic: str
    aggregate_type: str
    aggregate_id: str
    payload: dict[str, Any]
    occurred_at: datetime


def rfc3339(at: datetime) -> str:
    """CloudEvents' `time` is RFC 3339, which requires a zone: always UTC, spelled `Z`."""
    if at.tzinfo is None:
        raise ValueError("an event time must be timezone-aware")
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def to_cloudevent(event: OutboxEvent) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": event.event_id,
        "source": SOURCE,
        "type": event.topic,
        "subject": event.aggregate_id,
        "time": rfc3339(event.occurred_at),
        "datacontenttype": "application/json",
        "data": event.payload,
        # Extension attributes (lower-case alphanumerics only, as CloudEvents requires).
        "eventname": event.event_type,
        "aggregatetype": event.aggregate_type,
        "sequence": str(event.position),
        "tenantid": event.tenant_id,
    }


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks: v1,base64(HMAC-SHA256(secret, "{id}.{timestamp}.{body}"))."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(secret: str, message_id: str, timestamp: int, body: bytes, header: str) -> bool:
    expected = signature(secret, message_id, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in header.split())
