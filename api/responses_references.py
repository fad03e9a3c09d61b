"""The items a Responses request's references stand for: references to output items of this
gateway's earlier answers (`msg_…`, `fc_…`), read from those answers as stored for replays
(the receipt's artifact, the caller's tenant only). A request without references makes none of
these reads.

A referenced answer goes into the new call's input, to whichever deployment that call is
routed to: a reference to an answer produced under a higher data classification than the
call's is refused (its receipt keeps the classification, migration 0023), as sending it would
be sending that data under a classification the tenant's policy routes more loosely (an answer
of a Restricted call, made on a Local deployment, sent to an External one by an Internal
call)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import datetime
from typing import Any

from fastapi.exceptions import RequestValidationError
from sqlalchemy import select
from sqlmodel import col

from api.problems import Problem, body_refused
from api.replays import FILED_WAIT_SECONDS
from api.responses_answers import answered_by, kept_items
from api.responses_shapes import ResponsesIn, item_kind, references
from api.runtime import Runtime
from domain.failures import STORE_RETRY_AFTER_SECONDS
from domain.invocation import invoke_workflow_id
from domain.policy import DataClassification
from store.tables import InvocationReceiptRow

# The answers one request may refer to: their receipts are read in one statement. The AI SDK
# refers to the text items of every earlier answer of a conversation, so a long one refers to
# hundreds (a cap of 128 ended such a conversation for good at its 129th turn).
MAX_REFERENCED_ANSWERS = 1000
# Their files are read READS_AT_ONCE at a time: the artifact volume's pool is small (4 threads,
# store/artifact_files.py) and every call's answer is written through it, and a thousand reads
# queued at once held other tenants' writes past their bound.
READS_AT_ONCE = 2
_Receipt = InvocationReceiptRow
# The classification of an answer whose receipt was claimed before receipts kept it (migration
# 0023; the column is null): Internal, the classification of every call sent without one,
# which nearly all were. So a conversation of such calls goes on across the upgrade. An answer
# of a Confidential or Restricted call claimed before the migration reads as Internal too: its
# reference is not refused from an Internal call, until the tenant's retention removes it.
UNRECORDED = DataClassification.INTERNAL
# Said of a reference whose answer was produced under a higher classification than the call's.
# It names neither the answer's classification nor its content: only that it is higher.
_ABOVE = (
    "refers to an answer produced under a higher data classification than this call's "
    "({call}): its content is not sent under a lower one; send this call with the "
    "X-Data-Classification the answer was produced under, or higher"
)


async def kept(
    runtime: Runtime, tenant: str, body: ResponsesIn, classification: DataClassification
) -> dict[str, dict[str, Any] | None]:
    """The items the input's references to this gateway's own output items stand for, by id,
    read from their answers as stored for replays; None for one whose answer is not kept (past
    the tenant's retention, another tenant's, never stored). Other ids are left out. A
    reference to an answer of a higher data classification than the call's (`classification`)
    is a 400 naming it, before any answer is read."""
    answers = {ref: answered_by(ref) for ref in references(body)}
    wanted = {answer for answer in answers.values() if answer is not None}
    if not wanted:
        return {}
    if len(wanted) > MAX_REFERENCED_ANSWERS:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "input"),
                    "msg": f"refers to items of more than {MAX_REFERENCED_ANSWERS} answers: "
                    "send the items themselves",
                    "input": None,
                }
            ]
        )
    rows = await _receipts(runtime, tenant, wanted)
    _refuse_above(body, classification, answers, rows)
    stored, late = await _stored(runtime, tenant, rows)
    if late:
        # A receipt closes before its answer is sent, but its file is written beside the close
        # (activities/invoke_close.py), and a close the store refused is the workflow's: the
        # next request of a quick agent loop may come first. As a replay does, the answer is
        # awaited while its workflow runs, at most FILED_WAIT_SECONDS, then read again. Only
        # for the tenant's own receipts: ids of nothing cost no Temporal call.
        await _settled(runtime, tenant, late)
        stored |= (await _stored(runtime, tenant, await _receipts(runtime, tenant, late)))[0]
    # Parsed off the event loop: up to MAX_REFERENCED_ANSWERS stored answers, each as long as
    # an answer may be, held every stream of the process while they were read.
    items = await asyncio.to_thread(_items_of, stored)
    return {
        ref: items.get(answer, {}).get(ref) for ref, answer in answers.items() if answer is not None
    }


def _items_of(stored: dict[uuid.UUID, bytes]) -> dict[uuid.UUID, dict[str, dict[str, Any]]]:
    return {answer: kept_items(answer, data) for answer, data in stored.items()}


# A receipt as these reads need it: invocation id, answer file, end, data classification.
_Row = tuple[uuid.UUID, str | None, datetime | None, str | None]


async def _receipts(runtime: Runtime, tenant: str, answers: set[uuid.UUID]) -> list[_Row]:
    """The tenant's receipts of these invocations (one statement)."""
    async with runtime.sessions() as session:
        rows = (
            await session.execute(
                select(
                    col(_Receipt.invocation_id),
                    col(_Receipt.output_artifact_ref),
                    col(_Receipt.ended_at),
                    col(_Receipt.data_classification),
                )
                .where(col(_Receipt.tenant_id) == tenant)
                .where(col(_Receipt.invocation_id).in_(answers))
            )
        ).all()
    return [(answer, ref, ended, classified) for answer, ref, ended, classified in rows]


