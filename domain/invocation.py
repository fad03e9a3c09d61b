"""What crosses the invocation workflow's boundary: ids, hashes, routing and usage — never the
prompt or the output, which stay in the API process's memory and the artifact store."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, Field

from domain.enums import InvocationOutcome, Modality, UsageStatus

_NAMESPACE = uuid.UUID("2f1d8c3e-7a0b-5c2e-8d4f-3b6a9e1c0d57")


class Operation(StrEnum):
    CHAT = "chat"
    EMBED = "embed"
    RERANK = "rerank"


# The texts one embed call carries at most, on every surface (OpenAI's own limit).
MAX_EMBED_INPUTS = 2048


class Target(BaseModel):
    """One candidate deployment of the run's route plan, in route order."""

    deployment_id: str
    provider: str
    model: str
    endpoint_ref: str
    # What the fallback rules need to judge this candidate without I/O.
    privacy_class: str | None = None
    external: bool = False
    context_window_tokens: int | None = None
    embedding_compatibility: str | None = None
    # The modality of the profile it serves: a Rerank profile's deployment is called through
    # the rerank adapter whatever its provider (an OpenAI-compatible server's /rerank).
    modality: Modality | None = None


class AttemptTimeouts(BaseModel):
    """Seconds one attempt may take: to connect, to the response's first byte (connecting
    included), to the first token, between events once streaming, and in all. The invocation's
    overall budget still bounds every attempt together."""

    connect: float = Field(default=5.0, gt=0)
    first_byte: float = Field(default=30.0, gt=0)
    first_token: float = Field(default=30.0, gt=0)
    idle: float = Field(default=30.0, gt=0)
    attempt: float = Field(default=120.0, gt=0)


class InvocationInput(BaseModel):
    invocation_id: uuid.UUID
    tenant_id: str
    project_id: str
    run_id: uuid.UUID | None = None
    attempt_id: uuid.UUID | None = None
    profile_id: str
    route_plan_id: uuid.UUID | None = None
    policy_decision_id: uuid.UUID
    idempotency_key: str
    request_hash: str
    operation: Operation = Operation.CHAT
    targets: list[Target] = Field(min_length=1)
    pricing_revision: str
    # The API process that holds the request in memory: the hub token of this call and the
    # task queue only that process polls.
    caller_token: str
    caller_queue: str
    # When the API process claimed the receipt, before it started this workflow (the receipt's
    # `started_at`): the workflow's closer closes that claim only and claims nothing itself. A
    # claim that is gone was undone by the API when it gave up on the start (the caller was
    # told nothing was claimed, and the key is theirs to send again), and a claim made since is
    # the caller's retry. None: claimed by the activity (or a history from before the field).
    claimed_at: datetime | None = None
    timeout_seconds: float = Field(gt=0)
    fallback_enabled: bool = False
    data_classification: str = "Internal"
    # The plan's privacy guarantee: every answering deployment has one of these classes.
    allowed_privacy_classes: list[str] = Field(default_factory=list)
    # The plan's first candidate, and why it is not among `targets` when it was passed over
    # before anything was called (Degraded, unhealthy, …): an answer from any other deployment
    # is a fallback. None (histories from before these fields): the first target.
    primary_deployment_id: str | None = None
    primary_passed_over: str | None = None
    # The caller hears the answer only once it is complete (domain.buffering: a non-stream
    # call, or a stream held on a Batch profile or at the caller's request): nothing an
    # attempt received has reached the caller, so a stream cut or stalled mid-way is a failed
    # attempt like any other (retried, fallen back from), never Partial. Issue 20.
    buffered: bool = False


class Disposition(StrEnum):
    DONE = "done"
    # The request is not in this process's memory (the call landed elsewhere, or the process
    # that had it is gone): nothing was claimed, nothing was called.
    NOT_HERE = "not-here"
    # Another execution already claimed this receipt: the provider must not be called again.
    ALREADY_CLAIMED = "already-claimed"
    # The store could not take the claim: no receipt, no provider call, the key stays unused.
    # Also the workflow's close finding nothing of its own open (`close_abandoned`): the API
    # undid its claim (a start it gave up on), or the call closed it first.
    NOT_CLAIMED = "not-claimed"
    # The call ended but its receipt could not be written: the workflow writes it (retried
    # until the store answers) from the summary it carries.
    FINALIZE = "finalize"


