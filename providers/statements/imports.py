"""Statement files for providers without a usage API (self-hosted pools, resellers): CSV with a
header row, or JSON lines, one usage record per row, token counts only.

Fields (camelCase, as every JSON body of the API): `provider`; either `providerRequestId`, or
`bucketStart` (RFC 3339 with a zone, aligned to the width) + `bucketWidth` (`1m`, `1h`, `1d`) +
`model` [+ `key`, the endpointRef whose credential was billed]; `inputTokens`, `outputTokens`
[, `cachedInputTokens` (cache reads) and `cacheWriteInputTokens` (cache writes), parts of the
input]. Any other field is refused, so no prompt or output can ride along. A file is all or
nothing: one bad row and nothing is imported.

A row that could settle usage a provider-wide source reports (OpenAI's Usage API, Anthropic's
usage report, when configured: activities/provider_wide.py) is refused, naming `provider`: that
usage is shared among every tenant on the key, and one tenant's own figures for it moved its
usage onto the others' receipts (domain/reconciliation.py).
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from domain.deployments import PROVIDER_NAME, looks_like_credential
from domain.provider_reports import TOKEN_COUNT_MAX
from domain.statement_coverage import ProviderWide, reaches_provider_wide
from domain.statements import WIDTHS, BucketWidth, StatementLine

CSV = "csv"
JSONL = "jsonl"
_JSONL_TYPES = {
    "application/jsonl",
    "application/x-jsonlines",
    "application/x-ndjson",
    "application/json-lines",
    "application/jsonlines",
}
MAX_ERRORS = 50


def format_of(content_type: str | None) -> str | None:
    media = (content_type or "").split(";")[0].strip().lower()
    if media in ("text/csv", "application/csv"):
        return CSV
    if media in _JSONL_TYPES:
        return JSONL
    return None


# What a row may hold so that it is stored, and reconciled, as read. The reconciler writes a
# line's counts into the receipt's INTEGER token columns (TOKEN_COUNT_MAX), and a bucket's start
# and end must be timestamps PostgreSQL and Python both hold: a count past 2^31 - 1, or a bucket
# in the year 1 or 9999, reached the store (or overflowed on its way there) and was a 500
# (2026-12-04).
BUCKET_YEARS = range(1970, 9999)


class ImportRow(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    provider: str = Field(pattern=PROVIDER_NAME)
    provider_request_id: str | None = Field(
        default=None, alias="providerRequestId", min_length=1, max_length=200
    )
    bucket_start: datetime | None = Field(default=None, alias="bucketStart")
    bucket_width: BucketWidth | None = Field(default=None, alias="bucketWidth")
    model: str | None = Field(default=None, min_length=1, max_length=200)
    key: str | None = Field(default=None, min_length=1, max_length=400)
    input_tokens: int = Field(alias="inputTokens", ge=0, le=TOKEN_COUNT_MAX)
    output_tokens: int = Field(alias="outputTokens", ge=0, le=TOKEN_COUNT_MAX)
    cached_input_tokens: int = Field(default=0, alias="cachedInputTokens", ge=0, le=TOKEN_COUNT_MAX)
    cache_write_input_tokens: int = Field(
        default=0, alias="cacheWriteInputTokens", ge=0, le=TOKEN_COUNT_MAX
    )


class RowError(BaseModel):
    line: int
    field: str | None = None
    message: str


class StatementFileError(Exception):
    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} invalid row(s)")
        self.errors = errors


def _records(text: str, fmt: str) -> list[tuple[int, Any]]:
    if "\x00" in text:
        # No text column holds one (PostgreSQL refuses it): a CSV cell with a NUL was a 500.
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise StatementFileError([RowError(line=line, message="a NUL character")])
    if fmt == CSV:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames:
            raise StatementFileError([RowError(line=1, message="no header row")])
        records: list[tuple[int, Any]] = []
        try:
            for row in reader:
                if None in row:
                    records.append((reader.line_num, "more cells than the header has columns"))
                    continue
                records.append(
                    (reader.line_num, {k: v for k, v in row.items() if v not in ("", None)})
                )
        except csv.Error as exc:  # a cell past the csv module's field limit (128 KiB): was a 500
            raise StatementFileError(
                # line_num is the last line read whole; the cell is on the next.
                [RowError(line=reader.line_num + 1, message=f"not CSV the import reads: {exc}")]
            ) from None
        return records
    out: list[tuple[int, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append((number, json.loads(raw)))
        except ValueError:
            out.append((number, "not a JSON object"))
    return out


def _provider_wide_problem(row: ImportRow, covered: ProviderWide) -> str | None:
    by_request_id = row.provider_request_id is not None
    if not reaches_provider_wide(covered, row.provider, row.key, by_request_id):
        return None
    p = row.provider
    own = f"{p}'s own usage statement, shared among every tenant on the key"
    if covered[p] is None:
        return f"the usage of {p} comes from {own}; an import cannot settle it"
    if by_request_id:
        return (
            f"the usage of some {p} keys comes from {own}, and a providerRequestId row may name "
            "a call on any key: give bucketStart, bucketWidth, model and a key it does not cover"
        )
    if row.key is None:
        return f"the usage of some {p} keys comes from {own}: name a key it does not cover"
    return f"the usage of this {p} key comes from {own}; an import cannot settle it"


def _cross_checks(row: ImportRow, covered: ProviderWide) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    refused = _provider_wide_problem(row, covered)
    if refused is not None:
        problems.append(("provider", refused))
    if row.cached_input_tokens > row.input_tokens:
        problems.append(("cachedInputTokens", "cached input tokens are part of inputTokens"))
    elif row.cached_input_tokens + row.cache_write_input_tokens > row.input_tokens:
        problems.append(
            ("cacheWriteInputTokens", "cache reads and writes are parts of inputTokens")
        )
    if row.key is not None and looks_like_credential(row.key):
        problems.append(("key", "key names the endpointRef, never a credential"))
    if row.provider_request_id is not None:
        return problems
    for name, value in (
        ("bucketStart", row.bucket_start),
        ("bucketWidth", row.bucket_width),
        ("model", row.model),
    ):
        if value is None:
            problems.append((name, "required when providerRequestId is absent"))
    if row.bucket_start is not None:
        if row.bucket_start.tzinfo is None:
            problems.append(("bucketStart", "needs a time zone (e.g. Z)"))
        elif row.bucket_start.year not in BUCKET_YEARS:
            years = f"{BUCKET_YEARS.start}-{BUCKET_YEARS.stop - 1}"
            problems.append(("bucketStart", f"outside the years {years}"))
        elif row.bucket_width is not None:
            step = int(WIDTHS[row.bucket_width].total_seconds())
            if int(row.bucket_start.timestamp()) % step or row.bucket_start.microsecond:
                problems.append(("bucketStart", f"not aligned to a {row.bucket_width} bucket"))
    return problems


def parse(text: str, fmt: str, covered: ProviderWide | None = None) -> list[tuple[int, ImportRow]]:
    """Every row with its line number, or StatementFileError listing every bad row.
    `covered`: the providers a provider-wide source reports (`provider_wide()`); a row that
    could settle their usage is a bad row."""
    rows: list[tuple[int, ImportRow]] = []
    errors: list[RowError] = []
    for line, record in _records(text, fmt):
        if not isinstance(record, dict):
            message = record if isinstance(record, str) else "not a JSON object"
            errors.append(RowError(line=line, message=message))
            continue
        try:
            row = ImportRow.model_validate(record)
        except ValidationError as exc:
            errors.extend(
                RowError(
                    line=line,
                    field=".".join(str(p) for p in e["loc"]) or None,
                    message=str(e["msg"]),
                )
                for e in exc.errors(include_input=False)
            )
            continue
        problems = _cross_checks(row, covered or {})
        errors.extend(RowError(line=line, field=f, message=m) for f, m in problems)
        if not problems:
            rows.append((line, row))
    if errors:
        raise StatementFileError(errors[:MAX_ERRORS])
    if not rows:
        raise StatementFileError([RowError(line=1, message="the file has no usage rows")])
    return rows


def statement_lines(
    import_id: uuid.UUID, tenant_id: str, rows: list[tuple[int, ImportRow]]
) -> list[StatementLine]:
    lines = []
    for number, row in rows:
        end = (
            row.bucket_start + WIDTHS[row.bucket_width]
            if row.bucket_start is not None and row.bucket_width is not None
            else None
        )
        lines.append(
            StatementLine(
                statement_ref=f"import/{import_id}#L{number}",
                source=f"import/{import_id}",
                tenant_id=tenant_id,
                provider=row.provider,
                model=row.model,
                key=row.key,
                bucket_start=row.bucket_start if row.provider_request_id is None else None,
                bucket_end=end if row.provider_request_id is None else None,
                provider_request_id=row.provider_request_id,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                cached_input_tokens=row.cached_input_tokens,
                cache_write_input_tokens=row.cache_write_input_tokens,
            )
        )
    return lines
