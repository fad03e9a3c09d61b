"""The invoke path's three statements straight on asyncpg (PostgreSQL only): the catalog
version, the claim and the finalise, on a pool of their own. The SQL is not written here: each
statement is the SQLAlchemy one of `store/receipt_statements.py`, compiled once for the asyncpg
dialect, with its parameter order and each parameter's bind conversion (an enum to its value,
a timestamp to UTC, JSON to text) taken from the compiled statement. So the SQL and the stored
values are what SQLAlchemy would send, and asyncpg prepares each statement once per connection
(its statement cache), as SQLAlchemy's asyncpg dialect does.

Why (bench/bench_receipt_statements.py, 2026-12-01, real PostgreSQL, docs/benchmarks.md
"Tried: raw asyncpg for the three statements"): through SQLAlchemy's asyncio layer the three
statements cost about 0.8 ms of client CPU per invocation; most of it is the adaptor (a greenlet
switch per call, the cursor emulation, the result objects), not asyncpg.

- No pre-ping, no reset query on release (asyncpg's default `reset` is a round trip per
  checkout: `SELECT pg_advisory_unlock_all(); CLOSE ALL; …`). Autocommit: each statement is
  atomic by itself, nothing is left open on a connection.
- A statement whose connection dropped (a database restart) is tried once more on a fresh
  connection; then the error surfaces. asyncpg's errors are raised as SQLAlchemy's (a
  `DBAPIError` subclass, `connection_invalidated` on a dropped connection), so every caller and
  the API's 503 handler see what they saw before; a refused connect stays an `OSError`.
- Every wait is bounded (`wait`: a connection from the pool, then the statement's answer).
  A database that stops answering without closing its connections (a failover that leaves
  them to a host that is gone, a partition) held every call on them until TCP gave up, about
  15 minutes (tests/test_store_silent.py). A statement past the bound drops its connection,
  whose answer may still come, and surfaces as the store being away, not tried again: its
  wait is spent. It is raised as `StatementUnanswered`, since the statement may still be
  applied once the way to the server is back (api/given_up_claims.py undoes such a claim).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import asyncpg
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from store.outage import StatementUnanswered

APPLICATION_NAME = "model-router-invoke"


class Compiled:
    """One statement as asyncpg takes it: the dialect's SQL (`$1::UUID, …`) and, in the order
    of its placeholders, each parameter's name and bind conversion."""

    def __init__(self, engine: AsyncEngine, stmt: Any, keys: Iterable[str] | None = None) -> None:
        dialect = engine.dialect
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys) if keys else None)
        self.sql: str = compiled.string
        order: list[tuple[str, Callable[[Any], Any] | None, Any]] = []
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:  # the caller's
                order.append((name, convert, None))
            elif bind.value is not None and bind.callable is None:  # a literal (`id == 1`)
                order.append(("", None, bind.value if convert is None else convert(bind.value)))
            else:
                # A column default SQLAlchemy fills in at execution: every column these
                # statements write is given by the caller (domain/receipt_fields.py).
                raise ValueError(f"{name}: a column default, not a parameter of the statement")
        self._order = tuple(order)

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        return [
            constant if not name else params[name] if convert is None else convert(params[name])
            for name, convert, constant in self._order
        ]


async def _no_reset(_conn: asyncpg.Connection) -> None:
    """Nothing to undo on release: autocommit statements, no session state, no LISTEN."""


