"""Persistence: SQLModel tables, tenant-scoped repositories, Alembic migrations."""
