"""Usage statements at rest: imported files (all or nothing, replayed by content hash) and the
lines fetched from provider usage APIs (re-fetching a bucket updates its line)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import false, or_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.statements import StatementLine
from store.columns import utcnow
from store.ops_tables import StatementImportRow, UsageStatementLineRow, as_utc
from store.upsert import upsert

_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "fetched_at",
)


def _values(line: StatementLine, import_id: uuid.UUID | None) -> dict[str, object]:
    return {
        "statement_ref": line.statement_ref,
        "source": line.source,
        "import_id": import_id,
        "tenant_id": line.tenant_id,
        "provider": line.provider.lower(),
        "model": line.model,
        "key": line.key,
        "bucket_start": line.bucket_start,
        "bucket_end": line.bucket_end,
        "provider_request_id": line.provider_request_id,
        "input_tokens": line.input_tokens,
        "output_tokens": line.output_tokens,
        "cached_input_tokens": line.cached_input_tokens,
        "cache_write_input_tokens": line.cache_write_input_tokens,
        "fetched_at": utcnow(),
    }


async def find_import(
    session: AsyncSession, tenant_id: str, content_hash: str
) -> StatementImportRow | None:
    stmt = (
        select(StatementImportRow)
        .where(col(StatementImportRow.tenant_id) == tenant_id)
        .where(col(StatementImportRow.content_hash) == content_hash)
    )
    return (await session.scalars(stmt)).first()


async def record_import(
    session: AsyncSession,
    row: StatementImportRow,
    lines: Sequence[StatementLine],
) -> None:
    """The import and all its lines, in the caller's transaction."""
    session.add(row)
    await session.flush()
    for start in range(0, len(lines), 500):
        chunk = lines[start : start + 500]
        await upsert(
            session,
            UsageStatementLineRow,
            [_values(line, row.import_id) for line in chunk],
            conflict=("statement_ref",),
        )


async def upsert_lines(session: AsyncSession, lines: Sequence[StatementLine]) -> None:
    for start in range(0, len(lines), 500):
        await upsert(
            session,
            UsageStatementLineRow,
            [_values(line, None) for line in lines[start : start + 500]],
            conflict=("statement_ref",),
            update=_TOKENS,
        )


def _line(row: UsageStatementLineRow) -> StatementLine:
    return StatementLine(
        statement_ref=row.statement_ref,
        source=row.source,
        tenant_id=row.tenant_id,
        provider=row.provider,
        model=row.model,
        key=row.key,
        bucket_start=as_utc(row.bucket_start) if row.bucket_start else None,
        bucket_end=as_utc(row.bucket_end) if row.bucket_end else None,
        provider_request_id=row.provider_request_id,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        cached_input_tokens=row.cached_input_tokens,
        cache_write_input_tokens=row.cache_write_input_tokens,
    )


# A statement's IN list binds one parameter per request id, and asyncpg refuses a statement with
# more than 32,767 (SQLite 32,766). A day with more pending receipts that carry a request id (an
# hour of 429s at 10 calls/s is 36,000) made the reconciler's window fail on every attempt, and
# the days after it waited behind it. Request ids are therefore asked in chunks of this many.
REQUEST_ID_CHUNK = 5_000


async def lines_for(
    session: AsyncSession,
    *,
    providers: Iterable[str],
    tenants: Iterable[str],
    start: datetime,
    end: datetime,
    request_ids: Iterable[str],
) -> list[StatementLine]:
    """Bucket lines inside [start, end) and request-id lines among `request_ids`, of the given
    providers, provider-wide or belonging to one of `tenants`, in statement_ref order."""
    ids = sorted(set(request_ids))
    in_window = (
        col(UsageStatementLineRow.bucket_start).is_not(None)
        & (col(UsageStatementLineRow.bucket_start) >= start)
        & (col(UsageStatementLineRow.bucket_end) <= end)
    )
    scope = (
        select(UsageStatementLineRow)
        .where(col(UsageStatementLineRow.provider).in_(sorted({p.lower() for p in providers})))
        .where(
            or_(
                col(UsageStatementLineRow.tenant_id).is_(None),
                col(UsageStatementLineRow.tenant_id).in_(sorted(set(tenants))),
            )
        )
    )
    found: dict[str, UsageStatementLineRow] = {}
    chunks = [ids[i : i + REQUEST_ID_CHUNK] for i in range(0, len(ids), REQUEST_ID_CHUNK)]
    for i, chunk in enumerate(chunks or [[]]):
        by_request = col(UsageStatementLineRow.provider_request_id).in_(chunk) if chunk else false()
        # The window's bucket lines come with the first chunk; later chunks add request-id lines.
        where = or_(in_window, by_request) if i == 0 else by_request
        for row in (await session.scalars(scope.where(where))).all():
            found[row.statement_ref] = row
    return [_line(found[ref]) for ref in sorted(found)]
