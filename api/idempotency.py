"""Idempotency-Key handling for keyed writes: a replay gets the stored answer, a different
body under the same key gets 409, nothing is ever executed twice for one key."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Annotated, Any

from fastapi import Header
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.problems import Problem
from store import idempotency
from store.db import transaction
from store.idempotency import RESERVED
from store.tables import IdempotencyRecordRow

log = logging.getLogger("model_router.api")

IdempotencyKey = Annotated[
    str,
    Header(alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/-]+$"),
]


def request_hash(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class IdempotencyStore:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], tenant_id: str, operation: str
    ) -> None:
        self._sessions = sessions
        self._tenant = tenant_id
        self._operation = operation

    async def _find(self, session: AsyncSession, key: str) -> IdempotencyRecordRow | None:
        return await idempotency.find(session, self._tenant, self._operation, key)

    def _answer(self, record: IdempotencyRecordRow, hash_: str) -> JSONResponse:
        if record.request_hash != hash_:
            raise Problem(
                409,
                "This Idempotency-Key was used with a different request body.",
                type_="https://model-router.dev/problems/idempotency-key-reused",
                field="header.Idempotency-Key",
            )
        return JSONResponse(
            record.response, status_code=record.status_code, headers={"Idempotent-Replay": "true"}
        )

    async def replay(self, key: str, hash_: str) -> JSONResponse | None:
        """The key's stored answer (a 409 for another body), or None: the key is reserved for
        this body, before the write runs. A key checked and then written to, its answer stored
        after, let the same key with another body run a second write: two requests at once,
        or one after an answer lost to a store blip, registered two deployments under one key.
        A key reserved by the same body whose answer was never stored (a 503 after the write)
        is this request's: the write runs again, which it takes as a replay."""
        try:
            async with transaction(self._sessions) as session:
                record = await self._find(session, key)
                if record is None:
                    idempotency.add(
                        session, self._tenant, self._operation, key, hash_, RESERVED, {}
                    )
        except IntegrityError:  # reserved by a request at the same moment
            async with self._sessions() as session:
                record = await self._find(session, key)
            assert record is not None
        if record is None or (record.status_code == RESERVED and record.request_hash == hash_):
            return None
        return self._answer(record, hash_)

    async def release(self, key: str, hash_: str) -> None:
        """The key this request reserved, given up: its write failed (refused, or its answer
        not known), and a request correcting the body may use the key. Kept, it was that
        body's for good: each corrected request a 409 for a key nothing was done under. A
        store that cannot take it leaves the reservation, which the same body still passes."""
        try:
            async with transaction(self._sessions) as session:
                await idempotency.release(session, self._tenant, self._operation, key, hash_)
        except Exception as exc:
            log.warning("idempotency key not released: %s", type(exc).__name__)

    async def remember(
        self, key: str, hash_: str, status: int, body: dict[str, Any]
    ) -> JSONResponse:
        """Store the answer of the key this request reserved."""
        async with transaction(self._sessions) as session:
            await idempotency.answer(session, self._tenant, self._operation, key, status, body)
        return JSONResponse(body, status_code=status)
