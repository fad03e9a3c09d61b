"""The webhook subscriptions' table: a receiver, the events it wants, how far its delivery has
got, and its signing secrets (ours, never a provider credential)."""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.columns import UtcDateTime, utcnow
from store.ops_tables import as_utc


class WebhookSubscriptionRow(SQLModel, table=True):
    __tablename__ = "webhook_subscriptions"

    subscription_id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: str = Field(max_length=100, index=True)
    url: str = Field(max_length=2000)
    # Our own signing key for this receiver (not a provider credential); shown once at creation.
    # NULL once the subscription has ended (store/repositories.py, `deactivate`; migration 0018).
    signing_secret: str | None = Field(default=None, max_length=200)
    event_types: list[str] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    delivered_position: int = Field(default=0, sa_type=sa.BigInteger)
    active: bool = True
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(UtcDateTime(), nullable=False)
    )
    # The delivery failing now (every attempt is retried, in order): since when, how many
    # attempts, and the last one's reason (a status or an error type, never a body). Cleared by
    # the next delivery the receiver accepts.
    failing_since: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcDateTime(), nullable=True)
    )
    failed_attempts: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    last_error: str | None = Field(default=None, max_length=300)
    # The secret a rotation replaced, still signed with beside the new one until
    # `previous_secret_until`, so that a receiver can take the new one up with no delivery
    # failing to verify meanwhile (Standard Webhooks: several signatures, space-separated).
    previous_signing_secret: str | None = Field(default=None, max_length=200)
    previous_secret_until: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcDateTime(), nullable=True)
    )


def previous_signs_until(row: WebhookSubscriptionRow, now: datetime) -> datetime | None:
    """Until when a rotation's replaced secret still signs beside the current one, or None: a
    replaced secret held and its time not up. What a delivery signs with, and what a rotation
    is refused during (store/repositories.py, whose update asks the same in SQL)."""
    until = row.previous_secret_until
    if row.previous_signing_secret is None or until is None:
        return None
    return until if as_utc(until) > now else None
