"""Inputs and outputs of the health-probe workflow and activities (plain pydantic models)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from domain.enums import DeploymentState
from domain.health import ProbeTarget, ProbeVerdict

# The ApplicationError type a failed probe raises, so the attempt shows the adapter's class.
PROBE_FAILED = "ProbeFailed"


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
    # Deployments whose failed probe was not taken for theirs: the run's probes failed to reach
    # most deployments of several providers at once (domain/health.py, own_network_suspected),
    # the deployment answered busy, or its credential did not resolve in this worker.
    held: list[str] = Field(default_factory=list)
    # Probes that did not run (the worker or store failed them) or were cut at the run's
    # deadline: those deployments keep their state until a later run probes them.
    unprobed: int = 0
