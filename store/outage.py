"""Whether a database error means the store is away (an outage: the caller may come back) or
that our statement, or the data it carried, is at fault (a bug, or input the API should have
refused): the API answers the first with a 503 and `Retry-After`, the second with a 500.

SQLAlchemy's asyncpg dialect raises only integrity and syntax errors as their own classes. A
data exception (SQLSTATE class 22: a value beyond its column's length or precision) comes as a
plain `DBAPIError`, like a refused or lost connection, and was answered as an outage: a 503
that asks the caller to retry a request that can never succeed (a pricing revision name of 101
characters did, 2026-12-04). So the SQLSTATE the driver reports decides.

A checkout that waited out the pool's timeout (every pooled connection busy: a burst, or
statements held up by a slow server) is SQLAlchemy's own `TimeoutError`, neither a DBAPIError
nor an OSError: it was a 500, though nothing is wrong with the request and the same request
succeeds once a connection is free.
"""

from __future__ import annotations

from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

# Every exception is_outage may call an outage, for the handlers that map them (api/problems.py
# and the console's): one list, so a kind added here is answered as a 503 everywhere.
OUTAGE_KINDS: tuple[type[Exception], ...] = (DBAPIError, OSError, PoolTimeout)


class StatementUnanswered(OperationalError):
    """A statement that was sent and whose answer did not come within its bound: an outage like
    any other to the caller, but the statement may still be applied when the way to the server
    comes back (a write that lands after the caller was told it had not)."""


# SQLSTATE classes that blame the statement or its data: data exception, integrity constraint
# violation, syntax error or access rule violation.
_AT_FAULT = ("22", "23", "42")


def is_outage(exc: BaseException) -> bool:
    if not isinstance(exc, DBAPIError):
        # A refused connect, or no pooled connection free within the pool's timeout.
        return isinstance(exc, OSError | PoolTimeout)
    if exc.connection_invalidated:
        return True
    if isinstance(exc, IntegrityError | ProgrammingError | DataError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return not (isinstance(sqlstate, str) and sqlstate[:2] in _AT_FAULT)
