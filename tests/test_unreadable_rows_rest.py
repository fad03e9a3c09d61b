"""The REST reads of a stored row that no longer reads as its record (a license with a key
`LicenseMetadata` now forbids, a profile whose thresholds `ModelProfile` refuses; written
before a rule was tightened, or by hand): each was a 500. The row's own GET is a 409
problem+json naming the id field and saying to correct the row, without the stored values;
the lists leave it out, the other rows as before, and log its id."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from store.db import transaction
from store.tables import ModelDeploymentRow, ModelProfileRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, register

_UNREADABLE = "https://model-router.dev/problems/stored-record-unreadable"
# Stored values only a hand-written row holds: none of them may be echoed back.
_LEGACY_KEY, _LEGACY_LEVEL = "legacyTermX9", "very-high-Q7"


def _refusal(resp: httpx.Response, field: str) -> dict[str, object]:
    assert resp.status_code == 409, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = dict(resp.json())
    assert problem["type"] == _UNREADABLE and problem["field"] == field
    assert "correct the row" in str(problem["detail"])
    assert _LEGACY_KEY not in resp.text and _LEGACY_LEVEL not in resp.text
    return problem


@dataclass(frozen=True)
class Broken:
    """A tenant with one deployment and one profile whose stored rows do not read, each beside
    one that does (the readable profile lists both deployments)."""

    auth: dict[str, str]
    broken: str
    fine: str
    bad_profile: str
    good_profile: str


@pytest.fixture
async def rows(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> Broken:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    hexa = uuid.uuid4().hex[:6]
    broken, fine = f"rest-{hexa}/unreadable", f"rest-{hexa}/fine"
    for target in (broken, fine):
        await register(http, auth, target)
    bad_profile, good_profile = f"rest-{hexa}-unreadable", f"rest-{hexa}-fine"
    for profile_id in (bad_profile, good_profile):
        event = profile_event(profile_id, [fine, broken], {"tool-calling": 0.8})
        assert (await publish(http, auth, event)).status_code == 200
    # Written as a hand or an older rule would have: straight into the rows.
    async with transaction(sessions) as session:
        await session.execute(
            update(ModelDeploymentRow)
            .where(col(ModelDeploymentRow.tenant_id) == tenant)
            .where(col(ModelDeploymentRow.deployment_id) == broken)
            .values(license_metadata={"commercialUse": True, _LEGACY_KEY: True})
        )
        await session.execute(
            update(ModelProfileRow)
            .where(col(ModelProfileRow.tenant_id) == tenant)
            .where(col(ModelProfileRow.profile_id) == bad_profile)
            .values(required_capabilities={"tool-calling": _LEGACY_LEVEL})
        )
    return Broken(auth, broken, fine, bad_profile, good_profile)


async def test_the_lists_leave_an_unreadable_row_out_and_log_its_id(
    http: httpx.AsyncClient, rows: Broken, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="model_router.api"):
        listed = await http.get("/factory/model-deployments", headers=rows.auth)
        assert listed.status_code == 200, listed.text
        assert [d["deploymentId"] for d in listed.json()] == [rows.fine]
        profiles = await http.get("/factory/model-profiles", headers=rows.auth)
        assert profiles.status_code == 200, profiles.text
        assert [p["profileId"] for p in profiles.json()] == [rows.good_profile]
    left_out = [r for r in caplog.records if "left out of the list" in r.getMessage()]
    assert {getattr(r, "deployment", None) for r in left_out} >= {rows.broken}
    assert {getattr(r, "profile", None) for r in left_out} >= {f"{rows.bad_profile} v1"}
    assert _LEGACY_KEY not in caplog.text and _LEGACY_LEVEL not in caplog.text


async def test_an_unreadable_rows_own_get_is_a_409_naming_its_id(
    http: httpx.AsyncClient, rows: Broken
) -> None:
    own = await http.get(f"/factory/model-deployments/{rows.broken}", headers=rows.auth)
    assert rows.broken in str(_refusal(own, "deploymentId")["detail"])
    fine = await http.get(f"/factory/model-deployments/{rows.fine}", headers=rows.auth)
    assert fine.status_code == 200, fine.text
    for query in ({}, {"version": "1"}):
        refused = await http.get(
            f"/factory/model-profiles/{rows.bad_profile}", params=query, headers=rows.auth
        )
        assert rows.bad_profile in str(_refusal(refused, "profileId")["detail"])
    # A readable profile listing the unreadable deployment still reads, the deployment named.
    good = await http.get(f"/factory/model-profiles/{rows.good_profile}", headers=rows.auth)
    assert good.status_code == 200, good.text
    assert [d["deploymentId"] for d in good.json()["deployments"]] == [rows.fine, rows.broken]
