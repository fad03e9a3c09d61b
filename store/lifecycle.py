"""Writes behind the deployment lifecycle: the deployment row is a projection of the lifecycle
workflow's state, written with optimistic concurrency on `version`, each change with its events
(and any evidence's score rows) in the caller's one transaction.

A transition's activity may be retried after an attempt that committed but was never
acknowledged (its 10 s timeout spent waiting on the catalog version's row lock): the retry must
answer that attempt's row, and nothing else one version on, or the workflow's copy and the store
part ways (a Retire answered with the Approved row it found, nothing retired)."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from domain.deployments import DeploymentRegistration, EvidenceInput, LicenseMetadata
from domain.enums import DeploymentState
from domain.events import capability_evidence_recorded, deployment_state_changed
from domain.lifecycle import IllegalTransition, Transition, healthy_in, next_state
from store import catalog_state
from store.repositories import ModelDeploymentRepository, OutboxRepository
from store.tables import CapabilityScoreRow, ModelDeploymentRow


class DeploymentMissing(Exception):
    """No such deployment for this tenant."""


class VersionConflict(Exception):
    """The row moved on under another writer: nothing was written. `row` is the row as it is
    (read under its lock), for the workflow to adopt."""

    def __init__(self, message: str, row: ModelDeploymentRow) -> None:
        super().__init__(message)
        self.row = row


class RowMoved(Exception):
    """The row moved between this attempt's read and its write, which found it no more: only
    on SQLite, where the read takes no lock. Nothing was written; retried (it is no refusal),
    the next attempt reads the row as it is and decides."""


async def insert_candidate(
    session: AsyncSession, tenant_id: str, reg: DeploymentRegistration
) -> tuple[bool, ModelDeploymentRow]:
    """Insert the Candidate row and its DeploymentStateChanged event. An existing row (a retry
    after a lost acknowledgement) is returned, not rewritten; the flag says which."""
    deployments = ModelDeploymentRepository(session, tenant_id)
    existing = await deployments.get(reg.deployment_id)
    if existing is not None:
        return False, existing
    row = ModelDeploymentRow(
        tenant_id=tenant_id,
        deployment_id=reg.deployment_id,
        provider=reg.provider,
        model=reg.model,
        region=reg.region,
        privacy_class=reg.privacy_class,
        endpoint_ref=reg.endpoint_ref,
        compute_pool_id=reg.compute_pool_id,
        context_window_tokens=reg.context_window_tokens,
        license_metadata=(
            reg.license_metadata.model_dump(by_alias=True) if reg.license_metadata else None
        ),
        state=DeploymentState.CANDIDATE,
        healthy=True,
        version=1,
    )
    deployments.add(row)
    await catalog_state.bump(session)
    OutboxRepository(session, tenant_id).append(
        **deployment_state_changed(
            tenant_id=tenant_id,
            deployment_id=reg.deployment_id,
            from_state=None,
            to_state=DeploymentState.CANDIDATE,
            healthy=True,
        )
    )
    return True, row


async def apply_transition(
    session: AsyncSession,
    tenant_id: str,
    deployment_id: str,
    transition: Transition,
    expected_version: int,
    *,
    expected_state: DeploymentState | None = None,
    license_: LicenseMetadata | None = None,
    evidence: EvidenceInput | None = None,
) -> ModelDeploymentRow:
    """Move the row from `expected_version` (in `expected_state`) through `transition`, with its
    events. A retry of an attempt that committed but was never acknowledged finds the row one
    version on, in the state this transition leads to (with this evidence, this license), and
    returns it unchanged; any other row is a conflict. Without `expected_state` (an attempt
    scheduled before it was sent) the version alone decides, as it did then."""
    # Locked as it is read (PostgreSQL): a retry whose first attempt still holds the row waits
    # for it to commit and then reads its version, where it read the old one, found the row
    # gone from under its guarded UPDATE and answered a conflict for a change that was made.
    # SQLite renders no FOR UPDATE: there the UPDATE below finds out (RowMoved).
    row = await session.scalar(
        select(ModelDeploymentRow)
        .where(col(ModelDeploymentRow.tenant_id) == tenant_id)
        .where(col(ModelDeploymentRow.deployment_id) == deployment_id)
        .with_for_update()
    )
    if row is None:
        raise DeploymentMissing(deployment_id)
    if row.version != expected_version:
        if row.version == expected_version + 1 and _applied(
            row, expected_state, transition, license_, evidence
        ):
            return row
        raise VersionConflict(f"version {row.version}, expected {expected_version}", row)
    before_state, before_healthy = row.state, row.healthy
    to_state = next_state(row.state, transition)
    values: dict[str, object] = {
        "state": to_state,
        "healthy": healthy_in(to_state, transition, row.healthy),
        "version": row.version + 1,
    }
    if transition is Transition.RECORD_LICENSE and license_ is not None:
        values["license_metadata"] = license_.model_dump(by_alias=True)
    outbox = OutboxRepository(session, tenant_id)
    if evidence is not None:
        values["capability_evidence_ref"] = evidence.evidence_ref
        for capability, m in sorted(evidence.scores.items()):
            session.add(
                CapabilityScoreRow(
                    tenant_id=tenant_id,
                    deployment_id=deployment_id,
                    capability=capability,
                    verdict=m.verdict,
                    score=Decimal(str(round(m.score, 4))),
                    evaluated_at=evidence.evaluated_at,
                    suite_version=evidence.suite_version,
                    evidence_ref=evidence.evidence_ref,
                )
            )
        outbox.append(
            **capability_evidence_recorded(
                tenant_id=tenant_id,
                deployment_id=deployment_id,
                suite_version=evidence.suite_version,
                evidence_ref=evidence.evidence_ref,
            )
        )
    result = await session.execute(
        update(ModelDeploymentRow)
        .where(col(ModelDeploymentRow.tenant_id) == tenant_id)
        .where(col(ModelDeploymentRow.deployment_id) == deployment_id)
        .where(col(ModelDeploymentRow.version) == expected_version)
        .values(**values)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise RowMoved(f"version {expected_version} moved on before it was written")
    await catalog_state.bump(session)
    if (to_state, values["healthy"]) != (before_state, before_healthy):
        outbox.append(
            **deployment_state_changed(
                tenant_id=tenant_id,
                deployment_id=deployment_id,
                from_state=before_state,
                to_state=to_state,
                healthy=bool(values["healthy"]),
            )
        )
    await session.flush()
    await session.refresh(row)
    return row


def _applied(
    row: ModelDeploymentRow,
    expected_state: DeploymentState | None,
    transition: Transition,
    license_: LicenseMetadata | None,
    evidence: EvidenceInput | None,
) -> bool:
    """Whether the row one version on is what this transition wrote: in the state it leads to,
    holding its evidence or license. The version alone said so of any change (an Approve's row
    answered a Retire, which retired nothing)."""
    # An attempt scheduled before the state was sent (around an upgrade) is judged by the
    # states the transition can lead to from any: a Retire's retry never takes an Approve's row.
    starts = tuple(DeploymentState) if expected_state is None else (expected_state,)
    if row.state not in {t for s in starts if (t := _after(s, transition)) is not None}:
        return False
    if evidence is not None and row.capability_evidence_ref != evidence.evidence_ref:
        return False
    if transition is Transition.RECORD_LICENSE and license_ is not None:
        return row.license_metadata == license_.model_dump(mode="json", by_alias=True)
    return True


def _after(state: DeploymentState, transition: Transition) -> DeploymentState | None:
    try:
        return next_state(state, transition)
    except IllegalTransition:
        return None
