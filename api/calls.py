"""What a caller asked for (`Call`, its content in memory only) and the durable input of its
invocation, built from the call and the route it was given."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.runtime_types import InvokeConfig
from domain.buffering import holds_answer
from domain.invocation import InvocationInput, Operation, invocation_id
from domain.output_allowance import output_allowance
from domain.policy import DataClassification
from routing.routes import Route


@dataclass
class Call:
    """What the caller asked for, with the content kept in memory only."""

    profile_id: str
    project_id: str
    run_id: uuid.UUID | None
    attempt_id: uuid.UUID | None
    idempotency_key: str | None
    operation: Operation
    payload: dict[str, Any]  # the canonical request, hashed (never stored)
    # providers.types.ChatRequest; (texts, dimensions) to embed; (query, documents, topN)
    request: Any
    data_classification: DataClassification = DataClassification.INTERNAL
    needs_tools: bool = False
    needs_structured_output: bool = False
    # A budget for this call: its worst case (input estimate + the output allowance) must fit
    # at the profile's pricing revision, or the call is Denied before any provider sees it.
    budget_usd: Decimal | None = None
    max_output_tokens: int | None = None
    # Where the surface takes the profile id, for the problems that name it.
    profile_field: str = "body.model"
    # The caller sees no token before the answer is complete (a non-stream call): a provider
    # stream that breaks mid-way is then a failed attempt, retried or fallen back from.
    buffered: bool = False
    # A stream's X-Model-Router-Buffered: held (True) or passed through (False) whatever the
    # profile's latencyClass says; None lets it decide (domain.buffering).
    buffer_stream: bool | None = None


def hashed(call: Call) -> dict[str, Any]:
    """What a key's request hash is taken over: the operation, the profile, the request, and
    the data classification the caller gave it. The classification decides which deployments
    may serve the call (the tenant's policy), so a key sent again as Confidential after it was
    used as Internal is another request, a 409 `idempotency-key-reused`: hashed without it,
    the retry replayed the Internal answer, its classification silently ignored, even where
    the policy refuses that deployment for Confidential data. It is hashed only when it is not
    the default a call without one gets (Internal), so that the hash of every key used before
    it was hashed at all (nearly all sent without one) is unchanged: their retries still
    replay across the upgrade. An explicit Internal is the same request as none. (A key used
    before the upgrade with another classification is refused if sent again across it: a 409,
    retried with a new key, rather than a replay.)"""
    hashed: dict[str, Any] = {
        "op": call.operation.value,
        "profile": call.profile_id,
        **call.payload,
    }
    if call.data_classification is not DataClassification.INTERNAL:
        hashed["dataClassification"] = call.data_classification.value
    return hashed


def cap_output(call: Call, route: Route) -> int | None:
    """Caps a chat call's request at its output allowance on this route (the caller's limit
    within the profile's maxOutputTokens: domain.output_allowance), and returns it; None for
    an operation with no output tokens to cap. The request hash is the caller's own request,
    taken before: the same body replays whatever the profile's limit is now."""
    if call.operation is not Operation.CHAT:
        return None
    allowance = output_allowance(call.max_output_tokens, route.max_output_tokens)
    if call.request.max_tokens != allowance:
        call.request = call.request.model_copy(update={"max_tokens": allowance})
    return allowance


def invocation_input(
    tenant: str, key: str, hash_: str, call: Call, route: Route, config: InvokeConfig
) -> InvocationInput:
    """The workflow's input: ids, the route's targets and rules, never the content."""
    return InvocationInput(
        invocation_id=invocation_id(tenant, key),
        tenant_id=tenant,
        project_id=call.project_id,
        run_id=call.run_id,
        attempt_id=call.attempt_id,
        profile_id=call.profile_id,
        route_plan_id=route.route_plan_id,
        policy_decision_id=route.policy_decision_id,
        idempotency_key=key,
        request_hash=hash_,
        operation=call.operation,
        targets=route.targets,
        pricing_revision=route.pricing_revision,
        caller_token="",
        caller_queue=config.caller_queue,
        timeout_seconds=config.timeout_seconds,
        data_classification=call.data_classification.value,
        buffered=holds_answer(
            call.operation,
            whole=call.buffered,
            requested=call.buffer_stream,
            latency_class=route.latency_class,
        ),
        fallback_enabled=route.fallback_enabled,
        allowed_privacy_classes=route.allowed_privacy_classes,
        primary_deployment_id=route.primary_deployment_id,
        primary_passed_over=route.primary_passed_over,
    )