class AsyncpgPath:
    """The pool and the one way to run a compiled statement on it (a value back, or None when
    it returned no row)."""

    def __init__(self, engine: AsyncEngine, max_size: int, wait: float | None = None) -> None:
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        # Options of SQLAlchemy's adaptor, not of asyncpg.connect.
        for key in (
            "prepared_statement_cache_size",
            "prepared_statement_name_func",
            "async_fallback",
        ):
            kwargs.pop(key, None)
        # Named, so that pg_stat_activity tells this pool's connections from the others.
        kwargs["server_settings"] = {
            **kwargs.get("server_settings", {}),
            "application_name": APPLICATION_NAME,
        }
        self._connect: tuple[list[Any], dict[str, Any]] = (list(args), dict(kwargs))
        self._max_size = max_size
        self._wait = wait
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def _ready(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    args, kwargs = self._connect
                    # Opened as the load needs them, then kept (as the SQLAlchemy pool kept its
                    # pool_size): a new connection is a backend fork on the server.
                    self._pool = await asyncpg.create_pool(
                        *args,
                        min_size=0,
                        max_size=self._max_size,
                        max_inactive_connection_lifetime=0,
                        reset=_no_reset,
                        **kwargs,
                    )
        return self._pool

    async def fetchval(self, stmt: Compiled, params: Mapping[str, Any]) -> Any:
        values = stmt.args(params)
        for attempt in (1, 2):
            pool = await self._ready()
            try:
                conn = await pool.acquire(timeout=self._wait)
            except TimeoutError as exc:  # no connection free, or a new one not answering
                raise _unanswered(exc, stmt.sql) from exc
            except asyncpg.PostgresError as exc:  # e.g. "the database system is starting up"
                raise _translate(exc, stmt.sql, lost=False) from exc
            try:
                return await conn.fetchval(stmt.sql, *values, timeout=self._wait)
            except TimeoutError as exc:
                conn.terminate()  # its answer may still come: never hand it out again
                raise StatementUnanswered(stmt.sql, None, exc, connection_invalidated=True) from exc
            except (*_DROPPED, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                lost = _dropped(conn, exc)
                if attempt == 1 and lost:
                    continue
                raise _translate(exc, stmt.sql, lost=lost) from exc
            finally:
                await pool.release(conn)  # a no-op for one the pool already took back
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


# What a connection that died (a database restart) raises on its next statement: the socket's
# error, the connection closed under the statement, the server's own notice that it is going
# down (or not up yet), or — when that notice arrived while the connection sat idle in the pool
# — asyncpg's "cannot switch to state …; another operation is in progress" (the statement was
# never sent). Seen in tests/test_fault_postgres.py's stop under load.
_DROPPED: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.InternalClientError,
)


def _dropped(conn: Any, exc: BaseException) -> bool:
    """Whether `exc` says the connection is gone; such a connection is closed so the pool opens
    a fresh one for the next statement."""
    try:
        closed = bool(conn.is_closed())
    except asyncpg.InterfaceError:  # the pool already took back a connection that died
        return True
    if isinstance(exc, _DROPPED):
        if not closed:
            conn.terminate()
        return True
    return closed


# asyncpg's errors as SQLAlchemy's asyncpg dialect translates them: a constraint or the
# statement at fault is a bug (the API answers 500); the rest (refused, shutting down, starting
# up, connection lost) is the store being away (a 503), as any other DBAPIError.
_KINDS: tuple[tuple[type[BaseException], type[sa_exc.DBAPIError]], ...] = (
    (asyncpg.IntegrityConstraintViolationError, sa_exc.IntegrityError),
    (asyncpg.SyntaxOrAccessError, sa_exc.ProgrammingError),
    (asyncpg.InterfaceError, sa_exc.InterfaceError),
)


def _unanswered(exc: TimeoutError, sql: str) -> sa_exc.OperationalError:
    """A wait for a connection past its bound, as the store being away (store/outage.is_outage).
    Nothing was sent; a statement sent and unanswered is `StatementUnanswered`."""
    return sa_exc.OperationalError(sql, None, exc, connection_invalidated=True)


def _translate(exc: BaseException, sql: str, *, lost: bool) -> BaseException:
    if isinstance(exc, OSError) and not lost:
        return exc
    kind = next((mapped for raw, mapped in _KINDS if isinstance(exc, raw)), sa_exc.OperationalError)
    return kind(sql, None, exc, connection_invalidated=lost)
