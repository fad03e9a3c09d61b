"""Inputs and outputs of the receipt reconciler's workflow and activities."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from domain.statements import BucketWidth

# A statement source that refused our credential will refuse it again: stop retrying.
SOURCE_REFUSED = "StatementSourceRefused"


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
