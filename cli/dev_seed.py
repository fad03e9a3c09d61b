"""The demo catalog `make dev` seeds through the API, as an operator would: prices, deployments
on the local upstream simulator (clearly named `sim-…`), evaluation, approval and profiles; real
OpenAI / Anthropic deployments are registered (as Candidates, not evaluated: that costs money)
when their keys are in the environment. Safe to run again: every step is idempotent."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

PRICES = "demo-2026-11"
SIM = [
    ("local/sim-chat", "local-upstream", "sim-chat"),
    ("local/sim-claude", "anthropic", "sim-claude"),
    ("local/sim-embed", "local-upstream", "sim-embed"),
]
REAL = [
    ("openai/global/gpt-4.1-mini", "openai", "gpt-4.1-mini", "OPENAI_API_KEY", "External"),
    (
        "anthropic/global/claude-sonnet",
        "anthropic",
        "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY",
        "External",
    ),
]
CHAT_CAPS = {"tool-calling": 0.9, "json-schema": 0.9, "instruction-following": 0.8}


def _profile(profile_id: str, allowed: list[str], **over: Any) -> dict[str, Any]:
    profile = {
        "profileId": profile_id,
        "version": "1",
        "modality": "Chat",
        "requiredCapabilities": CHAT_CAPS,
        "privacyClass": "Local",
        "latencyClass": "Interactive",
        "maxContextTokens": 32000,
        "maxOutputTokens": 4096,
        "allowedRegions": ["local"],
        "allowedDeployments": allowed,
        "fallbackChain": [],
        "fallbackEnabled": False,
        "priceBasis": PRICES,
    }
    profile.update(over)
    return {
        "eventType": "AssetReleasePublished",
        "releaseId": f"demo-{profile_id}-1",
        "status": "Published",
        "adminApproved": True,
        "profile": profile,
    }


class SeedProblem(Exception):
    """The demo catalog is not what this run needs (said to the operator, not raised on)."""


def seed(api: str, client_id: str, secret: str, endpoint_ref: str) -> list[str]:
    """Seeds the demo catalog with its deployments at `endpoint_ref` (the simulator's); returns
    the approved ones, or raises SeedProblem saying why the catalog is not usable."""
    with httpx.Client(base_url=api, timeout=60) as http:
        token = http.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
        ).json()["access_token"]
        http.headers["Authorization"] = f"Bearer {token}"
        http.post(
            "/factory/pricebook-revisions",
            json={
                "revision": PRICES,
                "entries": [
                    {
                        "provider": p,
                        "model": m,
                        "inputUsdPerMtok": "0.10",
                        "outputUsdPerMtok": "0.40",
                        "effectiveFrom": "2026-01-01",
                    }
                    for _, p, m in SIM
                ],
            },
        )
        for dep, provider, model in SIM:
            http.post(
                "/factory/model-deployments",
                headers={"Idempotency-Key": f"demo-{dep}"},
                json={
                    "deploymentId": dep,
                    "provider": provider,
                    "model": model,
                    "region": "local",
                    "privacyClass": "Local",
                    "endpointRef": endpoint_ref,
                    "contextWindowTokens": 128000,
                    "licenseMetadata": {"commercialUse": True},
                },
            )
            found = http.get(f"/factory/model-deployments/{dep}").json()
            if found.get("endpointRef") != endpoint_ref:
                # Registered by an older make dev at a fixed simulator address; a deployment's
                # endpointRef never changes, so only a fresh data directory fixes it.
                raise SeedProblem(
                    f"{dep} points at {found.get('endpointRef')!r}, not at this run's "
                    f"simulator ({endpoint_ref}); remove the data directory (.data by default) "
                    "and run make dev again to reseed"
                )
        for dep, provider, model, key, privacy in REAL:
            if os.environ.get(key):
                http.post(
                    "/factory/model-deployments",
                    headers={"Idempotency-Key": f"demo-{dep}"},
                    json={
                        "deploymentId": dep,
                        "provider": provider,
                        "model": model,
                        "region": "global",
                        "privacyClass": privacy,
                        "endpointRef": f"env:{key}",
                        "contextWindowTokens": 128000,
                    },
                )
        http.post(
            "/factory/asset-events",
            json=_profile("code-agent", ["local/sim-chat", "local/sim-claude"]),
        )
        http.post(
            "/factory/asset-events",
            json=_profile(
                "embedding",
                ["local/sim-embed"],
                modality="Embedding",
                requiredCapabilities={},
                embeddingCompatibility="sim-embed-256",
            ),
        )
        for dep, _, _ in SIM:
            http.post(
                f"/factory/model-deployments/{dep}/evaluate",
                headers={"Idempotency-Key": f"demo-eval-{dep}"},
            )
        deadline = time.monotonic() + 180
        pending = {d for d, _, _ in SIM}
        while pending and time.monotonic() < deadline:
            for dep in sorted(pending):
                body = http.get(f"/factory/model-deployments/{dep}").json()
                if body["state"] in ("Approved", "Degraded"):
                    pending.discard(dep)
                elif body["state"] == "Evaluated":
                    http.post(f"/factory/model-deployments/{dep}/approve")
            time.sleep(0.5)  # polling the API at a human pace
        if pending:
            raise SeedProblem(f"not approved within 180 s: {', '.join(sorted(pending))}")
        return sorted(d for d, _, _ in SIM)
