"""Building a catalog through the real surfaces: the API for operator actions, and the
lifecycle workflow's update for evidence (as the evidence importer records it)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
from temporalio.client import Client

from activities.lifecycle_types import workflow_id
from domain.deployments import CapabilityMeasurement, DeploymentRecord, EvidenceInput
from providers.upstream import UpstreamServer
from providers.upstream.responders import Responder
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow


def deployment_body(deployment_id: str, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "deploymentId": deployment_id,
        "provider": "openai",
        "model": "gpt-4.1",
        "region": "westeurope",
        "privacyClass": "Regional",
        "endpointRef": "env:OPENAI_API_KEY",
        "licenseMetadata": {"commercialUse": True, "customerDeployment": True},
        "contextWindowTokens": 200_000,
    }
    body.update(over)
    return body


async def register(
    http: httpx.AsyncClient, auth: dict[str, str], deployment_id: str, **over: Any
) -> dict[str, Any]:
    resp = await http.post(
        "/factory/model-deployments",
        json=deployment_body(deployment_id, **over),
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def profile_event(
    profile_id: str,
    allowed: list[str],
    required: dict[str, float] | None = None,
    **over: Any,
) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "profileId": profile_id,
        "version": "1",
        "modality": "Chat",
        "requiredCapabilities": required if required is not None else {"tool-calling": 0.8},
        "privacyClass": "Regional",
        "latencyClass": "Interactive",
        "maxContextTokens": 128000,
        "maxOutputTokens": 4096,
        "allowedRegions": ["westeurope"],
        "allowedDeployments": allowed,
        "fallbackChain": [],
        "fallbackEnabled": False,
        "priceBasis": "2026-11",
    }
    release = over.pop("release", {})
    profile.update(over)
    event = {
        "eventType": "AssetReleasePublished",
        "releaseId": f"rel-{profile_id}-{profile['version']}",
        "status": "Published",
        "adminApproved": True,
        "profile": profile,
    }
    event.update(release)
    return event


async def publish(
    http: httpx.AsyncClient, auth: dict[str, str], event: dict[str, Any]
) -> httpx.Response:
    return await http.post("/factory/asset-events", json=event, headers=auth)


async def record_evidence(
    temporal: Client, tenant: str, deployment_id: str, scores: dict[str, float]
) -> DeploymentRecord:
    handle = temporal.get_workflow_handle(workflow_id(tenant, deployment_id))
    return await handle.execute_update(
        DeploymentLifecycleWorkflow.record_evidence,
        EvidenceInput(
            evidence_ref=f"eval/{uuid.uuid4().hex}",
            suite_version="2026.11",
            evaluated_at=datetime.now(UTC),
            scores={
                c: CapabilityMeasurement(score=s, verdict="pass" if s >= 0.8 else "fail")
                for c, s in scores.items()
            },
        ),
    )


async def approved_deployment(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal: Client,
    tenant: str,
    deployment_id: str,
    **fields: Any,
) -> None:
    """Registers a deployment, gives it passing evidence and approves it."""
    await register(http, auth, deployment_id, **fields)
    await record_evidence(temporal, tenant, deployment_id, {"tool-calling": 0.9})
    approved = await http.post(f"/factory/model-deployments/{deployment_id}/approve", headers=auth)
    assert approved.status_code == 200, approved.text


async def approved_profile(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal: Client,
    tenant: str,
    profile_id: str,
    deployments: dict[str, dict[str, Any]],
    **profile: Any,
) -> None:
    """Approves each deployment (id -> deployment fields) and publishes one active profile over
    them in the given order."""
    for deployment_id, fields in deployments.items():
        await approved_deployment(http, auth, temporal, tenant, deployment_id, **fields)
    published = await publish(http, auth, profile_event(profile_id, list(deployments), **profile))
    assert published.status_code == 200, published.text


async def simulated_profile(
    http: httpx.AsyncClient,
    token: str,
    temporal: Client,
    tenant: str,
    upstream: UpstreamServer,
    profile_id: str,
    model: str,
    responder: Responder,
    **deployment: Any,
) -> None:
    """An active profile over one approved deployment of `model` on the simulator, answered by
    `responder` (`deployment`: the registration's other fields, e.g. its provider)."""
    upstream.register(model, responder)
    await approved_profile(
        http,
        {"Authorization": f"Bearer {token}"},
        temporal,
        tenant,
        profile_id,
        {
            f"sim/{uuid.uuid4().hex[:8]}": {
                "endpointRef": upstream.endpoint_ref,
                "model": model,
                **deployment,
            }
        },
    )
