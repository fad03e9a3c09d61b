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
    # Buckets ending after this are not shared out yet (the settle delay); None: no delay.
    bucket_cutoff: datetime | None = None
    settle_zero_usage: bool = False
    tenant_ids: list[str] | None = None


class WindowResult(BaseModel):
    pending: int = 0
    settled: int = 0
    by_request_id: int = 0
    skipped: int = 0
    # Why receipts still waiting were left as they are, counted per receipt (the first reason).
    skipped_reasons: dict[str, int] = Field(default_factory=dict)
    # Waiting receipts no statement line has covered yet.
    unmatched: int = 0
    # Bucket tokens no awaiting receipt could take (domain.reconciliation.Plan).
    unattributed_input_tokens: int = 0
    unattributed_output_tokens: int = 0


class GaugeInput(BaseModel):
    """What a run could not do, counted where the gauge is recounted (a workflow records no
    metric): days whose window failed every attempt, and statement sources that stayed down."""

    failed_windows: int = 0
    failed_sources: list[str] = Field(default_factory=list)


class ReconciliationReport(BaseModel):
    # Bucket allocation used buckets ending by `cutoff` (now less the settle delay); request-id
    # matches settle receipts up to `until` (now), whatever the delay.
    cutoff: datetime
    until: datetime | None = None
    sources: dict[str, int] = Field(default_factory=dict)
    failed_sources: dict[str, str] = Field(default_factory=dict)
    # UTC days (ISO date) whose window failed every attempt, with the last error; the next run
    # tries them again.
    failed_windows: dict[str, str] = Field(default_factory=dict)
    pending: int = 0
    settled: int = 0
    by_request_id: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = Field(default_factory=dict)
    unmatched: int = 0
    unattributed_input_tokens: int = 0
    unattributed_output_tokens: int = 0
    awaiting: dict[str, int] = Field(default_factory=dict)
