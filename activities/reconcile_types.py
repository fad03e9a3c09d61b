"""Inputs and outputs of the receipt reconciler's workflow and activities."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from domain.reconciliation import BucketWidth

# A statement source that refused our credential will refuse it again: stop retrying.
SOURCE_REFUSED = "StatementSourceRefused"


class ReconcilerInput(BaseModel):
    """The schedule's argument, built from settings by `core.schedules`."""

    lookback_hours: int = Field(default=72, ge=1)
    settle_delay_minutes: int = Field(default=15, ge=0)
    bucket_width: BucketWidth = "1h"
    settle_zero_usage: bool = False
    retry_initial_seconds: float = Field(default=30.0, gt=0)
    retry_max_interval_seconds: float = Field(default=600.0, gt=0)
    # How long one source may keep failing before this run goes on without it.
    source_timeout_seconds: float = Field(default=2700.0, gt=0)
    # None: every tenant. A list narrows receipts (tenants with their own provider accounts,
    # tests); provider statements are then shared among those tenants' receipts only.
    tenant_ids: list[str] | None = None


class FetchInput(BaseModel):
    source: str
    start: datetime
    end: datetime
    bucket_width: BucketWidth


class FetchResult(BaseModel):
    source: str
    lines: int


class WindowInput(BaseModel):
    start: datetime
    end: datetime
    settle_zero_usage: bool = False
    tenant_ids: list[str] | None = None


class WindowResult(BaseModel):
    pending: int = 0
    settled: int = 0
    by_request_id: int = 0
    skipped: int = 0


class ReconcileReport(BaseModel):
    cutoff: datetime
    sources: dict[str, int] = Field(default_factory=dict)
    failed_sources: dict[str, str] = Field(default_factory=dict)
    pending: int = 0
    settled: int = 0
    by_request_id: int = 0
    skipped: int = 0
    awaiting: dict[str, int] = Field(default_factory=dict)
