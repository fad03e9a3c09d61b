"""Pricing revisions: immutable once published, so receipts that name one keep their meaning."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, time
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.pricing import Pricebook, PriceEntry
from store import catalog_state
from store.tables import PricebookEntryRow


class RevisionConflict(Exception):
    """The revision exists with other prices."""


def _rows(tenant_id: str, book: Pricebook) -> list[PricebookEntryRow]:
    return [
        PricebookEntryRow(
            tenant_id=tenant_id,
            revision=book.revision,
            effective_from=datetime.combine(e.effective_from, time.min, tzinfo=UTC),
            provider=e.provider,
            model=e.model,
            input_usd_per_mtok=e.input_usd_per_mtok,
            output_usd_per_mtok=e.output_usd_per_mtok,
            cached_input_usd_per_mtok=e.cached_input_usd_per_mtok,
            cache_write_usd_per_mtok=e.cache_write_usd_per_mtok,
        )
        for e in book.entries
    ]


def _entry(row: PricebookEntryRow) -> PriceEntry:
    # Built as stored, not validated again: a revision published before provider names were
    # held to a deployment's (`OpenAI`) still reads back (it matches no deployment, as it never
    # did), where a validation error made every read of it, a call's price among them, fail.
    return PriceEntry.model_construct(
        provider=row.provider,
        model=row.model,
        input_usd_per_mtok=Decimal(row.input_usd_per_mtok),
        output_usd_per_mtok=Decimal(row.output_usd_per_mtok),
        cached_input_usd_per_mtok=(
            Decimal(row.cached_input_usd_per_mtok)
            if row.cached_input_usd_per_mtok is not None
            else None
        ),
        cache_write_usd_per_mtok=(
            Decimal(row.cache_write_usd_per_mtok)
            if row.cache_write_usd_per_mtok is not None
            else None
        ),
        effective_from=row.effective_from.date(),
    )


def _canonical(book: Pricebook) -> list[tuple[object, ...]]:
    return sorted(
        (
            e.provider,
            e.model,
            e.effective_from,
            e.input_usd_per_mtok.normalize(),
            e.output_usd_per_mtok.normalize(),
            e.cached_input_usd_per_mtok.normalize()
            if e.cached_input_usd_per_mtok is not None
            else None,
            e.cache_write_usd_per_mtok.normalize()
            if e.cache_write_usd_per_mtok is not None
            else None,
        )
        for e in book.entries
    )


async def load(session: AsyncSession, tenant_id: str, revision: str) -> Pricebook | None:
    stmt = (
        select(PricebookEntryRow)
        .where(col(PricebookEntryRow.tenant_id) == tenant_id)
        .where(col(PricebookEntryRow.revision) == revision)
        .order_by(col(PricebookEntryRow.provider), col(PricebookEntryRow.model))
    )
    rows = (await session.scalars(stmt)).all()
    return Pricebook(revision=revision, entries=tuple(_entry(r) for r in rows)) if rows else None


async def revisions(session: AsyncSession, tenant_id: str) -> dict[str, int]:
    stmt = select(PricebookEntryRow).where(col(PricebookEntryRow.tenant_id) == tenant_id)
    counts: dict[str, int] = defaultdict(int)
    for row in (await session.scalars(stmt)).all():
        counts[row.revision] += 1
    return dict(sorted(counts.items()))


async def current(session: AsyncSession, tenant_id: str) -> str | None:
    """The tenant's current revision: the one it published last (None before its first).

    What a profile whose priceBasis names no published revision is priced at. Without one, a
    tenant's second revision left such a profile with no prices at all: its costs unknown, its
    budgeted calls refused `no-price` for good. Published last is the revision holding the
    tenant's highest row id. Rows are never deleted or updated, and `publish` inserts a
    revision's rows only while it holds the catalog version's lock, so every publish (of any
    tenant) draws its ids after the one before it committed: PostgreSQL's sequence hands them out
    in that order, and SQLite's rowid is one past the largest there. No clock is trusted: two
    replicas' clocks may disagree, an id order cannot. A revision published again unchanged
    adds no row, so it does not become current."""
    stmt = (
        select(PricebookEntryRow.revision)
        .where(col(PricebookEntryRow.tenant_id) == tenant_id)
        .order_by(col(PricebookEntryRow.id).desc())
        .limit(1)
    )
    return (await session.scalars(stmt)).first()


async def publish(session: AsyncSession, tenant_id: str, book: Pricebook) -> bool:
    """Store the revision; False when the identical revision was already there.

    The check and the insert are one step: the catalog version row (which this transaction
    bumps anyway) is locked before the check, so a second publish of the revision waits for
    the first to commit and then finds it. Checked first, two publishes of one revision with
    different prices both found none and both inserted: their rows differ in model or date,
    so no key kept them apart, and the "immutable" revision held both sets of prices."""
    await catalog_state.lock(session)
    existing = await load(session, tenant_id, book.revision)
    if existing is not None:
        if _canonical(existing) != _canonical(book):
            raise RevisionConflict(f"pricing revision {book.revision} exists with other prices")
        return False
    session.add_all(_rows(tenant_id, book))
    await catalog_state.bump(session)
    await session.flush()
    return True
