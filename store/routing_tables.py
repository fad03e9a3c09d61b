"""The routing settings' tables the planner reads beside the catalog: a tenant's policy (and
every revision of it the tenant published), its scoring weights, and the catalog's version
(with the platform-wide weights a tenant that set none of its own routes with). Written by
store/routing_settings.py and store/catalog_state.py, read by store/catalog_loader.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.columns import UtcDateTime, utcnow


class TenantPolicyRow(SQLModel, table=True):
    __tablename__ = "tenant_policies"

    tenant_id: str = Field(primary_key=True, max_length=100)
    revision: str = Field(max_length=100)
    document: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(UtcDateTime(), nullable=False)
    )


class TenantPolicyRevisionRow(SQLModel, table=True):
    """Every policy revision a tenant published, with its rules, migration 0021. Route plans,
    decision records, receipts and events name a policy by its revision alone: kept here, a
    revision names one set of rules for good, not only while it is the current one."""

    __tablename__ = "tenant_policy_revisions"

    tenant_id: str = Field(primary_key=True, max_length=100)
    revision: str = Field(primary_key=True, max_length=100)
    document: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    # First published: publishing the revision again (a rollback to it) leaves it as it was.
    published_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(UtcDateTime(), nullable=False)
    )


class CatalogStateRow(SQLModel, table=True):
    __tablename__ = "catalog_state"

    id: int = Field(primary_key=True)
    version: int = Field(sa_type=sa.BigInteger)
    # The weights of every tenant that set none of its own (TenantRoutingWeightsRow): written
    # platform-wide before weights were a tenant's, and kept so those installations keep them.
    weights: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON, nullable=True)
    )


class TenantRoutingWeightsRow(SQLModel, table=True):
    """A tenant's own scoring weights (ModelAccess:Routing:Weights), migration 0016."""

    __tablename__ = "tenant_routing_weights"

    tenant_id: str = Field(primary_key=True, max_length=100)
    weights: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(UtcDateTime(), nullable=False)
    )
