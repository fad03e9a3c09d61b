"""Tables of the scheduled jobs: probe samples, usage statements and reconciliation records
(migration 0004; their cache writes 0017). Statements carry token counts and ids, never
content. Besides them, the console's ended sessions (migration 0020): token ids, never
tokens."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.columns import BIGID, ts_column, utcnow


def as_utc(value: datetime) -> datetime:
    """SQLite hands timezone-aware columns back naive (they are stored as UTC)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class ProbeSampleRow(SQLModel, table=True):
    """One probe of one deployment in one probe window: the window is the idempotency key, so
    a re-run of the same window finds the sample instead of probing again."""

    __tablename__ = "probe_samples"
    __table_args__ = (
        sa.UniqueConstraint(
            "tenant_id", "deployment_id", "window_start", name="uq_probe_samples_window"
        ),
        sa.Index("ix_probe_samples_probed_at", "probed_at"),
        # The prune of samples past their retention (store/probes.prune_samples), migration 0015.
        sa.Index("ix_probe_samples_window_start", "window_start"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    tenant_id: str = Field(max_length=100)
    deployment_id: str = Field(max_length=200)
    window_start: datetime = Field(sa_column=ts_column())
    probed_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())
    outcome: str = Field(max_length=16)
    latency_ms: int | None = None
    error_class: str | None = Field(default=None, max_length=64)
    attempt: int = 1


class StatementImportRow(SQLModel, table=True):
    """An imported statement file: the content hash makes a re-upload a replay."""

    __tablename__ = "statement_imports"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "content_hash", name="uq_statement_imports_hash"),
    )

    import_id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: str = Field(max_length=100)
    content_hash: str = Field(max_length=100)
    format: str = Field(max_length=16)
    lines: int
    imported_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class UsageStatementLineRow(SQLModel, table=True):
    """A statement line, from a provider's usage API (tenant_id null: provider-wide) or from
    an import (tenant_id set). Re-fetching a provider bucket updates its line in place."""

    __tablename__ = "usage_statement_lines"
    __table_args__ = (
        sa.UniqueConstraint("statement_ref", name="uq_usage_statement_lines_ref"),
        sa.Index("ix_usage_statement_lines_bucket", "provider", "bucket_start"),
        sa.Index("ix_usage_statement_lines_request", "provider", "provider_request_id"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    statement_ref: str = Field(max_length=300)
    source: str = Field(max_length=64)
    import_id: uuid.UUID | None = None
    tenant_id: str | None = Field(default=None, max_length=100)
    provider: str = Field(max_length=64)
    model: str | None = Field(default=None, max_length=200)
    key: str | None = Field(default=None, max_length=400)
    bucket_start: datetime | None = Field(default=None, sa_column=ts_column(nullable=True))
    bucket_end: datetime | None = Field(default=None, sa_column=ts_column(nullable=True))
    provider_request_id: str | None = Field(default=None, max_length=200)
    input_tokens: int = Field(sa_type=sa.BigInteger)
    output_tokens: int = Field(sa_type=sa.BigInteger)
    cached_input_tokens: int = Field(default=0, sa_type=sa.BigInteger)
    # Of the input, the part written to the prompt cache (Anthropic's cache creation): 0017.
    cache_write_input_tokens: int = Field(
        default=0, sa_type=sa.BigInteger, sa_column_kwargs={"server_default": "0"}
    )
    fetched_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class ReceiptReconciliationRow(SQLModel, table=True):
    """How a receipt was settled and what it said before: the audit trail, and (unique on
    invocation + statement) the reconciler's idempotency key."""

    __tablename__ = "receipt_reconciliations"
    __table_args__ = (
        sa.UniqueConstraint(
            "invocation_id", "statement_ref", name="uq_receipt_reconciliations_statement"
        ),
        sa.Index("ix_receipt_reconciliations_tenant", "tenant_id", "reconciled_at"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    tenant_id: str = Field(max_length=100)
    invocation_id: uuid.UUID
    statement_ref: str = Field(max_length=300)
    rule: str = Field(max_length=32)
    previous_usage_status: str = Field(max_length=32)
    previous_input_tokens: int | None = None
    previous_output_tokens: int | None = None
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    # Null on records from before migration 0017.
    cache_write_input_tokens: int | None = None
    estimated_cost_usd: Decimal | None = Field(default=None, max_digits=18, decimal_places=8)
    reconciled_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class ConsoleSignOutRow(SQLModel, table=True):
    """A console session ended by its sign-out before its token's `exp` (migration 0020): the
    token's `jti`, which the console refuses from then on (store/console_sessions.py). Kept
    until the token would have expired anyway; the sign-outs delete those past it."""

    __tablename__ = "console_sign_outs"
    __table_args__ = (
        # The sign-outs' delete of rows past their expiry (console_sessions.prune_expired).
        sa.Index("ix_console_sign_outs_expires_at", "expires_at"),
    )

    jti: str = Field(primary_key=True, max_length=100)
    tenant_id: str = Field(max_length=100)
    expires_at: datetime = Field(sa_column=ts_column())
