"""Input and report of the receipt sweeper (plain pydantic models across the workflow boundary)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SweepInput(BaseModel):
    # A receipt open this long is past every budget its invocation had (the call's own budget,
    # the workflow's margin, a close retried through a short outage).
    open_longer_than_seconds: float = Field(gt=0)
    batch: int = Field(default=500, ge=1, le=10_000)


class SweepReport(BaseModel):
    found: int = 0
    closed: int = 0
    # Still open, but their InvokeModel workflow is running and will close them itself.
    left_to_workflow: int = 0
