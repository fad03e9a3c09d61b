"""Seeding the catalog the invoke benchmark calls through, as tests/helpers/catalog.py does: an
admin OAuth client, a deployment on the upstream simulator registered, evaluated and approved
through the API and the lifecycle workflow, a price book and a published profile."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.lifecycle_types import workflow_id
from bench.invoke_config import DEPLOYMENT, MODEL_GATEWAY, PROFILE, TENANT
from core.security import new_client_secret
from domain.deployments import CapabilityMeasurement, EvidenceInput
from domain.enums import Role, Scope
from store.clients import upsert_client
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow


async def seed(
    api: str,
    sessions: async_sessionmaker[AsyncSession],
    temporal: Client,
    endpoint_ref: str,
) -> str:
    client_id, secret = "bench-admin", new_client_secret()
    await upsert_client(
        sessions,
        tenant_id=TENANT,
        client_id=client_id,
        secret=secret,
        roles=[Role.PLATFORM_ADMIN],
        scopes=list(Scope),
    )
    async with httpx.AsyncClient(base_url=api, timeout=60) as http:
        resp = await http.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
        )
        resp.raise_for_status()
        token = str(resp.json()["access_token"])
        auth = {"Authorization": f"Bearer {token}"}
        resp = await http.post(
            "/factory/model-deployments",
            json={
                "deploymentId": DEPLOYMENT,
                "provider": "openai",
                "model": MODEL_GATEWAY,
                "region": "westeurope",
                "privacyClass": "Regional",
                "endpointRef": endpoint_ref,
                "licenseMetadata": {"commercialUse": True, "customerDeployment": True},
                "contextWindowTokens": 200_000,
            },
            headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
        )
        if resp.status_code != 201:
            raise RuntimeError(f"register: {resp.status_code} {resp.text}")
        handle = temporal.get_workflow_handle(workflow_id(TENANT, DEPLOYMENT))
        await handle.execute_update(
            DeploymentLifecycleWorkflow.record_evidence,
            EvidenceInput(
                evidence_ref=f"eval/{uuid.uuid4().hex}",
                suite_version="2026.11",
                evaluated_at=datetime.now(UTC),
                scores={
                    c: CapabilityMeasurement(score=0.95, verdict="pass")
                    for c in ("tool-calling", "parallel-tool-calling", "json-schema", "strict-json")
                },
            ),
        )
        resp = await http.post(f"/factory/model-deployments/{DEPLOYMENT}/approve", headers=auth)
        if resp.status_code != 200:
            raise RuntimeError(f"approve: {resp.status_code} {resp.text}")
        resp = await http.post(
            "/factory/pricebook-revisions",
            json={
                "revision": "bench-2026",
                "entries": [
                    {
                        "provider": "openai",
                        "model": MODEL_GATEWAY,
                        "inputUsdPerMtok": "2.5",
                        "outputUsdPerMtok": "10",
                        "effectiveFrom": "2026-01-01",
                    }
                ],
            },
            headers=auth,
        )
        if resp.status_code not in (200, 201):
            raise RuntimeError(f"pricebook: {resp.status_code} {resp.text}")
        resp = await http.post(
            "/factory/asset-events",
            json={
                "eventType": "AssetReleasePublished",
                "releaseId": f"rel-{PROFILE}-1",
                "status": "Published",
                "adminApproved": True,
                "profile": {
                    "profileId": PROFILE,
                    "version": "1",
                    "modality": "Chat",
                    "requiredCapabilities": {"tool-calling": 0.8},
                    "privacyClass": "Regional",
                    "latencyClass": "Interactive",
                    "maxContextTokens": 128000,
                    "maxOutputTokens": 4096,
                    "allowedRegions": ["westeurope"],
                    "allowedDeployments": [DEPLOYMENT],
                    "fallbackChain": [],
                    "fallbackEnabled": False,
                    "priceBasis": "bench-2026",
                },
            },
            headers=auth,
        )
        if resp.status_code != 200:
            raise RuntimeError(f"publish profile: {resp.status_code} {resp.text}")
    return token
