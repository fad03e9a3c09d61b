"""Usage statement imports: provider statements for providers without a usage API, which the
receipt reconciler then settles Unknown and Estimated receipts from."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from activities.provider_wide import provider_wide
from api.deps import RuntimeDep, SessionDep, require
from api.problems import Problem
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from providers.statements import imports
from store import statements
from store.db import transaction
from store.ops_tables import StatementImportRow

router = APIRouter(prefix="/factory/usage-statements", tags=["usage"])

Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]
_TYPE = "https://model-router.dev/problems/"


class StatementImport(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    import_id: uuid.UUID = Field(alias="importId")
    format: str
    lines: int
    statement_ref_prefix: str = Field(alias="statementRefPrefix")
    imported_at: datetime = Field(alias="importedAt")


def _view(row: StatementImportRow) -> StatementImport:
    return StatementImport(
        import_id=row.import_id,
        format=row.format,
        lines=row.lines,
        statement_ref_prefix=f"import/{row.import_id}",
        imported_at=row.imported_at,
    )


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise Problem(413, f"A statement file is at most {limit} bytes.")
    data = bytearray()
    async for chunk in request.stream():
        data.extend(chunk)
        if len(data) > limit:
            raise Problem(413, f"A statement file is at most {limit} bytes.")
    return bytes(data)


@router.post(
    "",
    status_code=201,
    response_model=StatementImport,
    operation_id="ImportUsageStatement",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/x-ndjson": {"schema": {"type": "string"}},
            },
        }
    },
    responses={
        200: {"description": "The same file was imported before; nothing new was stored"},
        422: {
            "description": "A row is invalid (each listed with its line and field), or names "
            "usage a provider-wide statement reports (field `provider`); nothing imported"
        },
    },
)
async def import_statement(request: Request, principal: Admin, runtime: RuntimeDep) -> JSONResponse:
    fmt = imports.format_of(request.headers.get("content-type"))
    if fmt is None:
        raise Problem(
            415,
            "Send the statement as text/csv or JSON lines (application/x-ndjson).",
            field="header.content-type",
        )
    raw = await _body(request, runtime.settings.usage_statement_max_bytes)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Problem(400, "The statement file is not UTF-8 text.", field="body") from None
    try:
        # A row for usage the provider's own statement reports, shared among every tenant on
        # the key, is refused: settled from one tenant's figures, it moved that tenant's usage
        # onto the others' receipts (domain/reconciliation.py).
        rows = imports.parse(text, fmt, provider_wide(runtime.settings))
    except imports.StatementFileError as exc:
        first = exc.errors[0]
        where = f"line {first.line}" + (f", {first.field}" if first.field else "")
        raise Problem(
            422,
            f"The statement has {len(exc.errors)} invalid row(s) ({where}: {first.message}); "
            "nothing was imported.",
            type_=_TYPE + "invalid-statement",
            errors=[e.model_dump(exclude_none=True) for e in exc.errors],
        ) from None
    content_hash = hashlib.sha256(raw).hexdigest()
    tenant = principal.tenant_id
    row = StatementImportRow(
        tenant_id=tenant, content_hash=content_hash, format=fmt, lines=len(rows)
    )
    try:
        async with transaction(runtime.sessions) as session:
            existing = await statements.find_import(session, tenant, content_hash)
            if existing is None:
                lines = imports.statement_lines(row.import_id, tenant, rows)
                await statements.record_import(session, row, lines)
    except IntegrityError:
        existing = None  # the same file, imported concurrently: answer with that import
        async with runtime.sessions() as session:
            existing = await statements.find_import(session, tenant, content_hash)
        if existing is None:
            raise
    if existing is not None:
        return JSONResponse(_view(existing).model_dump(mode="json", by_alias=True), 200)
    return JSONResponse(
        _view(row).model_dump(mode="json", by_alias=True),
        201,
        headers={"Location": f"/factory/usage-statements/{row.import_id}"},
    )


@router.get("", response_model=list[StatementImport], operation_id="ListUsageStatements")
async def list_statements(principal: Admin, session: SessionDep) -> list[StatementImport]:
    stmt = (
        select(StatementImportRow)
        .where(col(StatementImportRow.tenant_id) == principal.tenant_id)
        .order_by(col(StatementImportRow.imported_at).desc())
        .limit(200)
    )
    return [_view(r) for r in (await session.scalars(stmt)).all()]


@router.get("/{importId}", response_model=StatementImport, operation_id="GetUsageStatement")
async def get_statement(
    importId: uuid.UUID, principal: Admin, session: SessionDep
) -> StatementImport:
    row = await session.get(StatementImportRow, importId)
    if row is None or row.tenant_id != principal.tenant_id:
        raise Problem(404, f"No statement import {importId}.", field="importId")
    return _view(row)
