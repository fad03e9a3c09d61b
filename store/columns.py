"""Column types and builders shared by every table module: the UTC timestamp that reads back
with its zone on both engines, the 64-bit surrogate key, and the JSON and string-enum columns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware timestamp on every engine. PostgreSQL keeps the zone; SQLite keeps
    none and hands values back naive, so they are written in UTC and read back as UTC — every
    surface then prints RFC 3339 with a zone, whichever store is behind it."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        # A naive value is taken as UTC, as SQLite has always stored them.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# The migrations give every surrogate key a BIGINT (a BIGSERIAL on PostgreSQL; SQLite's
# INTEGER PRIMARY KEY is already 64-bit and is its rowid only when spelled INTEGER). Declaring
# them as plain Integer here made SQLAlchemy's asyncpg dialect bind them as `$1::INTEGER`, so
# the event feed and webhook delivery would have failed once the outbox passed 2**31 - 1
# events: about four months at 100 calls/s. tests/test_migrations.py (_drift) keeps this in step.
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def ts_column(nullable: bool = False) -> Any:
    return sa.Column(UtcDateTime(), nullable=nullable)


def json_column(nullable: bool = False) -> Any:
    return sa.Column(sa.JSON, nullable=nullable)


def enum_column(enum: type, name: str) -> Any:
    # Stored as plain strings (no native ENUM type) so the same migration runs on both engines
    # and adding a value needs no ALTER TYPE.
    return sa.Column(
        sa.Enum(enum, name=name, native_enum=False, values_callable=_values, length=32),
        nullable=False,
    )


def _values(enum: type) -> list[str]:
    return [m.value for m in enum]  # type: ignore[attr-defined]
