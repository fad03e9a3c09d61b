"""Activating and retiring profile versions from asset events, each with its event, in one
transaction. Versions are kept: a retired version stays readable for runs pinned to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import CursorResult, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.enums import ProfileStatus
from domain.events import profile_activated, profile_retired
from domain.profile_releases import (
    AssetReleasePublished,
    AssetReleaseRetired,
    Difference,
    activation_refusals,
    version_differences,
)
from domain.profiles import ModelProfile
from store import catalog_state
from store.repositories import ModelProfileRepository, OutboxRepository
from store.tables import ModelProfileRow


class ActivationRefused(Exception):
    def __init__(self, refusals: list[str]) -> None:
        super().__init__("; ".join(refusals))
        self.refusals = refusals


class VersionConflict(Exception):
    """The version exists with other content (or from another release): versions are
    immutable."""

    def __init__(self, message: str, differences: list[Difference]) -> None:
        super().__init__(message)
        self.differences = differences


@dataclass
class Outcome:
    profile: ModelProfile
    changed: bool


async def _version(
    session: AsyncSession, tenant_id: str, profile_id: str, version: str
) -> ModelProfileRow | None:
    stmt = (
        select(ModelProfileRow)
        .where(col(ModelProfileRow.tenant_id) == tenant_id)
        .where(col(ModelProfileRow.profile_id) == profile_id)
        .where(col(ModelProfileRow.version) == version)
    )
    return (await session.scalars(stmt)).first()


async def activate(session: AsyncSession, tenant_id: str, event: AssetReleasePublished) -> Outcome:
    definition = event.profile
    existing = await _version(session, tenant_id, definition.profile_id, definition.version)
    if existing is not None:
        stored = ModelProfile.model_validate(existing)
        differences = version_differences(stored, event)
        if differences:
            raise VersionConflict(
                f"profile {definition.profile_id} version {definition.version} exists "
                f"(release {existing.release_id}) with other content: "
                + ", ".join(d.field for d in differences)
                + "; versions are immutable, publish a new version",
                differences,
            )
        return Outcome(stored, changed=False)

    active = {
        p.profile_id: p for p in await ModelProfileRepository(session, tenant_id).latest_active()
    }

    def find_active(profile_id: str) -> ModelProfile | None:
        row = active.get(profile_id)
        return ModelProfile.model_validate(row) if row else None

    refusals = activation_refusals(event, find_active)
    if refusals:
        raise ActivationRefused(refusals)
    profile = definition.to_profile(tenant_id=tenant_id, release_id=event.release_id)
    session.add(
        ModelProfileRow(**profile.model_dump(exclude={"status"}), status=ProfileStatus.ACTIVE)
    )
    await catalog_state.bump(session)
    OutboxRepository(session, tenant_id).append(
        **profile_activated(
            tenant_id=tenant_id,
            profile_id=profile.profile_id,
            version=profile.version,
            release_id=profile.release_id,
            privacy_class=profile.privacy_class.value,
        )
    )
    await session.flush()
    return Outcome(profile, changed=True)


async def retire(
    session: AsyncSession, tenant_id: str, event: AssetReleaseRetired
) -> Outcome | None:
    row = await _version(session, tenant_id, event.profile_id, event.version)
    if row is None:
        return None
    if row.release_id != event.release_id:
        # Each version belongs to the one release that activated it: a Deprecated or Revoked
        # event naming another release retired it all the same (a release's revocation
        # reaching versions it never published).
        raise VersionConflict(
            f"Version {event.version} of {event.profile_id} was activated by release "
            f"{row.release_id}, not {event.release_id}",
            [Difference(field="releaseId", existing=row.release_id, published=event.release_id)],
        )
    if row.status is ProfileStatus.RETIRED:
        return Outcome(ModelProfile.model_validate(row), changed=False)
    # Retired only if still Active as the statement runs: of two retirements at once, the
    # second waits for the first's row lock and then changes nothing (a replay), where setting
    # the status it had read wrote a second ModelProfileRetired.
    retired = await session.execute(
        update(ModelProfileRow)
        .where(col(ModelProfileRow.id) == row.id)
        .where(col(ModelProfileRow.status) == ProfileStatus.ACTIVE)
        .values(status=ProfileStatus.RETIRED)
        .execution_options(synchronize_session=False)
    )
    await session.refresh(row)
    if cast(CursorResult[Any], retired).rowcount == 0:
        return Outcome(ModelProfile.model_validate(row), changed=False)
    await catalog_state.bump(session)
    OutboxRepository(session, tenant_id).append(
        **profile_retired(tenant_id=tenant_id, profile_id=row.profile_id, version=row.version)
    )
    await session.flush()
    return Outcome(ModelProfile.model_validate(row), changed=True)
