"""The receipt as every surface shows it: the spec's InvocationReceipt fields in camelCase
(plus cachedInputTokens, cacheWriteInputTokens, timeToFirstTokenMs, providerRequestId, buffered
and providerAttempt), timestamps RFC 3339 with a zone, the cost a fixed-point string
(domain/amounts.py: it was `0E-8` for a free call). `/factory/runs/{runId}/model-receipts`
lists them; `/gateway/*` answers with the same receipt, read back once it is final, plus what
only the call itself knows (why it failed, what a fallback replaced). Its fields are the receipt
mapping's shown ones (`domain/receipt_fields.SHOWN`; tests/test_receipt_fields.py holds them
equal)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from domain.amounts import PlainDecimal
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationSummary
from store.tables import InvocationReceiptRow


class Receipt(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        from_attributes=True,
        alias_generator=to_camel,
        serialize_by_alias=True,
    )

    invocation_id: uuid.UUID
    tenant_id: str
    project_id: str
    run_id: uuid.UUID | None
    attempt_id: uuid.UUID | None
    profile_id: str
    deployment_id: str
    route_plan_id: uuid.UUID | None
    fallback_used: bool
    request_hash: str
    idempotency_key: str
    policy_decision_id: uuid.UUID
    outcome: InvocationOutcome
    usage_status: UsageStatus
    input_tokens: int | None
    output_tokens: int | None
    cached_input_tokens: int | None
    # Of the input, the part written to the provider's prompt cache (null: none reported).
    cache_write_input_tokens: int | None = None
    estimated_cost_usd: PlainDecimal | None
    pricing_revision: str
    latency_ms: int | None
    time_to_first_token_ms: int | None
    output_artifact_ref: str | None
    provider_request_id: str | None
    started_at: datetime
    ended_at: datetime | None
    # Beyond the spec: the answer was held until complete (never Partial), issue 20, and which
    # provider attempt answered, counting retries and fallbacks from 1 (null: none was made).
    buffered: bool = False
    provider_attempt: int | None = None


class CallReceipt(Receipt):
    """A gateway call's receipt: the stored one, and the call's own account of its end."""

    error_kind: str | None = None
    error_reason: str | None = Field(default=None, description="the provider's words, no content")
    fallback_from: str | None = None
    fallback_reason: str | None = None


def call_receipt(row: InvocationReceiptRow, summary: InvocationSummary) -> CallReceipt:
    receipt = Receipt.model_validate(row)
    return CallReceipt(
        **receipt.model_dump(by_alias=False),
        error_kind=summary.error_kind,
        error_reason=summary.error_reason,
        fallback_from=summary.fallback_from,
        fallback_reason=summary.fallback_reason,
    )