class InvocationSummary(BaseModel):
    """The receipt's story without content, as the workflow returns it."""

    invocation_id: uuid.UUID
    disposition: Disposition = Disposition.DONE
    outcome: InvocationOutcome | None = None
    usage_status: UsageStatus | None = None
    deployment_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    # Of the input, the part the provider wrote to its prompt cache, as it reported it: on the
    # answer (Messages' `cache_creation_input_tokens`) and on the receipt, which a replay and
    # the reconciler's price read it from.
    cache_write_input_tokens: int | None = None
    estimated_cost_usd: Decimal | None = None
    latency_ms: int | None = None
    time_to_first_token_ms: int | None = None
    output_artifact_ref: str | None = None
    provider_request_id: str | None = None
    error_kind: str | None = None
    # The provider's own words (never content), e.g. why a content policy refused.
    error_reason: str | None = None
    fallback_used: bool = False
    fallback_from: str | None = None
    fallback_reason: str | None = None
    # Why the receipt closed (domain.close_reason), as a replay reads it back from the store.
    close_reason: str | None = None
    # The answer was held until complete (InvocationInput.buffered), and which provider attempt
    # of the call (1 for the first, counting retries and fallbacks) answered or was the last.
    buffered: bool = False
    provider_attempt: int | None = None

    def durable(self) -> InvocationSummary:
        """This summary as a workflow's history keeps it: without the provider's words. No
        redaction makes them certain to carry no content (llama.cpp's parse error quotes the
        prompt unquoted, vLLM's validation error its short strings), and a history is kept for
        its retention. The live caller is told them; a replay of the key is told the kind."""
        if self.error_reason is None:
            return self
        return self.model_copy(update={"error_reason": None})


class FinalizeInput(BaseModel):
    tenant_id: str
    summary: InvocationSummary
    # The invocation's metric dimensions, counted once the workflow's close is written (the
    # call's own close counts them as it hands the answer over). None in a history from before
    # they were carried: that close is written, not counted.
    profile_id: str | None = None
    provider: str | None = None


def provider_of(data: InvocationInput, deployment_id: str | None) -> str:
    """The provider of the target that answered (the first target when none did)."""
    found = next((t for t in data.targets if t.deployment_id == deployment_id), data.targets[0])
    return found.provider


# The workflow type every invocation starts (workflows/invoke.py).
INVOKE_WORKFLOW = "InvokeModel"


def invocation_id(tenant_id: str, idempotency_key: str) -> uuid.UUID:
    """Stable per (tenant, key): every retry of a keyed request names the same invocation."""
    return uuid.uuid5(_NAMESPACE, f"{tenant_id}\x00{idempotency_key}")


def closer_queue(invocation_queue: str) -> str:
    """The queue only the standalone workers poll, for the closes an API process's store refused
    (workflows/invoke.py). On the shared invocation queue their retries went to that very
    process as often as not, eagerly at first: in one CI run six attempts in a row failed on its
    severed connection, and its caller waited 36 s. A queue of its own rather than the shared
    worker's: a worker from before it never polls it (the close falls back to the invocation
    queue), where the shared worker would take the task and fail it as unregistered."""
    return f"{invocation_queue}-closers"


def invoke_workflow_id(tenant_id: str, invocation: uuid.UUID | str) -> str:
    """The id of an invocation's InvokeModel workflow (read back by `invocation_of`)."""
    return f"invoke/{tenant_id}/{invocation}"


def invocation_of(workflow_id: str) -> uuid.UUID | None:
    """The invocation an InvokeModel workflow id names (`invoke_workflow_id`)."""
    head, _, tail = workflow_id.rpartition("/")
    if not head.startswith("invoke/"):
        return None
    try:
        return uuid.UUID(tail)
    except ValueError:
        return None
