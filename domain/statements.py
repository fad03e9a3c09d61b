"""What the reconciler reads and writes: statement lines (token counts a provider billed, never
content), the receipts' usage as the rules see it, the job's parameters, and the ModelInvoked
correction a settled receipt sends to usage accounting."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.enums import UsageStatus
from domain.receipt_fields import model_invoked

AWAITING = frozenset({UsageStatus.UNKNOWN, UsageStatus.ESTIMATED})


def sent_nothing(
    usage_status: UsageStatus,
    input_tokens: int | None,
    output_tokens: int | None,
    cached_input_tokens: int | None,
) -> bool:
    """A receipt that records that no provider saw the request: every path that closes one
    without calling a provider (a denial, every candidate refused, credentials missing, a claim
    its process never called with) writes Estimated at exactly zero tokens, and a call that was
    sent counts at least one input token (activities/invoke_outcomes.estimate_tokens). Its
    usage is known, so it awaits no statement: it takes no share of a bucket and is not counted
    in the usage_unknown gauge (store/reconciliation.awaiting_by_provider says this in SQL)."""
    return (
        usage_status is UsageStatus.ESTIMATED
        and input_tokens == 0
        and output_tokens == 0
        and not cached_input_tokens
    )


BucketWidth = Literal["1m", "1h", "1d"]
WIDTHS: dict[str, timedelta] = {
    "1m": timedelta(minutes=1),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
}


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
    # None: every tenant. A list narrows the receipts awaiting usage (tenants with their own
    # provider accounts, tests); provider statements are then shared among those tenants'
    # receipts only, less the known usage of every tenant on the key.
    tenant_ids: list[str] | None = None
    # Reconcile as if the run started at this instant (a backfill of a past window, tests that
    # must not depend on the hour they run at). None: the run's own start time.
    as_of: datetime | None = None

    @model_validator(mode="after")
    def _aware(self) -> ReconcilerInput:
        if self.as_of is not None and self.as_of.tzinfo is None:
            raise ValueError("as_of is timezone-aware")
        return self


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StatementLine(_Frozen):
    """Token counts a provider (or an imported statement) says were billed. Never content."""

    statement_ref: str = Field(min_length=1, max_length=300)
    source: str = Field(min_length=1, max_length=64)
    tenant_id: str | None = None  # None: a provider-wide statement
    provider: str = Field(min_length=1)
    model: str | None = None
    key: str | None = None  # the endpointRef whose provider key was billed; None: any
    bucket_start: datetime | None = None
    bucket_end: datetime | None = None
    provider_request_id: str | None = None
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    # Of the input, the part written to the prompt cache (Anthropic bills it dearer).
    cache_write_input_tokens: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _shape(self) -> StatementLine:
        if self.cached_input_tokens + self.cache_write_input_tokens > self.input_tokens:
            raise ValueError("cache reads and writes are part of input tokens")
        if self.provider_request_id is None:
            if self.bucket_start is None or self.bucket_end is None or not self.model:
                raise ValueError("a line without a request id needs a bucket and a model")
        if self.bucket_start is not None and self.bucket_end is not None:
            if self.bucket_start.tzinfo is None or self.bucket_end.tzinfo is None:
                raise ValueError("bucket times are timezone-aware")
            if self.bucket_end <= self.bucket_start:
                raise ValueError("a bucket ends after it starts")
        return self


class ReceiptUsage(_Frozen):
    """What the rules need of a receipt (joined with its deployment's provider, model, key)."""

    invocation_id: str
    tenant_id: str
    provider: str
    model: str
    key: str
    started_at: datetime
    usage_status: UsageStatus
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None
    provider_request_id: str | None = None
    # Not closed yet: its call may still be running, so its usage is not final.
    open: bool = False
    # The deployment's context window: what one request can take in, or give out, at most.
    # None: unknown, no bound.
    context_window_tokens: int | None = None


class RequestIdCarrier(_Frozen):
    """A receipt outside the window the rules are given that carries a provider request id."""

    provider: str
    request_id: str
    tenant_id: str


def usage_corrected_event(
    receipt: Mapping[str, Any],
    *,
    input_tokens: int,
    output_tokens: int,
    estimated_cost_usd: Decimal | None,
) -> dict[str, Any]:
    """ModelInvoked again, with the settled usage: usage accounting keys on invocationId, so
    this replaces what it recorded for the receipt (usageStatus Reconciled says why)."""
    return model_invoked(
        {
            **receipt,
            "usage_status": UsageStatus.RECONCILED,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "estimated_cost_usd": estimated_cost_usd,
        }
    )