def produced_under(stored: str | None) -> DataClassification:
    """The classification an answer was produced under, as its receipt keeps it: UNRECORDED
    for a receipt from before the column; a value that is none of the classifications (never
    written so) as the highest, Restricted, so that it is refused rather than let through."""
    if stored is None:
        return UNRECORDED
    try:
        return DataClassification(stored)
    except ValueError:
        return DataClassification.RESTRICTED


def _refuse_above(
    body: ResponsesIn,
    classification: DataClassification,
    answers: dict[str, uuid.UUID | None],
    rows: list[_Row],
) -> None:
    """A 400 naming the first reference (`input.N.id`) whose answer's receipt says it was
    produced under a higher data classification than the call's. Checked on the receipt alone,
    open or closed, before any file is read or workflow awaited: the classification is the
    claim's. Ids with no receipt of the tenant's are left to the mapping's refusals."""
    above = {
        answer
        for answer, _, _, stored in rows
        if produced_under(stored).more_sensitive_than(classification)
    }
    if not above or isinstance(body.input, str):
        return
    for index, item in enumerate(body.input):
        ref = item.get("id")
        named = isinstance(ref, str) and answers.get(ref) in above
        if named and item_kind(item) == "item_reference":
            raise body_refused(("input", index, "id"), _ABOVE.format(call=classification.value))


async def _stored(
    runtime: Runtime, tenant: str, rows: list[_Row]
) -> tuple[dict[uuid.UUID, bytes], set[uuid.UUID]]:
    """The stored answers these receipts name that the tenant's artifact volume holds; and the
    invocations whose answer may be on its way: the receipt still open, or closed naming a
    file not found (written yet, or removed by retention)."""
    files = runtime.invoke.activities.files
    named = [(answer, ref) for answer, ref, ended, _ in rows if ref and ended is not None]
    try:
        gate = asyncio.Semaphore(READS_AT_ONCE)

        async def one(ref: str) -> bytes | None:
            async with gate:
                return await files.get(tenant, ref)

        read = await asyncio.gather(*(one(ref) for _, ref in named))
    except OSError:  # the volume did not answer in time (store/artifact_files.py)
        raise Problem(
            503,
            "The stored answers this request refers to could not be read; retry after the "
            "indicated delay.",
            headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
        ) from None
    stored = {answer: data for (answer, _), data in zip(named, read, strict=True) if data}
    late = {
        answer for answer, ref, ended, _ in rows if ended is None or (ref and answer not in stored)
    }
    return stored, late


async def _settled(runtime: Runtime, tenant: str, answers: set[uuid.UUID]) -> None:
    """Until these invocations' workflows have ended, at most FILED_WAIT_SECONDS: one that
    ended long ago, or is gone from Temporal, answers at once."""
    client = await runtime.temporal()
    if client is None:
        return

    async def ended(answer: uuid.UUID) -> None:
        handle = client.get_workflow_handle(invoke_workflow_id(tenant, answer))
        # Failed, timed out, not found or not answering: the answer is read again either way.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), FILED_WAIT_SECONDS)

    await asyncio.gather(*(ended(answer) for answer in answers))
