"""Inputs and outputs of the health-probe workflow and activities (plain pydantic models)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from domain.enums import DeploymentState
from domain.health import ProbeTarget, ProbeVerdict

# The ApplicationError type a failed probe raises, so the attempt shows the adapter's class.
PROBE_FAILED = "ProbeFailed"


class HealthProbeInput(BaseModel):
    """The schedule's argument, built from settings by `core.schedules`."""

    timeout_seconds: float = Field(default=10.0, gt=0)
    concurrency: int = Field(default=8, ge=1)
    attempts: int = Field(default=2, ge=1)
    retry_interval_seconds: float = Field(default=5.0, gt=0)
    window_seconds: int = Field(default=120, ge=1)
    sample_retention_hours: int = Field(default=72, ge=1)
    # None: every tenant. A list shards the probe (and keeps tests to their own tenant).
    tenant_ids: list[str] | None = None
    # The window is the run's start time, floored; given here only to re-run a past window.
    window_start: datetime | None = None


class ListTargetsInput(BaseModel):
    tenant_ids: list[str] | None = None


class ProbeRequest(BaseModel):
    target: ProbeTarget
    window_start: datetime
    timeout_seconds: float


class ApplyVerdictInput(BaseModel):
    tenant_id: str
    deployment_id: str
    verdict: ProbeVerdict


class ApplyVerdictResult(BaseModel):
    applied: bool
    state: DeploymentState | None = None
    reason: str | None = None


class PruneInput(BaseModel):
    older_than: datetime


class HealthProbeReport(BaseModel):
    window_start: datetime
    probed: int = 0
    ok: int = 0
    failed: int = 0
    degraded: list[str] = Field(default_factory=list)
    recovered: list[str] = Field(default_factory=list)
