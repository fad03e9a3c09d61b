"""SQLModel tables. Column names are the spec's fields in snake_case; every spec column is kept.

Content (prompts, outputs) has no column anywhere: receipts hold hashes and artifact references.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from domain import pricing
from domain.enums import (
    DeploymentState,
    InvocationOutcome,
    LatencyClass,
    Modality,
    PrivacyClass,
    ProfileStatus,
    UsageStatus,
)
from domain.events import RUN_EVENTS
from domain.provider_reports import REQUEST_ID_MAX_LENGTH
from store.columns import BIGID, UtcDateTime, enum_column, json_column, ts_column, utcnow


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"

    tenant_id: str = Field(primary_key=True, max_length=100)
    name: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class OAuthClient(SQLModel, table=True):
    __tablename__ = "oauth_clients"

    client_id: str = Field(primary_key=True, max_length=100)
    tenant_id: str = Field(foreign_key="tenants.tenant_id", index=True, max_length=100)
    secret_hash: str = Field(max_length=300)
    roles: list[str] = Field(sa_column=json_column())
    scopes: list[str] = Field(sa_column=json_column())
    disabled: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class ModelProfileRow(SQLModel, table=True):
    __tablename__ = "model_profiles"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "profile_id", "version", name="uq_model_profiles_version"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    profile_id: str = Field(max_length=200)
    version: str = Field(max_length=50)
    release_id: str = Field(max_length=200)
    tenant_id: str = Field(max_length=100)
    modality: Modality = Field(sa_column=enum_column(Modality, "modality"))
    required_capabilities: dict[str, Any] = Field(sa_column=json_column())
    privacy_class: PrivacyClass = Field(sa_column=enum_column(PrivacyClass, "privacy_class"))
    latency_class: LatencyClass = Field(sa_column=enum_column(LatencyClass, "latency_class"))
    max_context_tokens: int
    max_output_tokens: int
    allowed_regions: list[str] = Field(sa_column=json_column())
    allowed_deployments: list[str] = Field(sa_column=json_column())
    fallback_chain: list[str] = Field(sa_column=json_column())
    fallback_enabled: bool = False
    embedding_compatibility: str | None = Field(default=None, max_length=200)
    price_basis: str = Field(max_length=100)
    status: ProfileStatus = Field(sa_column=enum_column(ProfileStatus, "profile_status"))


class ModelDeploymentRow(SQLModel, table=True):
    __tablename__ = "model_deployments"
    __table_args__ = (sa.Index("ix_model_deployments_tenant_state", "tenant_id", "state"),)

    # Composite key: deployment ids are per tenant, so one tenant's id never collides with
    # (and so never reveals) another tenant's.
    tenant_id: str = Field(primary_key=True, max_length=100)
    deployment_id: str = Field(primary_key=True, max_length=200)
    provider: str = Field(max_length=64)
    model: str = Field(max_length=200)
    region: str = Field(max_length=64)
    privacy_class: PrivacyClass = Field(sa_column=enum_column(PrivacyClass, "privacy_class"))
    endpoint_ref: str = Field(max_length=400)
    compute_pool_id: str | None = Field(default=None, max_length=200)
    capability_evidence_ref: str | None = Field(default=None, max_length=300)
    license_metadata: dict[str, Any] | None = Field(
        default=None, sa_column=json_column(nullable=True)
    )
    state: DeploymentState = Field(sa_column=enum_column(DeploymentState, "deployment_state"))
    healthy: bool = True
    version: int = Field(default=1, sa_type=sa.BigInteger)
    context_window_tokens: int | None = None


class CapabilityScoreRow(SQLModel, table=True):
    __tablename__ = "capability_scores"
    __table_args__ = (
        sa.Index("ix_capability_scores_deployment", "tenant_id", "deployment_id", "evidence_ref"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    tenant_id: str = Field(max_length=100)
    deployment_id: str = Field(max_length=200)
    capability: str = Field(max_length=64)
    verdict: str = Field(max_length=16)
    score: Decimal | None = Field(default=None, max_digits=6, decimal_places=4)
    evaluated_at: datetime = Field(sa_column=ts_column())
    suite_version: str = Field(max_length=50)
    # The evaluation record the score came from: the deployment's current scores are those
    # whose evidence_ref is its capabilityEvidenceRef, older ones stay as history.
    evidence_ref: str = Field(max_length=300)


class RoutePlanRow(SQLModel, table=True):
    __tablename__ = "route_plans"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "run_id", "profile_id", name="uq_route_plans_run_profile"),
    )

    route_plan_id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    run_id: uuid.UUID
    tenant_id: str = Field(max_length=100)
    profile_id: str = Field(max_length=200)
    profile_version: str = Field(max_length=50)
    policy_revision: str = Field(max_length=100)
    candidates: list[str] = Field(sa_column=json_column())
    constraints: dict[str, Any] = Field(sa_column=json_column())
    resolved_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())
    # The decision record: which catalog snapshot and which policy decision produced the plan.
    snapshot_version: int | None = Field(default=None, sa_type=sa.BigInteger)
    policy_decision_id: uuid.UUID | None = None


class InvocationReceiptRow(SQLModel, table=True):
    __tablename__ = "invocation_receipts"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_receipts_idempotency"),
        # A run's receipts in the order they are paged in (list_for_run); partial so the invoke
        # path, which names three of its columns, never picks it (migration 0019).
        sa.Index(
            "ix_receipts_tenant_run_started",
            "tenant_id",
            "run_id",
            "started_at",
            "invocation_id",
            postgresql_where=sa.text("run_id IS NOT NULL"),
            sqlite_where=sa.text("run_id IS NOT NULL"),
        ),
        sa.Index("ix_receipts_usage_status", "usage_status", "started_at"),
        # The console's closed receipts, newest first; partial so the invoke path, which looks
        # receipts up among the open ones, never picks it (migration 0008 says what it did).
        sa.Index(
            "ix_receipts_tenant_closed",
            "tenant_id",
            "started_at",
            postgresql_where=sa.text("ended_at IS NOT NULL"),
            sqlite_where=sa.text("ended_at IS NOT NULL"),
        ),
        sa.Index(
            "ix_receipts_open",
            "started_at",
            postgresql_where=sa.text("ended_at IS NULL"),
            sqlite_where=sa.text("ended_at IS NULL"),
        ),
    )

    invocation_id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: str = Field(max_length=100)
    project_id: str = Field(max_length=200)
    run_id: uuid.UUID | None = None
    attempt_id: uuid.UUID | None = None
    profile_id: str = Field(max_length=200)
    deployment_id: str = Field(max_length=200)
    route_plan_id: uuid.UUID | None = None
    fallback_used: bool = False
    request_hash: str = Field(max_length=100)
    idempotency_key: str = Field(max_length=200)
    policy_decision_id: uuid.UUID
    outcome: InvocationOutcome = Field(
        sa_column=enum_column(InvocationOutcome, "invocation_outcome")
    )
    usage_status: UsageStatus = Field(sa_column=enum_column(UsageStatus, "usage_status"))
    input_tokens: int | None = None
    output_tokens: int | None = None
    estimated_cost_usd: Decimal | None = Field(default=None, max_digits=18, decimal_places=8)
    pricing_revision: str = Field(max_length=100)
    latency_ms: int | None = None
    output_artifact_ref: str | None = Field(default=None, max_length=300)
    started_at: datetime = Field(sa_column=ts_column())
    ended_at: datetime | None = Field(default=None, sa_column=ts_column(nullable=True))
    # Beyond the spec's 22: what reconciliation matches on and what the latency metric needs.
    provider_request_id: str | None = Field(default=None, max_length=REQUEST_ID_MAX_LENGTH)
    cached_input_tokens: int | None = None
    # Of the input, the part written to the provider's prompt cache (migration 0017): null
    # where the provider reported none, and on receipts closed before the column.
    cache_write_input_tokens: int | None = None
    time_to_first_token_ms: int | None = None
    statement_ref: str | None = Field(default=None, max_length=300)
    # Why it closed (domain.close_reason): null while in flight.
    close_reason: str | None = Field(default=None, max_length=40)
    # The failure's kind, which a replay answers with (migration 0022): null while in flight,
    # for a completed call, and on receipts closed before the column.
    error_kind: str | None = Field(default=None, max_length=40)
    # The answer was held until complete (domain.buffering): set at the claim.
    buffered: bool = Field(default=False, sa_column_kwargs={"server_default": sa.false()})
    # Which provider attempt answered (1, 2, … over retries and fallbacks): set at the close.
    provider_attempt: int | None = None
    # The call's data classification (domain.policy.DataClassification's value), set at the
    # claim (migration 0023): a Responses item reference to this answer is refused from a call
    # of a lower classification (api/responses_references.py). Null on receipts claimed before
    # the column.
    data_classification: str | None = Field(default=None, max_length=32)


# A run's events as a partial index's predicate (and the prune's, written the same so that the
# planner proves one from the other whatever the statement binds): literal, sorted.
RUN_EVENTS_SQL = sa.text(
    "event_type IN (" + ", ".join(f"'{name}'" for name in sorted(RUN_EVENTS)) + ")"
)


class OutboxEventRow(SQLModel, table=True):
    """Integration events written in the same transaction as the state change they describe."""

    __tablename__ = "outbox_events"
    __table_args__ = (
        sa.Index("ix_outbox_tenant_position", "tenant_id", "position"),
        # A deployment's history (store/console_reads.deployment_history names the type inline).
        sa.Index(
            "ix_outbox_deployment_events",
            "tenant_id",
            "aggregate_id",
            "position",
            postgresql_where=sa.text("aggregate_type = 'ModelDeployment'"),
            sqlite_where=sa.text("aggregate_type = 'ModelDeployment'"),
        ),
        # The sweeper's prune of run events past their retention (store/event_retention.py,
        # migration 0014): the oldest first, by age.
        sa.Index(
            "ix_outbox_run_events_age",
            "occurred_at",
            "position",
            postgresql_where=RUN_EVENTS_SQL,
            sqlite_where=RUN_EVENTS_SQL,
        ),
        # The horizon of settled positions (store/outbox_horizon.py, migration 0019): rows by
        # the time they were written, the only ones that have it (none on SQLite).
        sa.Index(
            "ix_outbox_inserted_at",
            "inserted_at",
            "position",
            postgresql_where=sa.text("inserted_at IS NOT NULL"),
            sqlite_where=sa.text("inserted_at IS NOT NULL"),
        ),
        # A position is never taken twice (migration 0018). SQLite otherwise gives the largest
        # rowid present plus one: once the prune deleted the newest events, the next took a
        # position at or below a subscriber's cursor and was never delivered.
        {"sqlite_autoincrement": True},
    )

    position: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    event_id: uuid.UUID = Field(default_factory=uuid.uuid4, unique=True)
    tenant_id: str = Field(max_length=100)
    event_type: str = Field(max_length=100)
    topic: str = Field(max_length=200)
    aggregate_type: str = Field(max_length=100)
    aggregate_id: str = Field(max_length=300)
    payload: dict[str, Any] = Field(sa_column=json_column())
    occurred_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())
    # When the row was written, by the database's clock as its position was taken (PostgreSQL's
    # `clock_timestamp()` default, set by migration 0009; never given by the application):
    # what store/outbox_horizon.py reads. NULL on rows from before it, and on SQLite.
    inserted_at: datetime | None = Field(
        default=None,
        sa_column=sa.Column(UtcDateTime(), nullable=True, server_default=sa.FetchedValue()),
    )


class PricebookEntryRow(SQLModel, table=True):
    """One price of one (provider, model) in a pricing revision. Revisions are immutable so
    receipts that name one keep their meaning."""

    __tablename__ = "pricebook_entries"
    __table_args__ = (
        # A revision may announce price changes: one entry per model and effective date.
        sa.UniqueConstraint(
            "tenant_id",
            "revision",
            "provider",
            "model",
            "effective_from",
            name="uq_pricebook_entry",
        ),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    tenant_id: str = Field(max_length=100)
    revision: str = Field(max_length=pricing.REVISION_MAX_LENGTH)
    effective_from: datetime = Field(sa_column=ts_column())
    provider: str = Field(max_length=pricing.PROVIDER_MAX_LENGTH)
    model: str = Field(max_length=pricing.MODEL_MAX_LENGTH)
    input_usd_per_mtok: Decimal = Field(
        max_digits=pricing.PRICE_MAX_DIGITS, decimal_places=pricing.PRICE_DECIMAL_PLACES
    )
    output_usd_per_mtok: Decimal = Field(
        max_digits=pricing.PRICE_MAX_DIGITS, decimal_places=pricing.PRICE_DECIMAL_PLACES
    )
    cached_input_usd_per_mtok: Decimal | None = Field(
        default=None,
        max_digits=pricing.PRICE_MAX_DIGITS,
        decimal_places=pricing.PRICE_DECIMAL_PLACES,
    )
    cache_write_usd_per_mtok: Decimal | None = Field(
        default=None,
        max_digits=pricing.PRICE_MAX_DIGITS,
        decimal_places=pricing.PRICE_DECIMAL_PLACES,
    )
    created_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class IdempotencyRecordRow(SQLModel, table=True):
    """What a keyed request answered, so a replay gets the same answer and a different body
    under the same key is refused."""

    __tablename__ = "idempotency_records"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "operation", "key", name="uq_idempotency_key"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIGID)
    tenant_id: str = Field(max_length=100)
    operation: str = Field(max_length=100)
    key: str = Field(max_length=200)
    request_hash: str = Field(max_length=100)
    status_code: int
    response: dict[str, Any] = Field(sa_column=json_column())
    created_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())


class EvaluationRow(SQLModel, table=True):
    __tablename__ = "evaluations"
    __table_args__ = (
        sa.Index("ix_evaluations_deployment", "tenant_id", "deployment_id", "started_at"),
    )

    evaluation_id: str = Field(primary_key=True, max_length=300)
    tenant_id: str = Field(max_length=100)
    deployment_id: str = Field(max_length=200)
    suite_version: str = Field(max_length=50)
    status: str = Field(max_length=20)  # Running, Completed, Failed
    # Why a run could not complete (provider unreachable, credentials missing), never content.
    reason: str | None = Field(default=None, max_length=500)
    evidence_ref: str | None = Field(default=None, max_length=300)
    # Per capability: pass rate, verdict, and listing profiles it now falls short of.
    summary: dict[str, Any] | None = Field(default=None, sa_column=json_column(nullable=True))
    started_at: datetime = Field(default_factory=utcnow, sa_column=ts_column())
    ended_at: datetime | None = Field(default=None, sa_column=ts_column(nullable=True))
